"""kind "nats": real nats-servers. The shared nats-server v2.10.23 (PROFILEZ
with cpu, build/toolchains/nats-server from scripts/toolchains) is the server
under test. Debian's 2.9 has no PROFILEZ; it serves two purposes only: the
clear error a server without PROFILEZ gives, and, with fakes.profilez in
front of it, replies a real server never sends (silence, garbage, bad JSON,
a server before 2.10.19 without cpu)."""
import os
import shutil
import threading
import time

import pytest

from conftest import (NatsServer, assert_fetch_fails, config_for, pprof_top, wait_for)
from fakes.profilez import Responder

DEBIAN_NATS = shutil.which("nats-server") or "/usr/sbin/nats-server"
ALL = ["heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu"]


@pytest.fixture
def nats(nats_servers):
    """One real nats-server 2.10.23 with a pprof port."""
    return nats_servers(1, prof=True)[0]


@pytest.fixture
def old_nats(tmp_path):
    """Debian's nats-server 2.9: PING (STATSZ) answers, PROFILEZ does not."""
    s = NatsServer(DEBIAN_NATS, tmp_path, "nats-old", prof=True)
    yield s
    s.stop()


@pytest.fixture
def fake_profilez(old_nats):
    """PROFILEZ answered by the fake in front of Debian's 2.9, for replies a
    real server does not give on demand."""
    r = Responder(old_nats.port, "sys", "sys-s3cret", old_nats.prof)
    yield r
    r.stop()


def nats_cfg(s, name="nats", **over):
    c = {"kind": "nats", "url": f"nats://127.0.0.1:{s.port}", "user": "sys",
         "password": "sys-s3cret", "cpu_seconds": 1, "timeout": 5}
    c.update(over)
    return {"retry_after": 60, "clusters": {name: c}}


def read_timed(path, out):
    t0 = time.monotonic()
    shutil.copy(path, out)
    return time.monotonic() - t0


def test_servers_are_services_and_profilez_bytes(nats, mount, tmp_path):
    m = mount(nats_cfg(nats))
    assert os.listdir(m.path / "nats") == ["nats-a"]
    latest = m.path / "nats/nats-a/latest"
    assert sorted(os.listdir(latest)) == sorted(f"{p}.pb.gz" for p in ALL)
    for p in ALL:
        shutil.copy(latest / f"{p}.pb.gz", tmp_path / f"{p}.pb.gz")
        top = pprof_top(tmp_path / f"{p}.pb.gz")
        assert os.path.getsize(tmp_path / f"{p}.pb.gz") == os.stat(latest / f"{p}.pb.gz").st_size
    assert "nats-server" in pprof_top(tmp_path / "goroutine.pb.gz")
    assert "Type: cpu" in pprof_top(tmp_path / "cpu.pb.gz")
    assert "Type: inuse_space" in pprof_top(tmp_path / "heap.pb.gz")
    rounds = [d for d in os.listdir(m.path / "nats/nats-a") if d[0].isdigit()]
    assert len(rounds) == 1
    assert m.error_lines() == [] and "sys-s3cret" not in m.log()


def test_cpu_seconds_over_15_is_capped_and_said(nats, mount, tmp_path):
    """PROFILEZ refuses a cpu duration over 15 s ("Duration 20s should be
    between 0s and 15s"): uncapped, 20 was an EIO on every cpu file."""
    m = mount(nats_cfg(nats, cpu_seconds=20, profiles=["cpu"], timeout=10))
    warn = [l for l in m.log().splitlines() if "warning: config" in l]
    assert len(warn) == 1 and "clusters.nats.cpu_seconds: 20 s is more than NATS PROFILEZ " \
        "takes (at most 15 s); using 15 s" in warn[0], warn
    took = read_timed(m.path / "nats/nats-a/latest/cpu.pb.gz", tmp_path / "cpu.pb.gz")
    assert "Type: cpu" in pprof_top(tmp_path / "cpu.pb.gz")
    assert 14.5 <= took < 25, took  # the server profiled the whole 15 s
    assert m.error_lines() == []


def test_two_clusters_on_one_server_take_cpu_in_turn(nats, mount, tmp_path):
    """Two clusters naming one server: a second cpu request while one runs
    fails at once ("cpu profiling already in use"). The cpu gate, keyed by
    server id, runs them one after the other and both files are served."""
    cfg = nats_cfg(nats, "n1", profiles=["cpu"], cpu_seconds=2)
    cfg["clusters"].update(nats_cfg(nats, "n2", profiles=["cpu"], cpu_seconds=2)["clusters"])
    m = mount(cfg)
    res, t0 = {}, time.monotonic()

    def read(c):
        try:
            shutil.copy(m.path / f"{c}/nats-a/latest/cpu.pb.gz", tmp_path / f"{c}.pb.gz")
            res[c] = "ok"
        except OSError as e:
            res[c] = e
    ts = [threading.Thread(target=read, args=(c,)) for c in ("n1", "n2")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    assert res == {"n1": "ok", "n2": "ok"}, (res, m.log())
    for c in ("n1", "n2"):
        assert "Type: cpu" in pprof_top(tmp_path / f"{c}.pb.gz")
    assert took >= 4 - 0.3, took  # one after the other
    assert m.error_lines() == [] and "already in use" not in m.log()


def test_routed_servers_are_services_and_profile_in_parallel(nats_servers, mount, tmp_path):
    """Three servers routed into one cluster: PING reaches every one, each is
    a service, and their cpu profiles run at once (one per server)."""
    servers = nats_servers(3)
    names = sorted(s.name for s in servers)

    def all_routed():
        return all(sum("Route connection created" in l or "rid:" in l
                       for l in open(s.log_path)) >= 1 for s in servers)
    wait_for(all_routed, what="routes")
    m = mount(nats_cfg(servers[0], profiles=["heap", "cpu"], cpu_seconds=2))
    wait_for(lambda: sorted(os.listdir(m.path / "nats")) == names, what="3 services")
    for n in names:
        shutil.copy(m.path / f"nats/{n}/latest/heap.pb.gz", tmp_path / f"{n}.heap")
        assert "Type: inuse_space" in pprof_top(tmp_path / f"{n}.heap")
    res, t0 = {}, time.monotonic()

    def read(n):
        shutil.copy(m.path / f"nats/{n}/latest/cpu.pb.gz", tmp_path / f"{n}.cpu")
        res[n] = pprof_top(tmp_path / f"{n}.cpu")
    ts = [threading.Thread(target=read, args=(n,)) for n in names]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    assert sorted(res) == names and all("Type: cpu" in v for v in res.values()), res
    assert took < 2 * 2, took  # not one after the other
    assert m.error_lines() == []


def test_server_without_profilez_is_a_clear_eio(old_nats, mount):
    """Debian's 2.9 answers PING but has no PROFILEZ: no responders, and the
    log line says which version is needed."""
    m = mount(nats_cfg(old_nats, profiles=["heap"]))
    assert os.listdir(m.path / "nats") == ["nats-old"]
    assert_fetch_fails(m, "nats/nats-old/latest/heap.pb.gz",
                       "nats: No responders available for request",
                       "PROFILEZ needs nats-server 2.10.0 or later")


def test_profilez_error_is_eio_with_reason(old_nats, fake_profilez, mount):
    fake_profilez.cpu = False  # as a server 2.10.0 to 2.10.18
    m = mount(nats_cfg(old_nats, profiles=["cpu"]))
    assert_fetch_fails(m, "nats/nats-old/latest/cpu.pb.gz",
                       'profilez: Profile "cpu" not found (cpu profiles need nats-server 2.10.19',
                       f"$SYS.REQ.SERVER.{old_nats.id}.PROFILEZ")


@pytest.mark.parametrize("mode,reason", [("silent", "nats: Timeout"),
                                         ("garbage", "invalid profile: not gzip"),
                                         ("badjson", "bad JSON reply")])
def test_bad_or_missing_reply(old_nats, fake_profilez, mount, mode, reason):
    fake_profilez.mode = mode  # before listing: that starts the fetches
    m = mount(nats_cfg(old_nats, timeout=2, profiles=["heap"]))
    os.listdir(m.path / "nats")
    t0 = time.monotonic()
    assert_fetch_fails(m, "nats/nats-old/latest/heap.pb.gz", reason)
    assert time.monotonic() - t0 < 6


def test_wrong_password_is_one_line_and_empty_cluster(nats, mount):
    m = mount(nats_cfg(nats, password="nope"))
    assert os.listdir(m.path / "nats") == []
    errs = m.error_lines()
    assert len(errs) == 1 and "discover nats (nats at nats://127.0.0.1" in errs[0], errs
    assert "nope" not in m.log()


def test_user_outside_system_account_finds_no_server(nats, mount):
    """The APP user connects, but $SYS subjects reach nobody: one clear line
    within the timeout, not a hang."""
    t0 = time.monotonic()
    m = mount(nats_cfg(nats, user="app", password="app-pass"))
    assert os.listdir(m.path / "nats") == []
    assert time.monotonic() - t0 < 10
    errs = m.error_lines()
    assert len(errs) == 1 and "no server answered (is the user in the" in errs[0], errs


def test_nats_profile_port_as_plain_pprof_target(nats, mount, tmp_path):
    m = mount(config_for({"nats-http": [f"http://127.0.0.1:{nats.prof}/debug/pprof"]}))
    for p in ("heap", "goroutine", "block"):
        shutil.copy(m.path / f"local/nats-http/latest/{p}.pb.gz", tmp_path / f"{p}.pb.gz")
        pprof_top(tmp_path / f"{p}.pb.gz")
    assert "nats-server" in pprof_top(tmp_path / "goroutine.pb.gz")


def test_rounds_of_an_earlier_mount_show_and_go_by_retention(nats, mount, tmp_path):
    """NATS servers are discovered, not configured: their rounds from an
    earlier mount are listed and served after a remount, and rounds past
    retention (of known and of vanished servers) are deleted from disk."""
    m = mount(dict(nats_cfg(nats, profiles=["heap"]), retention="1d"))
    first = (m.path / "nats/nats-a/latest/heap.pb.gz").read_bytes()
    [rnd] = [d for d in os.listdir(m.path / "nats/nats-a") if d[0].isdigit()]
    m.stop()
    old = m.cache / "nats/nats-a/2020-01-01T00:00:00Z"
    gone = m.cache / "nats/gone-server/2020-01-01T00:00:00Z"
    for d in (old, gone):
        d.mkdir(parents=True)
        (d / "heap.pb.gz").write_bytes(first)
    m.start()
    assert rnd in os.listdir(m.path / "nats/nats-a")
    assert (m.path / "nats/nats-a" / rnd / "heap.pb.gz").read_bytes() == first
    assert not old.exists() and not gone.exists()
    assert "2020-01-01T00:00:00Z" not in os.listdir(m.path / "nats/nats-a")
