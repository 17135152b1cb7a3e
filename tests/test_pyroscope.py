"""kind "pyroscope": services, types and windows from a Pyroscope querier
(fake speaking Connect + application/proto exactly)."""
import calendar
import os
import shutil
import subprocess
import time

import pytest

from conftest import (assert_fetch_fails, go_env, pprof_top, pprof_top_nodes, stable_name,
                      windows)
from fakes.pyroscope import CPU, HEAP, Fake, value_for

SERVICES = ["checkout", "pay/ments", ".."]
PAY, DOTS = stable_name("pay/ments"), stable_name("..")


@pytest.fixture
def fake():
    f = Fake(SERVICES, tenant="team-a", token="pyro-t0ken")
    yield f
    f.stop()


def cfg(fake, **over):
    c = {"kind": "pyroscope", "url": fake.url, "tenant": "team-a",
         "bearer_token": "pyro-t0ken", "window": "1h", "range": "3h", "timeout": 3}
    c.update(over)
    return {"retry_after": 60, "clusters": {"pyro": c}}


def test_tree_files_and_bytes(fake, mount, tmp_path):
    m = mount(cfg(fake))
    assert sorted(os.listdir(m.path / "pyro")) == sorted(["checkout", PAY, DOTS])
    svc = m.path / "pyro/checkout"
    assert sorted(os.listdir(svc)) == windows(3) + ["latest", "merged"]
    w = windows(3)[1]
    assert sorted(os.listdir(svc / w)) == ["cpu.pb.gz", "memory.inuse_space.pb.gz"]
    out = tmp_path / "cpu.pb.gz"
    shutil.copy(svc / w / "cpu.pb.gz", out)
    top = pprof_top(out)
    start_ms = calendar.timegm(time.strptime(w, "%Y-%m-%dT%H:%M:%SZ")) * 1000
    v = value_for("checkout", CPU, start_ms)
    assert "main.work_8" in top and f"Showing nodes accounting for {v + v // 10}ns" in top
    assert os.stat(svc / w / "cpu.pb.gz").st_mtime == start_ms // 1000
    # latest is the newest complete window
    assert (svc / "latest/cpu.pb.gz").read_bytes() == (svc / windows(3)[2] / "cpu.pb.gz").read_bytes()
    # the request carried the tenant, the token and the exact selector
    sel = [c for c in fake.calls if c[0] == "SelectMergeProfile"]
    assert sel and all(h["X-Scope-OrgID"] == "team-a" for _, h, _ in sel)
    assert all(h["Authorization"] == "Bearer pyro-t0ken" for _, h, _ in sel)
    assert "pyro-t0ken" not in m.log()
    # upstream names with / and .. are sanitized and still queried by their real name
    assert sorted(os.listdir(m.path / f"pyro/{PAY}" / w)) == ["cpu.pb.gz",
                                                                   "memory.inuse_space.pb.gz"]
    assert os.listdir(m.path / f"pyro/{DOTS}" / w)
    # nothing was written outside <cache>/<cluster>/<sanitized service>/
    for p in m.cache.rglob("*"):
        rel = p.relative_to(m.cache).parts
        assert rel[0] in (".tmp", ".lock", "pyro") and ".." not in rel
        assert len(rel) < 2 or rel[1] in ("checkout", PAY, DOTS), rel
    assert sorted(os.listdir(m.cache.parent)) == sorted(
        ["cpu.pb.gz", "mnt", "mnt-cache", "mnt.json", "mnt.log"])
    assert m.error_lines() == []


def test_rsync_twice_and_cached_forever(fake, mount, tmp_path):
    m = mount(cfg(fake))
    dst = tmp_path / "dst"
    for expect_zero in (False, True):
        r = subprocess.run(["rsync", "-a", "--stats", f"{m.path}/", f"{dst}/"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        n = int(r.stdout.split("Number of regular files transferred: ")[1].split()[0])
        assert (n == 0) == expect_zero, r.stdout
    calls = len(fake.calls)
    m.restart()
    w = windows(3)[0]
    assert (m.path / "pyro/checkout" / w / "cpu.pb.gz").read_bytes() == \
        (dst / "pyro/checkout" / w / "cpu.pb.gz").read_bytes()
    assert not [c for c in fake.calls[calls:] if c[0] == "SelectMergeProfile"]


def test_merged_equals_pprof_merge_of_windows(fake, mount, tmp_path):
    m = mount(cfg(fake, range="3h"))
    svc = m.path / "pyro/checkout"
    ours = tmp_path / "ours.pb.gz"
    ours.write_bytes((svc / "merged/24h/cpu.pb.gz").read_bytes())
    files = [svc / w / "cpu.pb.gz" for w in windows(3)]
    r = subprocess.run(["go", "tool", "pprof", "-proto", *map(str, files)], capture_output=True,
                       env=go_env(), timeout=60)
    assert r.returncode == 0
    (tmp_path / "theirs.pb.gz").write_bytes(r.stdout)
    # cpu windows are deltas: summed, as pprof merges
    assert pprof_top_nodes(ours) == pprof_top_nodes(tmp_path / "theirs.pb.gz")
    assert sorted(os.listdir(svc / "merged/24h")) == ["cpu.pb.gz", "default.pgo",
                                                      "memory.inuse_space.pb.gz"]


def test_window_without_data_has_no_file(fake, mount):
    fake.empty.add(("checkout", HEAP))
    m = mount(cfg(fake))
    w = windows(3)[0]
    assert os.listdir(m.path / "pyro/checkout" / w) == ["cpu.pb.gz"]
    with pytest.raises(FileNotFoundError):
        os.stat(m.path / "pyro/checkout" / w / "memory.inuse_space.pb.gz")
    assert m.error_lines() == []


@pytest.mark.parametrize("mode,reason", [("garbage", "invalid profile: not a profile.proto"),
                                         ("notfound", "HTTP 404: 404 page not found"),
                                         ("unauth", "HTTP 401"),
                                         ("slow", "timed out")])
def test_fetch_failure_is_eio_one_line_nothing_cached(fake, mount, mode, reason):
    m = mount(cfg(fake, timeout=2))
    w = windows(3)[0]
    svc = m.path / "pyro/checkout"
    assert os.listdir(svc)  # discovered while the fake works
    fake.mode = mode
    assert_fetch_fails(m, f"pyro/checkout/{w}/cpu.pb.gz", reason, "pyro/checkout cpu.pb.gz",
                       f"{fake.url}/querier.v1.QuerierService/SelectMergeProfile")


def test_discovery_refused_is_one_line_and_empty_cluster(fake, mount):
    m = mount(cfg(fake, bearer_token="wrong"))
    assert os.listdir(m.path / "pyro") == []
    errs = m.error_lines()
    assert len(errs) == 1 and "discover pyro (pyroscope at" in errs[0], errs
    assert "ProfileTypes: HTTP 401" in errs[0] and "unauthenticated" in errs[0]
    assert "wrong" not in m.log()


def test_slow_upstream_does_not_block_other_clusters(fake, mount):
    import threading
    slow = Fake(["x"], tenant="team-a", token="pyro-t0ken")
    slow.mode = "slow"
    try:
        c = cfg(fake)
        c["clusters"]["stuck"] = dict(c["clusters"]["pyro"], url=slow.url, timeout=3)
        m = mount(c)
        th = threading.Thread(target=lambda: os.listdir(m.path / "stuck"))
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert "checkout" in os.listdir(m.path / "pyro")
        assert time.monotonic() - t0 < 2.0, "discovery of one cluster held up another"
        th.join(timeout=15)
        errs = m.error_lines()
        assert len(errs) == 1 and "discover stuck" in errs[0] and "timed out" in errs[0], errs
    finally:
        slow.stop()


def test_basic_auth(mount, monkeypatch):
    f = Fake(["checkout"], tenant="team-a", basic=("pyro-user", "b4sic-pw"))
    monkeypatch.setenv("PFS_PYRO_PW", "b4sic-pw")
    try:
        c = {"kind": "pyroscope", "url": f.url, "tenant": "team-a", "window": "1h", "range": "3h",
             "basic_auth": {"username": "pyro-user", "password_env": "PFS_PYRO_PW"}}
        m = mount({"clusters": {"pyro": c}})
        assert os.listdir(m.path / "pyro") == ["checkout"]
        assert (m.path / "pyro/checkout" / windows(3)[0] / "cpu.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
        assert "b4sic-pw" not in m.log()
    finally:
        f.stop()


OBJ = "memory:inuse_space:objects:space:bytes"  # shown as memory.inuse_space too


def test_names_are_stable_per_upstream_identity(mount, tmp_path):
    """Services "a/b" and "a_b" (and two types with one short name), found
    in one order and then the other: each name keeps its own data across
    remounts (suffixes in discovery order swapped cached windows)."""
    fake = Fake(["a/b", "a_b"], tenant="team-a", token="pyro-t0ken")
    fake.types.append((OBJ, "memory", "inuse_space", "objects", "space", "bytes"))
    try:
        c = cfg(fake)
        m = mount(c)
        names = sorted(os.listdir(m.path / "pyro"))
        assert names == sorted(["a_b", stable_name("a/b")])
        w = windows(3)[1]
        files = sorted(os.listdir(m.path / "pyro/a_b" / w))
        assert files == sorted(["cpu.pb.gz", stable_name(HEAP) + ".pb.gz",
                                stable_name(OBJ) + ".pb.gz"])
        first = {(s, f): (m.path / "pyro" / s / w / f).read_bytes() for s in names for f in files}
        m.stop()
        fake.services.reverse()
        fake.types.reverse()
        calls = len(fake.calls)
        m.start()
        assert sorted(os.listdir(m.path / "pyro")) == names
        for (s, f), data in first.items():
            assert (m.path / "pyro" / s / w / f).read_bytes() == data, (s, f)
        assert not [c for c in fake.calls[calls:] if c[0] == "SelectMergeProfile"]  # from the cache
        start_ms = calendar.timegm(time.strptime(w, "%Y-%m-%dT%H:%M:%SZ")) * 1000
        for s, up in (("a_b", "a_b"), (stable_name("a/b"), "a/b")):
            out = tmp_path / f"{s}.pb.gz"
            out.write_bytes(first[(s, "cpu.pb.gz")])
            v = value_for(up, CPU, start_ms)
            assert f"Showing nodes accounting for {v + v // 10}ns" in pprof_top(out), s
    finally:
        fake.stop()


@pytest.mark.parametrize("auth", [{}, {"tenant": "team-a", "bearer_token": "unchecked"}])
def test_pyroscope_oss_without_auth(mount, tmp_path, auth):
    """Pyroscope OSS, single-tenant, checks neither Authorization nor
    X-Scope-OrgID: a config with no auth is served, and one with a token and
    a tenant (which that server ignores) is too."""
    f = Fake(["checkout"])
    try:
        c = {"kind": "pyroscope", "url": f.url, "window": "1h", "range": "2h", "timeout": 3}
        c.update(auth)
        m = mount({"retry_after": 60, "clusters": {"pyro": c}})
        w = windows(2)[0]
        shutil.copy(m.path / "pyro/checkout" / w / "cpu.pb.gz", tmp_path / "cpu.pb.gz")
        assert "main.work_8" in pprof_top(tmp_path / "cpu.pb.gz")
        sel = [h for meth, h, _ in f.calls if meth == "SelectMergeProfile"]
        assert sel and all(h.get("Authorization") == ("Bearer unchecked" if auth else None)
                           for h in sel)
        assert m.error_lines() == []
    finally:
        f.stop()


def test_fake_answers_as_connect_go_does():
    """The fake refuses what Pyroscope refuses, the way it does: an unknown
    method is the mux's plain 404; a content type connect-go has no codec
    for is 415 with an empty body and Accept-Post."""
    import urllib.error
    import urllib.request
    f = Fake(["checkout"])
    try:
        def post(path, ctype):
            req = urllib.request.Request(f.url + path, data=b"", method="POST",
                                         headers={"Content-Type": ctype})
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(req, timeout=5)
            return e.value
        e = post("/querier.v1.QuerierService/NoSuchMethod", "application/proto")
        assert e.code == 404 and e.read() == b"404 page not found\n"
        e = post("/querier.v1.QuerierService/ProfileTypes", "text/plain")
        assert e.code == 415 and e.read() == b""
        assert e.headers["Accept-Post"] == "application/json, application/proto"
    finally:
        f.stop()


def test_merged_windows_sum_cpu_and_average_inuse(fake, mount, tmp_path):
    """Pyroscope's windows: cpu is work in each (summed over merged/'s
    range), inuse_space a value at an instant (their mean, not their sum)."""
    from fakes.wire import Profile
    m = mount(cfg(fake))
    svc = m.path / "pyro/checkout"
    ws = windows(3)

    def total(path, t):
        return Profile(path.read_bytes()).total(t)
    cpu = [total(svc / w / "cpu.pb.gz", "cpu") for w in ws]
    mem = [total(svc / w / "memory.inuse_space.pb.gz", "inuse_space") for w in ws]
    for name in ("cpu.pb.gz", "memory.inuse_space.pb.gz"):
        subprocess.run(["cp", str(svc / "merged/24h" / name), str(tmp_path / name)], check=True)
        pprof_top(tmp_path / name)
    assert total(tmp_path / "cpu.pb.gz", "cpu") == sum(cpu)
    got = total(tmp_path / "memory.inuse_space.pb.gz", "inuse_space")
    assert abs(got - sum(mem) / 3) <= 2, (got, mem)  # each stack's mean, rounded
