"""What the kernel may cache, and when it must forget: a walk of a settled
tree is answered by the kernel alone (no lookups, no opens, no reads);
latest/ moves on after latest_ttl; merged/ files are rebuilt (and re-read)
as soon as a snapshot arrives, while whoever opened the old result reads
it on."""
import json
import os
import re
import time

from conftest import config_for, pprof_top, wait_for
from fakes.wire import Profile

OPS = ("LOOKUP", "GETATTR", "READDIR", "READ", "OPEN", "RELEASE", "FLUSH", "OPENDIR",
       "RELEASEDIR")


def ops_since(log, mark):
    """Counts of FUSE requests in a -d log after the line holding mark."""
    tail = log[log.index(mark):]
    return {op: len(re.findall(rf"opcode: {op} \(", tail)) for op in OPS}


def mark_log(m):
    mark = f"MARK-{time.monotonic()}"
    with open(m.log_path, "a") as fh:
        fh.write(mark + "\n")
    return mark


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
    latest_ttl) sends no request at all: no LOOKUP, GETATTR, READDIR, no
    OPEN, READ, FLUSH or RELEASE, no OPENDIR or RELEASEDIR. Files and
    directories are opened by the kernel alone (no_open, no_opendir), read
    from its page cache and listing cache, so rsync of an unchanged mount
    or a cp of a file read before costs about what it costs on a local
    disk."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                         latest_ttl=3600), extra_args=["-d"])
    assert walk(m.path) == 6  # latest/, <time>/, merged/24h/, 2 files each
    walk(m.path)  # merged/ entries are cacheable once built (their first lookup is not)
    mark = mark_log(m)
    assert walk(m.path) == 6
    ops = ops_since(m.log(), mark)
    assert not any(ops.values()), ops


def test_files_are_read_by_inode_when_the_kernel_opens_them(goapp, mount):
    """The first open is answered ENOSYS (the kernel opens every file on its
    own from then on); reads come by inode with no handle and still give
    each file's bytes, a file still being fetched waits for its snapshot,
    and .status.json is whole."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                         latest_ttl=3600), extra_args=["-d"])
    svc = m.path / "local/a"
    data = (svc / "latest/heap.pb.gz").read_bytes()  # cold: waits for the fetch
    [r] = [d for d in os.listdir(svc) if d[0].isdigit()]
    assert (svc / r / "heap.pb.gz").read_bytes() == data
    # one snapshot: its live heap (the mean of one), no allocations yet
    merged = Profile((svc / "merged/24h/heap.pb.gz").read_bytes())
    assert merged.total("inuse_space") == Profile(data).total("inuse_space") > 0
    pprof_top(svc / "latest/heap.pb.gz")
    json.loads((m.path / ".status.json").read_text())
    mark = mark_log(m)
    for _ in range(3):
        assert (svc / r / "goroutine.pb.gz").read_bytes()
    ops = ops_since(m.log(), mark)
    assert ops["OPEN"] == 0 and ops["RELEASE"] == 0 and ops["READ"] <= 2, ops
    assert "opcode: OPEN (" in m.log()  # the one answered ENOSYS


def test_a_merged_file_open_across_a_rebuild_reads_what_it_opened(goapp, mount):
    """The kernel asks for a file's pages by inode, maybe long after the
    open. A merged/ file rebuilt meanwhile (a new snapshot arrived) must
    not mix two results: the reader of the old one reads the old bytes,
    a new open the new ones."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["goroutine"]}},
                         latest_ttl=1))
    svc = m.path / "local/a"
    f = svc / "merged/24h/goroutine.pb.gz"

    def rounds():
        return sorted(d for d in os.listdir(svc) if d[0].isdigit())

    def next_round(n):
        time.sleep(1.1)
        (svc / "latest/goroutine.pb.gz").read_bytes()
        wait_for(lambda: len(rounds()) == n, timeout=5, what=f"round {n}")

    (svc / "latest/goroutine.pb.gz").read_bytes()
    next_round(2)  # two inputs: a real merge, stored in the cache
    fd = os.open(f, os.O_RDONLY)
    try:
        old = os.read(fd, 1 << 20)
        assert len(old) == os.fstat(fd).st_size
        next_round(3)
        new = f.read_bytes()
        assert new != old and os.stat(f).st_size == len(new)
        # drop the pages of the old file: the kernel must ask again, by inode
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert os.pread(fd, 1 << 20, 0) == old
        assert os.fstat(fd).st_size == len(old)
    finally:
        os.close(fd)
    pprof_top(f)


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
                         latest_ttl=3))
    svc = m.path / "local/a"
    f = svc / "merged/24h/goroutine.pb.gz"
    one = (svc / "latest/goroutine.pb.gz").read_bytes()
    first = f.read_bytes()  # one snapshot: the mean of one is that snapshot
    # (latest_ttl leaves a slow build, ASan's, room to read it before a second)
    assert Profile(first).total("goroutine") == Profile(one).total("goroutine") > 0
    st1 = os.stat(f)
    assert st1.st_size == len(first)
    time.sleep(3.1)
    (svc / "latest/goroutine.pb.gz").read_bytes()
    wait_for(lambda: len([d for d in os.listdir(svc) if d[0].isdigit()]) == 2, timeout=5,
             what="a second round")
    data = f.read_bytes()
    assert data != first and os.stat(f).st_size == len(data)
    assert "2 snapshots of 1 target" in "\n".join(Profile(data).comments)
    top = pprof_top(f)
    assert "Type: goroutine" in top


def test_without_no_open_files_are_read_through_handles(goapp, mount):
    """On a kernel that cannot open files alone (no FUSE no_open; forced
    here by PROFILEFS_OPEN_HANDLES), each open is a request with a handle,
    and every kind of file reads the same bytes."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}}, latest_ttl=3600),
              extra_args=["-d"], env={"PROFILEFS_OPEN_HANDLES": "1"})
    svc = m.path / "local/a"
    data = (svc / "latest/heap.pb.gz").read_bytes()
    [r] = [d for d in os.listdir(svc) if d[0].isdigit()]
    assert (svc / r / "heap.pb.gz").read_bytes() == data
    merged = (svc / "merged/24h/heap.pb.gz").read_bytes()
    assert Profile(merged).total("inuse_space") == Profile(data).total("inuse_space") > 0
    assert (svc / "merged/24h/heap.pb.gz").read_bytes() == merged
    assert json.loads((m.path / ".status.json").read_text())

    def released():  # release is sent after close returns
        return m.log().count("opcode: RELEASE (") == m.log().count("opcode: OPEN (")
    wait_for(released, timeout=5, what="the releases")
    mark = mark_log(m)
    assert (svc / r / "heap.pb.gz").read_bytes() == data
    wait_for(released, timeout=5, what="the release")
    ops = ops_since(m.log(), mark)
    assert ops["OPEN"] == 1 and ops["RELEASE"] == 1, ops
    pprof_top(svc / "latest/heap.pb.gz")


def test_kept_listings_change_when_the_tree_does(goapp, mount):
    """The kernel lists directories from its own copy (no_opendir), so each
    change must reach it: a service lists the round a listing started once
    latest_ttl passed (merged/<range>/ gaining a file: test_pgo.py)."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                         latest_ttl=1))
    svc = m.path / "local/a"

    def rounds():
        return sorted(d for d in os.listdir(svc) if d[0].isdigit())
    (svc / "latest/heap.pb.gz").read_bytes()
    [r1] = rounds()
    assert sorted(os.listdir(svc / r1))
    time.sleep(1.2)  # latest_ttl passed: listing svc starts the next round
    assert len(rounds()) == 2
    r2 = rounds()[1]
    assert sorted(os.listdir(svc / r2)) == ["goroutine.pb.gz", "heap.pb.gz"]
    assert sorted(os.listdir(svc / "merged/24h")) == ["goroutine.pb.gz", "heap.pb.gz"]


def test_a_kept_listing_loses_a_round_retention_removed(goapp, mount):
    """Retention removes a round while the service's listing is one the
    kernel keeps (latest is fresh, nothing to start): the listing drops
    it at once, as stat does."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}},
                         latest_ttl=6, retention=7))
    svc = m.path / "local/a"

    def rounds():
        return sorted(d for d in os.listdir(svc) if d[0].isdigit())
    (svc / "latest/heap.pb.gz").read_bytes()
    [r1] = rounds()
    time.sleep(6.2)
    (svc / "latest/heap.pb.gz").read_bytes()  # the second round: latest for 6 s
    t = time.monotonic()
    assert len(rounds()) == 2  # a listing the kernel keeps until latest moves on
    # retention (every 3.5 s) removes the first round from the disk ...
    wait_for(lambda: not (m.cache / "local/a" / r1).exists(), timeout=5, what="retention")
    assert time.monotonic() - t < 4.5  # ... while latest_ttl still holds
    assert r1 not in rounds()  # ... and from the kept listing
    assert not os.path.exists(svc / r1)
