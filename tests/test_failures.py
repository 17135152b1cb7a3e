"""A failed scrape is EIO with one log line, and leaves nothing behind."""
import errno
import os
import re
import time

import pytest

from conftest import GoApp, config_for, free_port, pprof_top, wait_for

# fault mode of the Go target -> what the one log line must say
FAULTS = {
    "status500": "HTTP 500",
    "notfound": "HTTP 404",
    "slow": "timed out",
    "cut": "invalid profile: gzip stream truncated",
    "reset": "HTTP 200, transfer closed",
    "garbage": "invalid profile",
    "empty": "invalid profile: not gzip data (0 bytes)",
    "html": "invalid profile: not gzip data",
    "rawproto": "invalid profile: not gzip data",
    # a non-200 answer with no body at all (killed the ASan build before)
    "code302": "HTTP 302",
    "code401": "HTTP 401",
    "code404": "HTTP 404",
    "code500": "HTTP 500",
    "code503": "HTTP 503",
}


def assert_eio(path):
    with pytest.raises(OSError) as e:
        with open(path, "rb") as f:
            f.read()
    assert e.value.errno == errno.EIO, e.value
    with pytest.raises(OSError) as e:
        os.stat(path)
    assert e.value.errno == errno.EIO


def assert_nothing_cached(m, svc="bad"):
    assert m.cached_files() == []
    assert os.listdir(m.cache / ".tmp") == []
    svc_dir = m.path / "local" / svc
    # the snapshot attempt shows while in flight, then is gone: no empty dir
    wait_for(lambda: sorted(os.listdir(svc_dir)) == ["latest", "merged"], timeout=10, what="failed round to vanish")


@pytest.mark.parametrize("mode", sorted(FAULTS))
def test_broken_target_gives_eio_and_one_log_line(goapp, mount, mode):
    app = goapp()
    url = app.fault(mode)
    m = mount(config_for({"bad": {"targets": [url], "timeout": 2, "profiles": ["heap"]}},
                         retry_after=60))
    assert_eio(m.path / "local/bad/latest/heap.pb.gz")
    errs = m.error_lines()
    assert len(errs) == 1, errs
    assert f"{url}/heap" in errs[0] and "local/bad heap" in errs[0]
    assert FAULTS[mode] in errs[0], errs[0]
    assert_nothing_cached(m)
    assert len(m.error_lines()) == 1  # retry_after: no second fetch, no second line


def test_target_down_then_back(goapp_bin, mount, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/debug/pprof"
    m = mount(config_for({"bad": [url]}, retry_after=0))
    heap = m.path / "local/bad/latest/heap.pb.gz"
    assert_eio(heap)
    errs = m.error_lines()
    assert errs and all(re.search(r"HTTP 0, .*(refused|connect)", e, re.I) for e in errs), errs
    assert f"{url}/heap" in errs[0]
    assert m.cached_files() == []

    app = GoApp(goapp_bin, tmp_path, "-addr", f"127.0.0.1:{port}")
    try:
        data = heap.read_bytes()
        assert data[:2] == b"\x1f\x8b" and os.stat(heap).st_size == len(data)
        (tmp_path / "heap.pb.gz").write_bytes(data)
        pprof_top(tmp_path / "heap.pb.gz")
        assert any(f.endswith("/heap.pb.gz") for f in m.cached_files())
    finally:
        app.stop()


def test_one_bad_profile_does_not_spoil_the_others(goapp, mount):
    app = goapp()
    # cpu through "notfound" fails; everything else of the snapshot is served
    m = mount(config_for({"mix": {"targets": [{"url": app.base, "name": "ok"},
                                              {"url": app.fault("notfound"), "name": "gone"}],
                                  "profiles": ["heap", "goroutine"]}}, retry_after=60))
    latest = m.path / "local/mix/latest"
    # a listing shows what exists (an export of it succeeds); a failed file
    # is EIO by name
    assert sorted(os.listdir(latest)) == ["goroutine.ok.pb.gz", "heap.ok.pb.gz"]
    assert os.stat(latest / "heap.ok.pb.gz").st_size > 0
    assert_eio(latest / "heap.gone.pb.gz")
    rounds = [n for n in os.listdir(m.path / "local/mix") if n not in ("latest", "merged")]
    assert len(rounds) == 1
    assert sorted(os.listdir(m.path / "local/mix" / rounds[0])) == ["goroutine.ok.pb.gz",
                                                                    "heap.ok.pb.gz"]
    assert len(m.error_lines()) == 2  # one per failed fetch


def test_oversized_profile_is_refused(goapp, mount):
    app = goapp()
    m = mount(config_for({"bad": {"targets": [app.base], "profiles": ["goroutine"]}},
                         max_profile_bytes=1024, retry_after=60))
    assert_eio(m.path / "local/bad/latest/goroutine.pb.gz")
    errs = m.error_lines()
    assert len(errs) == 1 and "larger than 1024 bytes" in errs[0], errs
    assert m.cached_files() == []


def test_wrong_token_is_eio_and_token_never_logged(goapp, mount, tmp_path, monkeypatch):
    app = goapp("-token", "s3cr3t-good")
    monkeypatch.setenv("PFS_TEST_TOKEN", "s3cr3t-good")
    cfg = config_for({"good": {"targets": [app.base], "bearer_token_env": "PFS_TEST_TOKEN"},
                      "bad": {"targets": [app.base], "bearer_token": "s3cr3t-wrong"}},
                     retry_after=60)
    m = mount(cfg, extra_args=["-d"])
    data = (m.path / "local/good/latest/heap.pb.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b"
    assert_eio(m.path / "local/bad/latest/heap.pb.gz")
    errs = m.error_lines()
    assert len(errs) == 1 and "HTTP 401" in errs[0], errs
    log = m.log()
    assert "s3cr3t" not in log


def test_world_readable_config_with_secret_warns(goapp, mount):
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "bearer_token": "abc"}}))
    m.stop()
    m.config_path.chmod(0o644)
    m.start()
    warn = [l for l in m.log().splitlines() if ": warning: " in l]
    assert len(warn) == 1 and "readable by others" in warn[0] and str(m.config_path) in warn[0]
    assert "abc" not in m.log()


def test_userinfo_in_url_is_not_logged(goapp, mount):
    app = goapp()
    url = f"http://user:pa55word@127.0.0.1:{app.port}/fault/status500/debug/pprof?key=k3y"
    m = mount(config_for({"bad": [url]}, retry_after=60))
    assert_eio(m.path / "local/bad/latest/heap.pb.gz")
    log = m.log()
    assert "pa55word" not in log and "k3y" not in log and "user:" not in log
    assert f"127.0.0.1:{app.port}/fault/status500/debug/pprof/heap" in m.error_lines()[0]


@pytest.mark.parametrize("mode,secret,who", [
    (0o640, {"bearer_token": "abc"}, "its group"),
    (0o604, {"bearer_token": "abc"}, "others"),
    (0o640, {"url": "userinfo"}, "its group"),
    (0o644, {"url": "query"}, "others"),
])
def test_secrets_warning_counts_group_and_url_credentials(goapp, mount, mode, secret, who):
    app = goapp()
    if secret.get("url") == "userinfo":
        svc = {"targets": [f"http://u:pa55@127.0.0.1:{app.port}/debug/pprof"]}
    elif secret.get("url") == "query":
        svc = {"targets": [f"{app.base}?token=t0k"]}
    else:
        svc = dict(secret, targets=[app.base])
    m = mount(config_for({"app": svc}))
    m.stop()
    m.config_path.chmod(mode)
    m.start()
    warn = [l for l in m.log().splitlines() if ": warning: " in l]
    assert len(warn) == 1 and f"readable by {who}" in warn[0], warn
    assert "pa55" not in m.log() and "t0k" not in m.log() and "abc" not in m.log()


def test_query_in_target_url_stays_the_query(goapp, mount, tmp_path):
    """A base URL with a query (a token, say): the profile name goes into
    the path, cpu's seconds join the query."""
    app = goapp("-token", "q")
    # the Go app checks the Authorization header; the query must reach it unchanged
    url = f"{app.base}?debug=0"
    m = mount(config_for({"app": {"targets": [url], "bearer_token": "q",
                                  "profiles": ["heap", "cpu"]}}))
    for name in ("heap", "cpu"):
        out = tmp_path / f"{name}.pb.gz"
        out.write_bytes((m.path / f"local/app/latest/{name}.pb.gz").read_bytes())
        pprof_top(out)
    assert m.error_lines() == []


def test_secrets_echoed_back_are_masked_everywhere(goapp, mount, monkeypatch):
    """A 404 page that quotes the request (Express: "Cannot GET
    /...?token=..."), here with its Authorization and X-Api-Key headers
    too: no secret profilefs sent reaches the log or .status.json (which
    every local user reads under allow_other), wherever the text came
    from; "***" stands in for each."""
    import json
    app = goapp()
    monkeypatch.setenv("PFS_ECHO_KEY", "s3cret-api-key")
    base = app.fault("echo")
    host = base.replace("http://", "")
    m = mount(config_for({
        "q": {"targets": [f"{base}?token=s3cret-query"], "profiles": ["heap"],
              "bearer_token": "s3cret-bearer", "headers": {"X-Api-Key": "s3cret-api-key"}},
        "u": {"targets": [f"http://user:s3cret-userinfo@{host}"], "profiles": ["heap"]},
        "b": {"targets": [base], "profiles": ["heap"],
              "basic_auth": {"username": "bob", "password": "s3cret-basic"}}},
        retry_after=60))
    for svc in ("q", "u", "b"):
        assert_eio(m.path / f"local/{svc}/latest/heap.pb.gz")
    status = (m.path / ".status.json").read_text()
    log = m.log()
    import base64
    basic = base64.b64encode(b"bob:s3cret-basic").decode()
    for secret in ("s3cret-query", "s3cret-bearer", "s3cret-api-key", "s3cret-userinfo",
                   "s3cret-basic", basic):
        assert secret not in log and secret not in status, secret
    errs = {t["service"]: t["last_error"] for t in json.loads(status)["targets"]}
    assert errs["q"].startswith("HTTP 404: Cannot GET /fault/echo/debug/pprof/heap?token=*** "
                                "***"), errs["q"]
    assert errs["b"].startswith("HTTP 404: Cannot GET /fault/echo/debug/pprof/heap Basic ***"), \
        errs["b"]
    assert len(m.error_lines()) == 3 and all("***" in l for l in m.error_lines())
