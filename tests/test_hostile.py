"""Hostile upstreams: a gzip bomb, bodies without end. Each fails with a
clear reason, quickly, with memory bounded by the config, and without
holding up anything else."""
import os
import time

import pytest

from conftest import BUILD, config_for, read_in_thread, wait_for
from fakes.hostile import Hostile, gzip_bomb

ASAN = "asan" in str(BUILD)


def status_mb(pid, key):
    """A memory figure of /proc/PID/status (VmRSS, VmHWM) in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0


def rss_mb(pid):
    return status_mb(pid, "VmRSS")


def peak_rss_mb(pid):
    return status_mb(pid, "VmHWM")


@pytest.fixture(scope="session")
def bomb():
    BUILD.mkdir(exist_ok=True)
    return gzip_bomb(BUILD / "gzip-bomb-1g.gz")


@pytest.fixture(scope="session")
def bomb10():
    """A 10 MB body that inflates to 10 GiB of zeros (made once)."""
    from conftest import ROOT
    (ROOT / "build").mkdir(exist_ok=True)
    return gzip_bomb(ROOT / "build" / "gzip-bomb-10g.gz", gib=10)


def test_gzip_bomb_with_default_limits_keeps_the_daemon_small(mount, bomb10):
    """With the default limits one hostile target cannot take the daemon
    past about 128 MB (it took it to 383 MB with max_profile_raw_bytes
    256 MiB), and the error says which bound cut it."""
    assert 9 << 20 < len(bomb10) < 12 << 20
    h = Hostile(bomb=bomb10)
    try:
        m = mount(config_for({"bomb": {"targets": [h.url + "/bomb"], "profiles": ["heap"]}}))
        with pytest.raises(OSError) as e:
            (m.path / "local/bomb/latest/heap.pb.gz").read_bytes()
        assert e.value.errno == 5
        errs = m.error_lines()
        assert len(errs) == 1 and f"larger than {64 << 20} bytes uncompressed " \
            "(max_profile_raw_bytes)" in errs[0], errs
        peak = peak_rss_mb(m.proc.pid)
        assert peak < (256 if ASAN else 128), peak
    finally:
        h.stop()


def test_gzip_bomb_is_cut_short_and_stalls_nothing(goapp, mount, bomb):
    app = goapp()
    h = Hostile(bomb=bomb)
    try:
        m = mount(config_for({"bomb": {"targets": [h.url + "/bomb"], "profiles": ["heap"]},
                              "fine": {"targets": [app.base], "profiles": ["heap", "goroutine"]}},
                             max_profile_raw_bytes=64 << 20))
        base_rss = rss_mb(m.proc.pid)
        th, res = read_in_thread(m.path / "local/bomb/latest/heap.pb.gz")
        t0 = time.monotonic()
        for name in ("heap", "goroutine"):
            assert (m.path / f"local/fine/latest/{name}.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
        assert time.monotonic() - t0 < 2
        th.join(30)
        assert res.get("errno") == 5 and res["took"] < 10, res
        errs = m.error_lines()
        assert len(errs) == 1 and f"larger than {64 << 20} bytes uncompressed" in errs[0], errs
        if not ASAN:
            assert peak_rss_mb(m.proc.pid) - base_rss < 64 + 48, peak_rss_mb(m.proc.pid)
        t0 = time.monotonic()
        m.stop()
        assert time.monotonic() - t0 < 5
    finally:
        h.stop()


def test_memory_budget_bounds_many_hostile_targets(mount):
    """18 targets streaming 512 MB bodies each, 256 MiB allowed per body:
    9 GB before; now max_memory (96 MiB) is all they get together."""
    h = Hostile(flood_mb=512)
    try:
        svcs = {f"f{i}": {"targets": [h.url + "/flood"], "profiles": ["heap"], "timeout": 20}
                for i in range(18)}
        m = mount(config_for(svcs, max_profile_bytes=256 << 20, max_memory=96 << 20))
        base_rss = rss_mb(m.proc.pid)
        os.listdir(m.path / "local")  # starts all 18
        wait_for(lambda: len(m.error_lines()) == 18, timeout=30, what="18 failures")
        errs = m.error_lines()
        assert all("memory budget spent" in e or "larger than" in e for e in errs), errs
        assert any("memory budget spent (max_memory 100663296 bytes" in e for e in errs), errs
        if not ASAN:
            assert peak_rss_mb(m.proc.pid) - base_rss < 96 + 64, peak_rss_mb(m.proc.pid)
        assert m.cached_files() == []
    finally:
        h.stop()


def odd_profile(n, value):
    """A heap profile with n one-frame samples of `value` each, whose
    location and function ids are large and out of order."""
    from fakes.wire import field_bytes, field_varint, varint
    import gzip
    import random
    strings = {"": 0}

    def s(x):
        return strings.setdefault(x, len(strings))

    rnd = random.Random(7)
    ids = [1_000_003 + 7919 * k for k in range(n)]
    rnd.shuffle(ids)
    out = bytearray()
    for t, u in (("inuse_space", "bytes"),):
        out += field_bytes(1, field_varint(1, s(t)) + field_varint(2, s(u)))
    for i in ids:
        out += field_bytes(2, field_bytes(1, varint(i)) + field_bytes(2, varint(value)))
    out += field_bytes(3, field_varint(1, 1) + field_varint(5, s("app")) + field_varint(7, 1))
    for i in ids:
        line = field_varint(1, i) + field_varint(2, 10)
        out += field_bytes(4, field_varint(1, i) + field_varint(2, 1) + field_bytes(4, line))
    for i in ids:
        out += field_bytes(5, field_varint(1, i) + field_varint(2, s(f"main.f{i}")) +
                           field_varint(4, s("main.go")))
    for x in strings:
        out += field_bytes(6, x.encode())
    out += field_varint(10, 1 << 62)  # duration: the merge of two overflows int64
    return gzip.compress(bytes(out))


def test_merge_of_huge_values_and_unordered_ids(mount, tmp_path):
    """Sample values and durations whose sum overflows int64 wrap as in Go
    (was signed overflow: UB), and 100000 out-of-order ids merge in linear
    time (was a scan per lookup)."""
    from conftest import pprof_top
    h = Hostile()
    h.static["heap"] = odd_profile(100_000, 1 << 62)
    try:
        m = mount(config_for({"odd": {"targets": [h.url + "/static"], "profiles": ["heap"]}},
                             latest_ttl=1))
        svc = m.path / "local/odd"
        (svc / "latest/heap.pb.gz").read_bytes()
        time.sleep(1.2)
        (svc / "latest/heap.pb.gz").read_bytes()
        rounds = sorted(d for d in os.listdir(svc) if d[0].isdigit())
        assert len(rounds) >= 2
        t0 = time.monotonic()
        merged = (svc / "merged/24h/heap.pb.gz").read_bytes()
        assert time.monotonic() - t0 < (20 if ASAN else 5)
        out = tmp_path / "merged.pb.gz"
        out.write_bytes(merged)
        pprof_top(out)
        assert m.error_lines() == []
    finally:
        h.stop()


def crafted(mutation):
    """A small valid heap-like profile, then one thing go tool pprof rejects."""
    from fakes.wire import field_bytes, field_varint, varint
    import gzip
    strings = ["", "inuse_space", "bytes", "main.f", "main.go", "app"]
    out = bytearray(field_bytes(1, field_varint(1, 1) + field_varint(2, 2)))
    loc = 99 if mutation == "sample names a missing location" else 1
    out += field_bytes(2, field_bytes(1, varint(loc)) + field_bytes(2, varint(5)))
    out += field_bytes(3, field_varint(1, 1) + field_varint(5, 5) + field_varint(7, 1))
    if mutation == "two mappings with one id":
        out += field_bytes(3, field_varint(1, 1) + field_varint(5, 5))
    fn = 77 if mutation == "line names a missing function" else 1
    out += field_bytes(4, field_varint(1, 1) + field_varint(2, 1) +
                       field_bytes(4, field_varint(1, fn) + field_varint(2, 3)))
    name = 10**9 if mutation == "function name out of the string table" else 3
    out += field_bytes(5, field_varint(1, 1) + field_varint(2, name) + field_varint(4, 4))
    for x in strings:
        out += field_bytes(6, x.encode())
    return gzip.compress(bytes(out))


HOSTILE_PROFILES = {
    "sample names a missing location": "sample 0 names missing location 99",
    "line names a missing function": "location 1 has a line naming missing function 77",
    "function name out of the string table": "function 1 string index out of range",
    "two mappings with one id": "multiple mappings with id 1",
}


@pytest.mark.parametrize("mutation", sorted(HOSTILE_PROFILES))
def test_profiles_go_tool_pprof_rejects_are_eio(mount, tmp_path, mutation):
    """Each would be served as valid before (only string_table[0], sample
    type indices and value counts were checked); go tool pprof rejects it
    ("sample has nil location", "unrecognized profile format", "multiple
    mappings with same id"). Now: EIO, one line saying which reference."""
    import subprocess
    from conftest import go_env
    bad = tmp_path / "bad.pb.gz"
    bad.write_bytes(crafted(mutation))
    r = subprocess.run(["go", "tool", "pprof", "-raw", str(bad)], capture_output=True,
                       env=go_env(), timeout=60)
    assert r.returncode != 0, "the premise: go tool pprof rejects it"
    good = tmp_path / "good.pb.gz"
    good.write_bytes(crafted(None))
    r = subprocess.run(["go", "tool", "pprof", "-raw", str(good)], capture_output=True,
                       env=go_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    h = Hostile()
    h.static["heap"] = crafted(mutation)
    h.static["goroutine"] = crafted(None)
    try:
        m = mount(config_for({"x": {"targets": [h.url + "/static"],
                                    "profiles": ["heap", "goroutine"]}}, retry_after=60))
        with pytest.raises(OSError) as e:
            (m.path / "local/x/latest/heap.pb.gz").read_bytes()
        assert e.value.errno == 5
        errs = m.error_lines()
        assert len(errs) == 1 and HOSTILE_PROFILES[mutation] in errs[0], errs
        assert (m.path / "local/x/latest/goroutine.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    finally:
        h.stop()
