"""kind "nats": a real nats-server (Debian's 2.9) as broker and system
account, PROFILEZ answered as 2.10+ does, and its -profile port scraped as
a plain pprof target."""
import os
import shutil
import subprocess
import time

import pytest

from conftest import assert_fetch_fails, config_for, free_port, pprof_top, wait_for
from fakes.profilez import Responder


@pytest.fixture
def nats(tmp_path):
    port, prof = free_port(), free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text("""
server_name: "nats-a"
accounts: {
  SYS: { users: [ { user: sys, password: "sys-s3cret" } ] }
  APP: { users: [ { user: app, password: "app-pass" } ] }
}
system_account: SYS
""")
    log = open(tmp_path / "nats.log", "w")
    proc = subprocess.Popen(["nats-server", "-c", str(conf), "-a", "127.0.0.1", "-p", str(port),
                             "-profile", str(prof)], stdout=log, stderr=subprocess.STDOUT)

    def up():
        try:
            import socket
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            socket.create_connection(("127.0.0.1", prof), timeout=0.2).close()
            return True
        except OSError:
            return False
    wait_for(up, what="nats-server")
    r = Responder(port, "sys", "sys-s3cret", prof)
    yield {"port": port, "prof": prof, "responder": r}
    r.stop()
    proc.kill()
    proc.wait()
    log.close()


def nats_cfg(n, **over):
    c = {"kind": "nats", "url": f"nats://127.0.0.1:{n['port']}", "user": "sys",
         "password": "sys-s3cret", "cpu_seconds": 1, "timeout": 3}
    c.update(over)
    return {"retry_after": 60, "clusters": {"nats": c}}


def test_servers_are_services_and_profilez_bytes(nats, mount, tmp_path):
    m = mount(nats_cfg(nats))
    assert os.listdir(m.path / "nats") == ["nats-a"]
    latest = m.path / "nats/nats-a/latest"
    names = sorted(os.listdir(latest))
    assert names == sorted(f"{p}.pb.gz" for p in
                           ["heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu"])
    for n in names:
        shutil.copy(latest / n, tmp_path / n)
        top = pprof_top(tmp_path / n)
    assert "nats-server" in pprof_top(tmp_path / "goroutine.pb.gz")
    assert "Type: cpu" in pprof_top(tmp_path / "cpu.pb.gz")
    rounds = [d for d in os.listdir(m.path / "nats/nats-a") if d[0].isdigit()]
    assert len(rounds) == 1
    assert pprof_top(tmp_path / "heap.pb.gz")
    assert m.error_lines() == [] and "sys-s3cret" not in m.log()


def test_profilez_error_is_eio_with_reason(nats, mount):
    nats["responder"].cpu = False  # a server before 2.10.19
    m = mount(nats_cfg(nats, profiles=["cpu"]))
    assert_fetch_fails(m, "nats/nats-a/latest/cpu.pb.gz",
                       'profilez: Profile "cpu" not found (cpu profiles need nats-server 2.10.19',
                       f"$SYS.REQ.SERVER.{nats['responder'].server_id}.PROFILEZ")


def test_cpu_seconds_over_15_is_capped_and_said(nats, mount, tmp_path):
    """PROFILEZ refuses a cpu duration over 15 s ("Duration 20s should be
    between 0s and 15s"): 20 became an EIO on every cpu file."""
    m = mount(nats_cfg(nats, cpu_seconds=20, profiles=["cpu"], timeout=10))
    warn = [l for l in m.log().splitlines() if "warning: config" in l]
    assert len(warn) == 1 and "clusters.nats.cpu_seconds: 20 s is more than NATS PROFILEZ " \
        "takes (at most 15 s); using 15 s" in warn[0], warn
    shutil.copy(m.path / "nats/nats-a/latest/cpu.pb.gz", tmp_path / "cpu.pb.gz")
    assert "Type: cpu" in pprof_top(tmp_path / "cpu.pb.gz")
    assert [r.get("duration") for r in nats["responder"].requests] == [15 * 10**9]
    assert m.error_lines() == []


@pytest.mark.parametrize("mode,reason", [("silent", "nats: Timeout"),
                                         ("garbage", "invalid profile: not gzip"),
                                         ("badjson", "bad JSON reply")])
def test_bad_or_missing_reply(nats, mount, mode, reason):
    nats["responder"].mode = mode  # before listing: that starts the fetches
    m = mount(nats_cfg(nats, timeout=2, profiles=["heap"]))
    os.listdir(m.path / "nats")
    t0 = time.monotonic()
    assert_fetch_fails(m, "nats/nats-a/latest/heap.pb.gz", reason)
    assert time.monotonic() - t0 < 6


def test_wrong_password_is_one_line_and_empty_cluster(nats, mount):
    m = mount(nats_cfg(nats, password="nope"))
    assert os.listdir(m.path / "nats") == []
    errs = m.error_lines()
    assert len(errs) == 1 and "discover nats (nats at nats://127.0.0.1" in errs[0], errs
    assert "nope" not in m.log()


def test_user_outside_system_account_finds_no_server(nats, mount):
    m = mount(nats_cfg(nats, user="app", password="app-pass"))
    assert os.listdir(m.path / "nats") == []
    errs = m.error_lines()
    assert len(errs) == 1 and "no server answered" in errs[0], errs


def test_nats_profile_port_as_plain_pprof_target(nats, mount, tmp_path):
    m = mount(config_for({"nats-http": [f"http://127.0.0.1:{nats['prof']}/debug/pprof"]}))
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
