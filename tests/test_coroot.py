"""kind "coroot": flame graphs of Coroot's profiling view turned into
profile.proto (fake Coroot with session-cookie login)."""
import errno
import json
import os
import time
import urllib.error
import urllib.request
from urllib.parse import parse_qs, urlparse

import pytest

from conftest import assert_fetch_fails, pprof_top, stable_name, windows
from fakes.coroot import CPU, HEAP, Fake


# Coroot's ApplicationId "<cluster>:<namespace>:<kind>:<name>" is shown as
# Kubernetes discovery names services: <namespace>.<name>
APP = "default.api"
ETC = stable_name("ns.../../etc")  # "ns:Deployment:../../etc": lossy, so hashed


@pytest.fixture
def fake():
    f = Fake(["prod:default:Deployment:api", "ns:Deployment:../../etc"])
    yield f
    f.stop()


def cfg(fake, **over):
    c = {"kind": "coroot", "url": fake.url, "project": "prod", "email": "admin@example.com",
         "password_env": "PFS_COROOT_PW", "window": "1h", "range": "2h", "timeout": 2}
    c.update(over)
    return {"retry_after": 60, "clusters": {"coroot": c}}


@pytest.fixture(autouse=True)
def pw(monkeypatch):
    monkeypatch.setenv("PFS_COROOT_PW", "c0r00t-s3cret")


def flat(top):
    return {line.split()[-1]: line.split()[0] for line in top.splitlines()[5:]}


def test_flamegraph_becomes_valid_pprof(fake, mount, tmp_path):
    m = mount(cfg(fake))
    assert sorted(os.listdir(m.path / "coroot")) == sorted([APP, ETC])
    assert ETC.startswith("ns..._.._etc~")
    svc = m.path / f"coroot/{APP}"
    w = windows(2)[1]
    assert sorted(os.listdir(svc / w)) == ["cpu.pb.gz", "heap_inuse_space.pb.gz"]
    cpu = tmp_path / "cpu.pb.gz"
    cpu.write_bytes((svc / w / "cpu.pb.gz").read_bytes())
    top = pprof_top(cpu)
    k = 1 + (int(time.time()) // 3600 * 3600 - 3600) // 3600 % 3
    assert "Type: cpu" in top
    total_ms = (10 * k + 30 * k + 20 + 10)
    assert f"Showing nodes accounting for {total_ms}ms, 100% of {total_ms}ms total" in top
    f = flat(top)
    assert f["main.handle"] == f"{30 * k}ms" and f["encoding/json.Marshal"] == "20ms"
    # samples/count is there too, as in Go's own CPU profiles (PGO reads either)
    r = pprof_top(cpu, "-sample_index=samples")
    assert f"of {total_ms // 10} total" in r
    heap = tmp_path / "heap.pb.gz"
    heap.write_bytes((svc / w / "heap_inuse_space.pb.gz").read_bytes())
    assert "main.cache" in pprof_top(heap)
    merged = tmp_path / "merged.pb.gz"
    merged.write_bytes((svc / "merged/24h/cpu.pb.gz").read_bytes())
    assert "main.handle" in pprof_top(merged)
    assert m.error_lines() == []
    assert "c0r00t-s3cret" not in m.log() and "sess-abc123" not in m.log()
    assert all(c[2].get("Cookie") == "coroot_session=sess-abc123" for c in fake.calls if c[0] == "GET")
    # the query's from/to are unix ms, like the URL's (coroot decodes ms)
    views = [parse_qs(urlparse(c[1]).query) for c in fake.calls if "query" in c[1]]
    assert views
    for v in views:
        q = json.loads(v["query"][0])
        assert (q["from"], q["to"]) == (int(v["from"][0]), int(v["to"][0]))
        assert abs(q["from"] / 1000 - time.time()) < 3 * 86400, q


def test_window_without_profiles_has_no_file(fake, mount):
    fake.empty.add(("prod:default:Deployment:api", HEAP))
    m = mount(cfg(fake))
    svc = m.path / f"coroot/{APP}"
    assert os.listdir(svc / windows(2)[0]) == ["cpu.pb.gz"]
    assert m.error_lines() == []


def test_login_refused(fake, mount):
    m = mount(cfg(fake, email="nobody@example.com"))
    assert os.listdir(m.path / "coroot") == []
    errs = m.error_lines()
    assert len(errs) == 1 and "login: HTTP 404" in errs[0], errs


def test_project_without_data_is_an_empty_cluster_with_reason(fake, mount):
    """coroot answers a project it has no data of with 200 and "data": null."""
    m = mount(cfg(fake, project="staging-eu"))
    assert os.listdir(m.path / "coroot") == []
    errs = m.error_lines()
    assert len(errs) == 1 and '"data": null (an unknown project' in errs[0], errs
    assert any("/api/project/b3v8n1zt/overview" in c[1] for c in fake.calls)


def test_unknown_project_names_the_projects_there_are(fake, mount):
    m = mount(cfg(fake, project="staging"))
    assert os.listdir(m.path / "coroot") == []
    errs = m.error_lines()
    assert len(errs) == 1, errs
    assert 'project "staging" is neither the id nor the name of a project admin@example.com ' \
           "sees (prod (x7k2p9qa), staging-eu (b3v8n1zt))" in errs[0], errs
    assert not any(c[1].startswith("/api/project/") for c in fake.calls)


@pytest.mark.parametrize("project", ["prod", "x7k2p9qa"])
def test_project_by_name_or_id(fake, mount, project):
    """Coroot's URLs take the project's id; users know it by name."""
    m = mount(cfg(fake, project=project))
    assert APP in os.listdir(m.path / "coroot")
    assert (m.path / f"coroot/{APP}/latest/cpu.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    paths = [c[1] for c in fake.calls if c[1].startswith("/api/project/")]
    assert paths and all(p.startswith("/api/project/x7k2p9qa/") for p in paths), paths
    assert m.error_lines() == []


def test_cpu_cannot_drive_pgo_and_says_so(fake, mount):
    """Flame graphs have no line numbers: no default.pgo, a warning, and
    .status.json says why."""
    m = mount(cfg(fake))
    rng = m.path / f"coroot/{APP}/merged/24h"
    names = os.listdir(rng)
    assert "cpu.pb.gz" in names and "default.pgo" not in names
    with pytest.raises(OSError) as e:
        os.stat(rng / "default.pgo")
    assert e.value.errno == errno.ENOENT
    warn = [l for l in m.log().splitlines() if "no Function.start_line" in l]
    assert warn and all("this source kind has no line numbers" in l for l in warn), warn
    st = json.loads((m.path / ".status.json").read_text())["targets"]
    pgo = {t["service"]: t.get("pgo") for t in st}
    assert pgo[APP] == "no: this source kind's cpu profiles have no line numbers"
    assert m.error_lines() == []


@pytest.mark.parametrize("body,status,text", [(b"{}", 400, b"\n"), (b"not json", 400, b"\n"),
                                              (b'{"email":"admin@example.com","password":"x"}',
                                               404, b"Invalid email or password.\n")])
def test_fake_login_refuses_as_coroot_does(fake, body, status, text):
    req = urllib.request.Request(fake.url + "/api/login", data=body,
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert (e.value.code, e.value.read()) == (status, text)


@pytest.mark.parametrize("mode,reason", [("badjson", "bad JSON"),
                                         ("expired", "HTTP 401"),
                                         ("notfound", "HTTP 404: application not found"),
                                         ("chwarning", "coroot: clickhouse error: timeout"),
                                         ("slow", "timed out")])
def test_failures(fake, mount, mode, reason):
    m = mount(cfg(fake))
    svc = m.path / f"coroot/{APP}"
    os.listdir(svc)
    fake.mode = mode
    assert_fetch_fails(m, f"coroot/{APP}/{windows(2)[0]}/cpu.pb.gz",
                       reason, "/profiling")


@pytest.mark.parametrize("depth", [300, 1000])
def test_deep_flamegraph_is_served_not_a_crash(fake, mount, tmp_path, depth):
    """A flame graph 1000 nodes deep was a recursive walk with a 32 KB frame
    per level on the fetch thread: SIGSEGV (or silent stack corruption)."""
    fake.depth = depth
    m = mount(cfg(fake))
    w = windows(2)[1]
    cpu = tmp_path / "cpu.pb.gz"
    cpu.write_bytes((m.path / f"coroot/{APP}" / w / "cpu.pb.gz").read_bytes())
    top = pprof_top(cpu, "-cum")
    assert "main.f0" in top and f"main.f{depth - 1}" in top
    assert m.proc.poll() is None and m.error_lines() == []


def test_too_deep_flamegraph_is_eio_with_reason(fake, mount):
    fake.depth = 1100  # deeper than JSON parsers (and profilefs) take
    m = mount(cfg(fake))
    w = windows(2)[1]
    line = assert_fetch_fails(m, f"coroot/{APP}/{w}/cpu.pb.gz",
                              "prod:default:Deployment:api", "maximum parsing depth")
    assert m.proc.poll() is None, line


def test_hanging_apps_cost_one_timeout_not_one_each(mount):
    """Discovery asks every app's profiling view at once: 10 apps that hang
    take one timeout (2 s), not 10 x 2 s, and the others are found."""
    hanging = [f"ns:Deployment:hang{i}" for i in range(10)]
    fake = Fake(hanging + ["prod:default:Deployment:api"])
    fake.hang = set(hanging)
    try:
        m = mount(cfg(fake))
        t0 = time.monotonic()
        assert os.listdir(m.path / "coroot") == [APP]
        assert time.monotonic() - t0 < 5
        warns = [l for l in m.log().splitlines() if ": warning: " in l and "hang" in l]
        assert len(warns) == 10 and all("timed out" in w.lower() for w in warns), warns
    finally:
        fake.stop()


def test_app_names_are_what_users_know(mount):
    """<namespace>.<name>; the kind added only where two apps would share a
    name, then the cluster; the same names on a remount, whatever order
    Coroot lists them in."""
    apps = ["prod:default:Deployment:api", "prod:default:StatefulSet:db",
            "prod:default:Deployment:db", "prod:billing:Deployment:api",
            "k3x9m2qa:default:DaemonSet:agent", "eu1:default:DaemonSet:agent",
            "legacy:Deployment:web"]
    want = sorted(["default.api", "default.db.StatefulSet", "default.db.Deployment",
                   "billing.api", "k3x9m2qa.default.agent.DaemonSet",
                   "eu1.default.agent.DaemonSet", "legacy.web"])
    f = Fake(apps)
    try:
        m = mount(cfg(f))
        assert sorted(os.listdir(m.path / "coroot")) == want
        f.apps = list(reversed(apps))
        m.restart()
        assert sorted(os.listdir(m.path / "coroot")) == want
        assert (m.path / "coroot/default.db.StatefulSet/latest/cpu.pb.gz").read_bytes()[:2] == \
            b"\x1f\x8b"
    finally:
        f.stop()
