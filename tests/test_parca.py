"""kind "parca": services, types and windows from Parca's REST API (fake)."""
import os
import subprocess

import pytest

from conftest import assert_fetch_fails, pprof_top, windows, stable_name
from fakes.parca import Fake


@pytest.fixture
def fake():
    f = Fake(["api", "a/../b"], token="parca-tok")
    yield f
    f.stop()


def cfg(fake, **over):
    c = {"kind": "parca", "url": fake.url, "bearer_token": "parca-tok", "window": "1h",
         "range": "2h", "timeout": 2}
    c.update(over)
    return {"retry_after": 60, "clusters": {"parca": c}}


def test_tree_and_profile(fake, mount, tmp_path):
    m = mount(cfg(fake))
    assert sorted(os.listdir(m.path / "parca")) == sorted([stable_name("a/../b"), "api"])
    svc = m.path / "parca/api"
    assert sorted(os.listdir(svc)) == windows(2) + ["latest", "merged"]
    w = windows(2)[0]
    assert sorted(os.listdir(svc / w)) == ["cpu.pb.gz", "memory.inuse_space.pb.gz"]
    out = tmp_path / "cpu.pb.gz"
    out.write_bytes((svc / w / "cpu.pb.gz").read_bytes())
    assert "main.parca_3" in pprof_top(out)
    q = [c for c in fake.calls if c[0] == "/api/profiles/query"]
    assert 'process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta{job="api"}' in \
        [c[1]["merge.query"] for c in q]
    assert (m.path / "parca" / stable_name("a/../b") / w / "cpu.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    merged = tmp_path / "merged.pb.gz"
    merged.write_bytes((svc / "merged/24h/cpu.pb.gz").read_bytes())
    assert "main.parca_3" in pprof_top(merged)
    assert m.error_lines() == [] and "parca-tok" not in m.log()


@pytest.mark.parametrize("mode,reason", [("badjson", "HTTP 200, bad JSON"),
                                         ("nopprof", "no \"pprof\" string"),
                                         ("badbase64", "not base64"),
                                         ("badproto", "invalid profile: gzip"),
                                         ("unauth", "HTTP 401: {\"code\": 16"),
                                         ("notfound", "HTTP 404: {\"code\": 5"),
                                         ("slow", "timed out")])
def test_failures(fake, mount, mode, reason):
    m = mount(cfg(fake))
    svc = m.path / "parca/api"
    os.listdir(svc)
    fake.mode = mode
    assert_fetch_fails(m, f"parca/api/{windows(2)[0]}/cpu.pb.gz", reason, "/api/profiles/query")


def test_parca_without_auth(mount, tmp_path):
    """Parca has no auth of its own: a config without a token is served."""
    f = Fake(["api"])
    try:
        m = mount({"retry_after": 60, "clusters": {"parca": {
            "kind": "parca", "url": f.url, "window": "1h", "range": "2h", "timeout": 2}}})
        w = windows(2)[0]
        (tmp_path / "cpu.pb.gz").write_bytes((m.path / "parca/api" / w / "cpu.pb.gz").read_bytes())
        assert "main.parca_3" in pprof_top(tmp_path / "cpu.pb.gz")
        assert all("Authorization" not in h for _, _, h in f.calls)
        assert m.error_lines() == []
    finally:
        f.stop()


def test_merged_windows_by_what_parca_says(fake, mount, tmp_path):
    """Parca marks each type delta or not: cpu's windows (delta) sum,
    memory inuse_space's (not delta) is their mean, never their sum."""
    from fakes.wire import Profile
    m = mount(cfg(fake))
    svc = m.path / "parca/api"
    ws = windows(2)

    def total(path, t):
        return Profile(path.read_bytes()).total(t)
    cpu = [total(svc / w / "cpu.pb.gz", "cpu") for w in ws]
    mem = [total(svc / w / "memory.inuse_space.pb.gz", "inuse_space") for w in ws]
    assert mem[0] != mem[1]
    for name in ("cpu.pb.gz", "memory.inuse_space.pb.gz"):
        subprocess.run(["cp", str(svc / "merged/24h" / name), str(tmp_path / name)], check=True)
        pprof_top(tmp_path / name)
    assert total(tmp_path / "cpu.pb.gz", "cpu") == sum(cpu)
    assert total(tmp_path / "memory.inuse_space.pb.gz", "inuse_space") == round(sum(mem) / 2)
    text = "\n".join(Profile((tmp_path / "memory.inuse_space.pb.gz").read_bytes()).comments)
    assert "2 windows of 1 profile type" in text and "inuse_space: values at an instant" in text
