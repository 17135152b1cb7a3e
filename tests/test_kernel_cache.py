"""What the kernel may cache, and when it must forget: a walk of a settled
tree is answered by the kernel alone; latest/ moves on after latest_ttl;
merged/ files are rebuilt (and re-read) as soon as a snapshot arrives."""
import os
import re
import time

from conftest import config_for, pprof_top, wait_for

OPS = ("LOOKUP", "GETATTR", "READDIR", "READ ")


def ops_since(log, mark):
    """Counts of FUSE requests in a -d log after the line holding mark."""
    tail = log[log.index(mark):]
    return {op.strip(): len(re.findall(rf"opcode: {op}", tail)) for op in OPS}


def walk(root):
    """What rsync does: list every directory, stat and read every file."""
    n = 0
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            os.lstat(p)
            with open(p, "rb") as fh:
                fh.read()
            n += 1
    return n


def test_a_settled_tree_is_walked_without_requests(goapp, mount):
    """A second walk of latest/, a <time>/ round and merged/ (within
    latest_ttl) sends no LOOKUP, GETATTR or READDIR, and READ only for
    merged/ files (read without the page cache): rsync of an unchanged
    mount costs about what it costs on a local disk."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                         latest_ttl=3600), extra_args=["-d"])
    assert walk(m.path) == 6  # latest/, <time>/, merged/24h/, 2 files each
    walk(m.path)  # merged/ entries are cacheable once built (their first lookup is not)
    mark = f"MARK-{time.monotonic()}"
    with open(m.log_path, "a") as fh:
        fh.write(mark + "\n")
    assert walk(m.path) == 6
    ops = ops_since(m.log(), mark)
    assert ops["LOOKUP"] == 0 and ops["GETATTR"] == 0 and ops["READDIR"] == 0, ops
    assert ops["READ"] <= 2 * 2, ops  # the two merged files: data, then end of file


def test_latest_moves_on_after_latest_ttl(goapp, mount):
    """latest/<file> is the file of the round latest was when looked up:
    the same inode (and page cache) as long as it is latest, then the next
    round's, with the next round's bytes."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}}, latest_ttl=2))
    svc = m.path / "local/a"
    first = (svc / "latest/heap.pb.gz").read_bytes()
    [r1] = [d for d in os.listdir(svc) if d[0].isdigit()]
    st = os.stat(svc / "latest/heap.pb.gz")
    assert os.stat(svc / "latest/heap.pb.gz").st_ino == st.st_ino  # still that round's
    assert st.st_size == len(first) == os.stat(svc / r1 / "heap.pb.gz").st_size
    assert (svc / r1 / "heap.pb.gz").read_bytes() == first
    time.sleep(2.2)
    second = (svc / "latest/heap.pb.gz").read_bytes()
    rounds = sorted(d for d in os.listdir(svc) if d[0].isdigit())
    assert len(rounds) == 2, rounds
    r2 = rounds[1]
    assert second == (svc / r2 / "heap.pb.gz").read_bytes()
    assert os.stat(svc / "latest/heap.pb.gz").st_ino != st.st_ino
    assert os.stat(svc / "latest/heap.pb.gz").st_size == len(second)
    assert int(os.stat(svc / "latest").st_mtime) == int(os.stat(svc / r2).st_mtime)
    assert (svc / r1 / "heap.pb.gz").read_bytes() == first  # the first round stays
    pprof_top(svc / "latest/heap.pb.gz")


def test_merged_is_rebuilt_as_soon_as_a_snapshot_arrives(goapp, mount):
    """A merged/ file the kernel holds (size, entry) is invalidated when a new
    snapshot of its service arrives: the next stat and read, with no wait
    for a timeout, see the merge of both."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["goroutine"]}},
                         latest_ttl=1))
    svc = m.path / "local/a"
    f = svc / "merged/24h/goroutine.pb.gz"
    one = (svc / "latest/goroutine.pb.gz").read_bytes()
    assert f.read_bytes() == one  # one snapshot: the merge is that snapshot
    st1 = os.stat(f)
    assert st1.st_size == len(one)
    time.sleep(1.1)
    (svc / "latest/goroutine.pb.gz").read_bytes()
    wait_for(lambda: len([d for d in os.listdir(svc) if d[0].isdigit()]) == 2, timeout=5,
             what="a second round")
    data = f.read_bytes()
    assert data != one and os.stat(f).st_size == len(data)
    top = pprof_top(f)
    assert "Type: goroutine" in top
