"""No stall, no hang, no use-after-free: slow targets against many readers."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import config_for, pprof_top, read_in_thread, wait_for


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def test_slow_profile_does_not_stall_its_directory(goapp, mount):
    """While latest/cpu.pb.gz is taken (4 s), stat and cat of latest/heap.pb.gz
    in the same directory answer at once (the kernel serializes lookups per
    directory, and libfuse 3.14 never grants parallel ones)."""
    app = goapp()
    m = mount(config_for({"a": [app.base]}, cpu_seconds=4))
    lat = m.path / "local/a/latest"
    th = threading.Thread(target=lambda: (lat / "cpu.pb.gz").read_bytes())
    th.start()
    time.sleep(0.5)
    assert timed(lambda: os.stat(lat / "heap.pb.gz")) < 1.0
    assert timed(lambda: (lat / "goroutine.pb.gz").read_bytes()) < 1.0
    assert timed(lambda: os.stat(lat / "heap.pb.gz")) < 1.0
    th.join(10)
    assert m.error_lines() == []


def test_many_waiting_readers_do_not_stall_others(goapp, mount):
    """70 readers of slow targets wait without holding FUSE threads:
    .status.json and a frozen snapshot still answer at once."""
    app = goapp()
    slow = {f"s{i}": {"targets": [app.fault("delay4000")], "profiles": ["heap"], "timeout": 8}
            for i in range(70)}
    slow["fine"] = {"targets": [app.base], "profiles": ["heap"]}
    m = mount(config_for(slow))
    (m.path / "local/fine/latest/heap.pb.gz").read_bytes()
    [rnd] = [d for d in os.listdir(m.path / "local/fine") if d[0].isdigit()]
    errors = []

    def reader(i):
        try:
            (m.path / f"local/s{i}/latest/heap.pb.gz").read_bytes()
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(70)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert timed(lambda: json.loads((m.path / ".status.json").read_text())) < 0.5
    assert timed(lambda: (m.path / "local/fine" / rnd / "heap.pb.gz").read_bytes()) < 0.5
    assert timed(lambda: os.listdir(m.path / "local")) < 0.5
    for t in threads:
        t.join(15)
    assert errors == [] and m.error_lines() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_reader_returns_at_once(goapp, mount, sig):
    app = goapp()
    m = mount(config_for({"stuck": {"targets": [app.fault("slow")], "timeout": 20}}))
    p = subprocess.Popen(["cat", str(m.path / "local/stuck/latest/heap.pb.gz")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.7)
    assert p.poll() is None  # still waiting for the fetch
    t0 = time.monotonic()
    p.send_signal(sig)
    p.wait(timeout=10)
    assert time.monotonic() - t0 < 1.5, "the interrupted request waited for the fetch"
    # the mount is fine afterwards
    assert json.loads((m.path / ".status.json").read_text())["targets"]


def test_latest_ttl_shorter_than_fetch_is_one_fetch_per_access(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.fault("delay2500")], "profiles": ["heap"]}},
                         latest_ttl=1))
    out = tmp_path / "heap.pb.gz"
    subprocess.run(["cp", str(m.path / "local/a/latest/heap.pb.gz"), str(out)], check=True)
    pprof_top(out)
    doc = json.loads((m.path / ".status.json").read_text())
    [t] = doc["targets"]
    assert t["fetches"] == 1, t


def test_readers_racing_retention_and_short_ttl(goapp, mount, tmp_path):
    """Retention of 1 s, latest of 1 s and fetches of 1.2 s under 24 readers:
    rounds are freed while others are waited on (a use-after-free before;
    the ASan build of this test reports it)."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.fault("delay1200")],
                                "profiles": ["heap", "goroutine"]}},
                         latest_ttl=1, retention=1))
    stop = time.monotonic() + 6
    errors = []

    def reader(i):
        name = ["heap", "goroutine"][i % 2]
        while time.monotonic() < stop:
            try:
                if i % 3 == 0:
                    os.listdir(m.path / "local/a")
                    (m.path / f"local/a/merged/24h/{name}.pb.gz").read_bytes()
                else:
                    (m.path / f"local/a/latest/{name}.pb.gz").read_bytes()
            except FileNotFoundError:
                pass  # a merged range whose rounds retention just removed
            except OSError as e:
                errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert m.proc.poll() is None, m.log()[-2000:]
    assert errors == [], errors[:3]


def test_max_connections_queues_the_rest_in_order(goapp, mount):
    """max_connections bounds transfers in flight (memory, sockets); the
    others wait their turn and all complete."""
    app = goapp()
    svcs = {f"s{i}": {"targets": [app.fault("delay400")], "profiles": ["heap"]} for i in range(6)}
    m = mount(config_for(svcs, max_connections=2, timeout=10))
    t0 = time.monotonic()
    os.listdir(m.path / "local")  # starts all six
    for i in range(6):
        assert (m.path / f"local/s{i}/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    took = time.monotonic() - t0
    assert 1.1 < took < 5, took  # three rounds of two, 0.4 s each
    assert m.error_lines() == []


def limited(tmp_path, nofile):
    """profilefs under `prlimit --nofile=N:N` (soft and hard: it cannot
    raise them)."""
    from conftest import PROFILEFS
    w = tmp_path / "profilefs-limited"
    w.write_text(f"#!/bin/sh\nexec prlimit --nofile={nofile}:{nofile} {PROFILEFS} \"$@\"\n")
    w.chmod(0o755)
    return w


def test_300_services_with_256_fds(goapp, tmp_path):
    """300 services, 256 file descriptors. max_connections follows the
    limit (half of it): every fetch waits its turn, none fails. Set above
    what the limit allows: a warning at mount, and the fetches that find no
    descriptor fail saying so ("out of file descriptors"), not blaming the
    target; each works when read again."""
    import json
    import subprocess
    from conftest import Mount
    app = goapp()
    services = {f"s{i}": {"targets": [app.base], "profiles": ["heap"]} for i in range(300)}
    # timeout: one sample app answers all 300 (a heap profile each), the
    # machine may be busy; what is tested is descriptors, not time
    m = Mount(limited(tmp_path, 256), tmp_path, config_for(services, retry_after=0, timeout=60),
              name="auto")
    try:
        r = subprocess.run(["ls", str(m.path / "local")], capture_output=True, text=True)
        assert r.returncode == 0 and len(r.stdout.split()) == 300
        wait_for(lambda: json.loads((m.path / ".status.json").read_text())["in_flight"] == 0,
                 timeout=60, what="the fetches")
        doc = json.loads((m.path / ".status.json").read_text())
        assert sum(t["failures"] for t in doc["targets"]) == 0
        assert sum(t["fetches"] for t in doc["targets"]) == 300
        assert m.error_lines() == []
    finally:
        m.stop()
    m = Mount(limited(tmp_path, 256), tmp_path,
              config_for(services, retry_after=0, timeout=60, max_connections=1024), name="set")
    try:
        warn = [l for l in m.log().splitlines() if "max_connections 1024 with 256 file" in l]
        assert len(warn) == 1, m.log()
        subprocess.run(["ls", str(m.path / "local")], capture_output=True)
        wait_for(lambda: json.loads((m.path / ".status.json").read_text())["in_flight"] == 0,
                 timeout=60, what="the fetches")
        errs = m.error_lines()
        assert errs and all("out of file descriptors (RLIMIT_NOFILE 256" in e for e in errs), errs
        for i in range(300):  # recovered: one at a time there are descriptors
            assert (m.path / f"local/s{i}/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    finally:
        m.stop()


def test_slowloris_target_is_cut_at_the_timeout(goapp, mount):
    """A target that answers one byte every half second, forever: cut at
    `timeout` (EIO, one line), while every other file opens at once."""
    from fakes.hostile import Hostile
    app = goapp()
    h = Hostile()
    try:
        m = mount(config_for({"slow": {"targets": [h.url + "/trickle"], "profiles": ["heap"],
                                       "timeout": 2},
                              "fine": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                             retry_after=60))
        th, res = read_in_thread(m.path / "local/slow/latest/heap.pb.gz")
        time.sleep(0.3)
        t0 = time.monotonic()
        for f in ("heap", "goroutine"):
            assert (m.path / f"local/fine/latest/{f}.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
        assert time.monotonic() - t0 < 1.5
        th.join(15)
        assert res.get("errno") == 5 and 1.5 < res["took"] < 6, res
        errs = m.error_lines()
        assert len(errs) == 1 and "timed out" in errs[0].lower() and "/trickle/heap" in errs[0], errs
    finally:
        h.stop()


def test_a_full_cache_filesystem_is_eio_and_recovers(goapp, mount, tmp_path):
    """The cache on a full filesystem: EIO with "No space left on device" in
    its one line, nothing half-written shown; once there is room again the
    next read works."""
    import subprocess
    cache = tmp_path / "small"
    cache.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(cache)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        app = goapp()
        m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}},
                             retry_after=0, cache_dir=str(cache / "c")))
        filler = cache / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)  # every byte there is left
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as full:
            assert full.errno == 28
        finally:
            os.close(fd)
        with pytest.raises(OSError) as e:
            (m.path / "local/a/latest/heap.pb.gz").read_bytes()
        assert e.value.errno == 5
        errs = m.error_lines()
        assert len(errs) == 1 and "No space left on device" in errs[0], errs
        filler.unlink()
        data = (m.path / "local/a/latest/heap.pb.gz").read_bytes()
        assert data[:2] == b"\x1f\x8b"
        m.stop()
    finally:
        subprocess.run(["umount", "-l", str(cache)], capture_output=True)


def test_sigkill_during_an_export_five_times_loses_nothing(goapp, mount, tmp_path):
    """SIGKILL of the daemon while rsync copies the mount, a remount on the
    same cache, five times in a row: every round that was there before a
    kill is there after it, whole, and the last export copies everything
    and every file decodes."""
    import subprocess
    from conftest import is_mounted, unmount
    from fakes.wire import Profile
    apps = [goapp() for _ in range(3)]
    m = mount(config_for({f"s{i}": {"targets": [a.base], "profiles": ["heap", "goroutine"]}
                          for i, a in enumerate(apps)}, latest_ttl=1))

    def rounds():
        return {(s, r) for s in os.listdir(m.cache / "local")
                for r in os.listdir(m.cache / "local" / s) if r[0].isdigit()}
    for k in range(5):
        rs = subprocess.Popen(["rsync", "-a", f"{m.path}/", f"{tmp_path}/out{k}/"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.4 + 0.3 * k)
        before = rounds()
        m.proc.kill()
        m.proc.wait()
        rs.wait(timeout=30)
        unmount(m.path)
        wait_for(lambda: not is_mounted(m.path), what="the dead mount to go")
        m.logf.close()
        m.start()
        after = rounds()
        assert before <= after, before - after
        for s, r in after:  # whole or absent: every file shown decodes
            for f in os.listdir(m.path / "local" / s / r):
                Profile((m.path / "local" / s / r / f).read_bytes())
    out = tmp_path / "final"
    r = subprocess.run(["rsync", "-a", f"{m.path}/", f"{out}/"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = list(out.rglob("*.pb.gz"))
    assert len(files) >= 3 * 2 * 3
    for f in files:
        Profile(f.read_bytes())
