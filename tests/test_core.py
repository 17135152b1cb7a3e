"""End to end: a real mount over a real Go net/http/pprof target."""
import calendar
import errno
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import PROFILES, config_for, pprof_top, read_in_thread

TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def round_dirs(svc_dir):
    return sorted(n for n in os.listdir(svc_dir) if TIME_RE.match(n))


def dir_time(name):
    return calendar.timegm(time.strptime(name, "%Y-%m-%dT%H:%M:%SZ"))


def test_tree_and_cp_profile_into_pprof(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    assert os.listdir(m.path) == ["local"]
    assert os.listdir(m.path / "local") == ["app"]
    assert sorted(os.listdir(m.path / "local/app/latest")) == sorted(f"{p}.pb.gz" for p in PROFILES)

    shutil.copy(m.path / "local/app/latest/heap.pb.gz", tmp_path / "heap.pb.gz")
    data = (tmp_path / "heap.pb.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b"
    assert "main.retainHeap" in pprof_top(tmp_path / "heap.pb.gz")

    # The scrape froze a snapshot: a <time> directory with the same bytes.
    rounds = round_dirs(m.path / "local/app")
    assert len(rounds) == 1
    frozen = m.path / "local/app" / rounds[0] / "heap.pb.gz"
    assert frozen.read_bytes() == data
    st = os.stat(frozen)
    assert st.st_size == len(data)
    assert int(st.st_mtime) == dir_time(rounds[0])
    assert abs(st.st_mtime - time.time()) < 60
    # latest keeps serving the same snapshot within latest_ttl.
    assert (m.path / "local/app/latest/heap.pb.gz").read_bytes() == data
    assert m.error_lines() == []


def test_every_profile_is_valid_pprof(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    out = tmp_path / "out"
    shutil.copytree(m.path / "local/app/latest", out)
    assert sorted(os.listdir(out)) == sorted(f"{p}.pb.gz" for p in PROFILES)
    tops = {p: pprof_top(out / f"{p}.pb.gz") for p in PROFILES}
    assert "main.burnCPU" in tops["cpu"]
    assert "main.parkedGoroutine" in tops["goroutine"]
    assert "main.contendMutex" in tops["mutex"]
    assert "Type: cpu" in tops["cpu"]
    for p in PROFILES:
        # stat size is the true size of what read() returns
        assert os.path.getsize(m.path / "local/app/latest" / f"{p}.pb.gz") == \
            (out / f"{p}.pb.gz").stat().st_size


def rsync_stats(src, dst):
    r = subprocess.run(["rsync", "-a", "--stats", f"{src}/", f"{dst}/"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = re.search(r"Number of regular files transferred: (\d+)", r.stdout)
    return int(m.group(1))


def test_rsync_twice_second_copies_nothing(goapp, mount, tmp_path):
    a, b = goapp(), goapp()
    m = mount(config_for({"a": [a.base], "b": [b.base]}))
    dst = tmp_path / "dst"
    first = rsync_stats(m.path, dst)
    # latest/, the <time>/ snapshot it made, and merged/24h/ (with default.pgo),
    # for both services
    assert first == 3 * 2 * len(PROFILES) + 2
    assert rsync_stats(m.path, dst) == 0
    for svc in ("a", "b"):
        rounds = round_dirs(dst / "local" / svc)
        assert len(rounds) == 1
        for p in PROFILES:
            f = dst / "local" / svc / rounds[0] / f"{p}.pb.gz"
            assert f.read_bytes() == (dst / "local" / svc / "latest" / f"{p}.pb.gz").read_bytes()
            assert int(f.stat().st_mtime) == dir_time(rounds[0])
        pprof_top(dst / "local" / svc / rounds[0] / "cpu.pb.gz")


def test_snapshots_survive_remount(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    svc = m.path / "local/app"
    rounds = round_dirs(svc)  # listing the service takes a snapshot
    assert len(rounds) == 1
    before = {n: ((svc / rounds[0] / n).read_bytes(), os.stat(svc / rounds[0] / n))
              for n in os.listdir(svc / rounds[0])}
    assert sorted(before) == sorted(f"{p}.pb.gz" for p in PROFILES)
    m.restart()
    app.stop()  # the cache alone serves frozen snapshots
    assert round_dirs(svc) == rounds
    for n, (data, st) in before.items():
        assert (svc / rounds[0] / n).read_bytes() == data
        st2 = os.stat(svc / rounds[0] / n)
        assert (st2.st_size, st2.st_mtime) == (st.st_size, st.st_mtime)


def test_latest_ttl_makes_a_new_snapshot(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}}, latest_ttl=3))
    first = (m.path / "local/app/latest/heap.pb.gz").read_bytes()
    assert (m.path / "local/app/latest/heap.pb.gz").read_bytes() == first  # same snapshot
    time.sleep(3.1)
    (m.path / "local/app/latest/heap.pb.gz").read_bytes()
    rounds = round_dirs(m.path / "local/app")  # within 3 s: starts no third snapshot
    assert len(rounds) == 2 and dir_time(rounds[1]) - dir_time(rounds[0]) >= 3
    assert os.listdir(m.path / "local/app/latest") == ["heap.pb.gz"]


def test_retention_removes_old_snapshots(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}},
                         latest_ttl=1, retention="2s"))
    (m.path / "local/app/latest/heap.pb.gz").read_bytes()
    old = round_dirs(m.path / "local/app")
    assert len(old) == 1
    time.sleep(3.1)
    (m.path / "local/app/latest/heap.pb.gz").read_bytes()  # new round prunes the old
    now = round_dirs(m.path / "local/app")
    assert len(now) == 1 and now != old
    assert not (m.cache / "local/app" / old[0]).exists()
    with pytest.raises(FileNotFoundError):
        os.stat(m.path / "local/app" / old[0])


def test_listing_latest_fetches_in_parallel(goapp, mount):
    app = goapp()
    # every profile answers after 1.5 s (cpu after 1.5 s + 1 s of profiling)
    m = mount(config_for({"slow": [app.fault("delay1500")]}))
    t0 = time.monotonic()
    names = os.listdir(m.path / "local/slow/latest")
    elapsed = time.monotonic() - t0
    assert len(names) == len(PROFILES)
    assert elapsed < 4.5, f"listing took {elapsed:.1f}s: fetches were not parallel"
    for n in names:  # all fetched already: stat is immediate
        t0 = time.monotonic()
        assert os.path.getsize(m.path / "local/slow/latest" / n) > 0
        assert time.monotonic() - t0 < 0.5


def test_slow_target_does_not_block_other_paths(goapp, mount):
    app = goapp()
    m = mount(config_for({"stuck": {"targets": [app.fault("slow")], "timeout": 3},
                          "fine": [app.base]}))
    th, result = read_in_thread(m.path / "local/stuck/latest/heap.pb.gz")
    time.sleep(0.3)
    t0 = time.monotonic()
    assert (m.path / "local/fine/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    os.listdir(m.path / "local")
    assert time.monotonic() - t0 < 2.0, "a slow target blocked another path"
    th.join(timeout=15)
    assert result["errno"] == errno.EIO
    assert 2.5 < result["took"] < 6.0, result
    errs = m.error_lines()
    assert len(errs) == 1 and "timed out" in errs[0].lower(), errs


def test_multiple_targets_get_their_own_files(goapp, mount, tmp_path):
    a, b = goapp(), goapp()
    m = mount(config_for({"api": {"targets": [{"url": a.base, "name": "pod-a"},
                                              {"url": b.base, "name": "pod-b"}],
                                  "profiles": ["heap", "goroutine"]}}))
    names = sorted(os.listdir(m.path / "local/api/latest"))
    assert names == ["goroutine.pod-a.pb.gz", "goroutine.pod-b.pb.gz",
                     "heap.pod-a.pb.gz", "heap.pod-b.pb.gz"]
    for n in names:
        shutil.copy(m.path / "local/api/latest" / n, tmp_path / n)
        pprof_top(tmp_path / n)
    assert sorted(os.listdir(m.path / "local/api" / round_dirs(m.path / "local/api")[0])) == names


def test_mount_is_read_only(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    f = m.path / "local/app/latest/heap.pb.gz"
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        with pytest.raises(OSError) as e:
            os.open(f, flags)
        assert e.value.errno in (errno.EROFS, errno.EACCES)
    with pytest.raises(OSError) as e:
        os.mkdir(m.path / "local/new")
    assert e.value.errno == errno.EROFS
    with pytest.raises(OSError) as e:
        (m.path / "local/app/new.pb.gz").write_bytes(b"x")
    assert e.value.errno == errno.EROFS
    with open("/proc/self/mounts") as mounts:
        line = next(l for l in mounts if l.split()[1] == str(m.path))
    assert line.split()[2] == "fuse.profilefs" and "ro" in line.split()[3].split(",")


def test_unknown_names_are_enoent(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}}))
    for p in ["nope", "local/nope", "local/app/nope", "local/app/latest/cpu.pb.gz",
              "local/app/latest/trace.pb.gz", "local/app/2020-01-01T00:00:00Z",
              "local/app/latest/..%2f.pb.gz", "local/app/latest/.heap.pb.gz"]:
        with pytest.raises(FileNotFoundError):
            os.stat(m.path / p)
    with pytest.raises(NotADirectoryError):
        os.stat(m.path / "local/app/latest/heap.pb.gz/x")
    assert m.error_lines() == []


def test_rsync_of_a_cluster_fetches_its_services_at_once(goapp, mount, tmp_path):
    app = goapp()
    services = {f"s{i}": {"targets": [app.fault("delay1500")], "profiles": ["heap", "goroutine"]}
                for i in range(4)}
    m = mount(config_for(services))
    t0 = time.monotonic()
    assert rsync_stats(m.path, tmp_path / "dst") == 4 * 3 * 2  # latest/, <time>/, merged/
    elapsed = time.monotonic() - t0
    # one service after another would take at least 4 x 1.5 s
    assert elapsed < 4.0, f"rsync took {elapsed:.1f}s: services were fetched one by one"


def test_longest_target_names_keep_their_suffix(goapp, mount, tmp_path):
    """Target names may be 200 characters: file names of 219 keep .pb.gz
    (they were cut at 159 before)."""
    app = goapp()
    long_a, long_b = "a" * 200, "b" * 200
    m = mount(config_for({"app": {"targets": [{"url": app.base, "name": long_a},
                                              {"url": app.base, "name": long_b}],
                                  "profiles": ["threadcreate", "heap"]}}))
    latest = m.path / "local/app/latest"
    names = sorted(os.listdir(latest))
    assert names == sorted(f"{p}.{t}.pb.gz" for p in ("heap", "threadcreate") for t in (long_a, long_b))
    for n in names:
        (tmp_path / "p.pb.gz").write_bytes((latest / n).read_bytes())
        pprof_top(tmp_path / "p.pb.gz")
    [rnd] = round_dirs(m.path / "local/app")
    assert sorted(os.listdir(m.path / "local/app" / rnd)) == names
