"""Fleet discovery: the tree comes from file_sd, http_sd, DNS (a real
dnsmasq) and Kubernetes pods (a fake API server checked against the real
kubectl and Python client), against real Go pprof targets."""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import free_port, pprof_top, wait_for
from fakes.kube import FakeKube
from test_core import round_dirs
from test_exports import rsync


def disc_config(discover, profiles=("heap", "cpu"), **top):
    cfg = {"cpu_seconds": 1, "timeout": 5, "retry_after": 0, "latest_ttl": 2}
    cfg.update(top)
    cfg["clusters"] = {"fleet": {"discover": discover, "profiles": list(profiles)}}
    return cfg


def write_groups(path, groups):
    """As a careful writer does: aside, then renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(groups))
    os.replace(tmp, path)


def addr(app):
    return f"127.0.0.1:{app.port}"


def inst(app):
    return f"127.0.0.1_{app.port}"


def files(*insts, profiles=("cpu", "heap")):
    return sorted(f"{p}.{i}.pb.gz" for i in insts for p in profiles)


def disc(m):
    return json.loads((m.path / ".status.json").read_text())["discovery"][0]


def discovered(m):
    return sorted((d["service"], d["instance"]) for d in disc(m)["discovered"])


def latest(m, svc):
    return sorted(os.listdir(m.path / "fleet" / svc / "latest"))


def wait_latest(m, svc, want, timeout=15):
    """latest/ is a snapshot for latest_ttl: wait for the one that shows want."""
    wait_for(lambda: latest(m, svc) == want, timeout, f"{svc}/latest == {want}")


def test_file_sd_tree_files_and_pprof(goapp, mount, tmp_path):
    a, b = goapp(), goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [{"targets": [addr(a), addr(b)], "labels": {"job": "api"}},
                      {"targets": [addr(a)], "labels": {"service": "worker", "instance": "w-1"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}}))
    assert sorted(os.listdir(m.path / "fleet")) == ["api", "worker"]
    assert latest(m, "api") == files(inst(a), inst(b))
    # one replica: the instance is in the name all the same
    assert latest(m, "worker") == files("w-1")
    shutil.copy(m.path / "fleet/worker/latest/heap.w-1.pb.gz", tmp_path / "h.pb.gz")
    assert "main.retainHeap" in pprof_top(tmp_path / "h.pb.gz")
    assert "main.burnCPU" in pprof_top(m.path / f"fleet/api/latest/cpu.{inst(b)}.pb.gz")
    st = disc(m)
    assert st["mechanisms"][0]["source"] == f"file_sd {sd}"
    assert st["mechanisms"][0]["targets"] == 3 and st["mechanisms"][0]["last_error"] is None
    assert discovered(m) == sorted([("api", inst(a)), ("api", inst(b)), ("worker", "w-1")])
    urls = {d["instance"]: d["url"] for d in st["discovered"]}
    assert urls["w-1"] == f"http://{addr(a)}/debug/pprof"
    assert m.error_lines() == []


def test_file_sd_churn_keeps_snapshots_and_last_good_set(goapp, mount, tmp_path):
    a, b, c = goapp(), goapp(), goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}}))
    assert latest(m, "api") == files(inst(a))
    # 1 -> 2 replicas: a's names stay
    write_groups(sd, [{"targets": [addr(a), addr(b)], "labels": {"job": "api"}}])
    wait_latest(m, "api", files(inst(a), inst(b)))
    r_ab = round_dirs(m.path / "fleet/api")[-1]
    assert sorted(os.listdir(m.path / "fleet/api" / r_ab)) == files(inst(a), inst(b))

    # b leaves, c comes: latest/ follows, b's snapshot stays
    write_groups(sd, [{"targets": [addr(a), addr(c)], "labels": {"job": "api"}}])
    wait_latest(m, "api", files(inst(a), inst(c)))
    old = m.path / "fleet/api" / r_ab / f"heap.{inst(b)}.pb.gz"
    assert old.stat().st_size > 0 and old.read_bytes()[:2] == b"\x1f\x8b"
    with pytest.raises(FileNotFoundError):
        os.stat(m.path / f"fleet/api/latest/heap.{inst(b)}.pb.gz")
    now = {t["target"]: t["discovered_now"] for t in
           json.loads((m.path / ".status.json").read_text())["targets"]}
    assert now == {inst(a): True, inst(b): False, inst(c): True}

    # a half-written file (a writer that is not atomic): the last good set stays
    sd.write_text('[{"targets": ["127.0.0.1:1')
    wait_for(lambda: disc(m)["mechanisms"][0]["last_error"], what="the error in status")
    err = [l for l in m.error_lines() if "discovery" in l]
    assert len(err) == 1 and str(sd) in err[0] and "not JSON" in err[0], err
    assert "keeping its last 2 targets" in err[0]
    time.sleep(2.5)
    assert latest(m, "api") == files(inst(a), inst(c))
    assert discovered(m) == sorted([("api", inst(a)), ("api", inst(c))])

    # a definite empty answer empties it; snapshots stay
    write_groups(sd, [])
    wait_latest(m, "api", [])
    assert disc(m)["mechanisms"][0]["last_error"] is None
    assert os.listdir(m.path / "fleet") == ["api"]
    assert r_ab in round_dirs(m.path / "fleet/api") and old.exists()
    assert "works again" in m.log()


def test_services_gone_are_hidden_and_bounded(goapp, mount, tmp_path):
    a = goapp()
    sd = tmp_path / "targets.json"
    dead = f"127.0.0.1:{free_port()}"
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}},
                      {"targets": [dead], "labels": {"job": "old"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}, "max_targets": 2}))
    assert sorted(os.listdir(m.path / "fleet")) == ["api", "old"]
    # "old" leaves with nothing fetched: it is not listed any more
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}}])
    wait_for(lambda: os.listdir(m.path / "fleet") == ["api"], 10, "old hidden")
    # services once discovered stay known until unmount: max_targets bounds them
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}},
                      {"targets": [addr(a)], "labels": {"job": "new"}}])
    wait_for(lambda: disc(m)["n_dropped"] == 1, 10, "new dropped")
    assert disc(m)["dropped"][0]["reason"].startswith(
        "a new service new, but the cluster knows max_targets (2) services already")
    assert os.listdir(m.path / "fleet") == ["api"]
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}},
                      {"targets": [addr(a)], "labels": {"job": "old"}}])
    wait_for(lambda: sorted(os.listdir(m.path / "fleet")) == ["api", "old"], 10, "old back")
    assert latest(m, "old") == files(inst(a))


def test_discovered_snapshots_survive_a_remount(goapp, mount, tmp_path):
    a, b = goapp(), goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [{"targets": [addr(a), addr(b)], "labels": {"job": "api"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}}))
    assert latest(m, "api") == files(inst(a), inst(b))
    r1 = round_dirs(m.path / "fleet/api")[-1]
    data = (m.path / "fleet/api" / r1 / f"heap.{inst(b)}.pb.gz").read_bytes()
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}}])
    m.restart()
    # b is not discovered now, but its snapshot is still there, byte for byte
    assert r1 in round_dirs(m.path / "fleet/api")
    assert sorted(os.listdir(m.path / "fleet/api" / r1)) == files(inst(a), inst(b))
    assert (m.path / "fleet/api" / r1 / f"heap.{inst(b)}.pb.gz").read_bytes() == data
    time.sleep(2.5)
    assert latest(m, "api") == files(inst(a))
    tgt = {t["target"]: t for t in json.loads((m.path / ".status.json").read_text())["targets"]}
    assert tgt[inst(b)]["discovered_now"] is False and tgt[inst(a)]["discovered_now"] is True


def test_mapping_keep_and_dropped_reasons(goapp, mount, tmp_path):
    a = goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [
        {"targets": [addr(a)], "labels": {"app": "api", "env": "prod", "pod": "api-7f9c"}},
        {"targets": ["127.0.0.1:1"], "labels": {"app": "api", "env": "dev", "pod": "api-dev"}},
        {"targets": [addr(a)], "labels": {"env": "prod", "pod": "lonely"}},
        {"targets": ["10.0.0.1/evil:80", "host"], "labels": {"app": "x", "env": "prod"}},
        {"targets": [addr(a)], "labels": {"app": "odd/../name", "env": "prod", "pod": "../../etc"}},
        {"targets": [addr(a)], "labels": {"app": "api", "env": "prod", "pod": "api-7f9c"}},
    ])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}, "service": ["app"],
                           "instance": ["pod", "__address__"], "keep": {"env": "prod|staging"}}))
    names = sorted(os.listdir(m.path / "fleet"))
    assert names[0] == "api" and len(names) == 2
    odd = names[1]  # upstream names are sanitized: one path component
    assert odd.startswith("odd_.._name~") and "/" not in odd  # and stands for that name only
    assert latest(m, "api") == files("api-7f9c")
    odd_files = latest(m, odd)
    assert len(odd_files) == 2 and all("/" not in f and not f.startswith(".") for f in odd_files)
    st = disc(m)
    reasons = sorted(d["reason"] for d in st["dropped"])
    assert st["n_dropped"] == 5 == len(reasons)
    assert 'keep: env="dev" does not match "prod|staging"' in reasons
    assert "no service name: none of the labels app is set" in reasons
    assert '__address__ "10.0.0.1/evil:80" is not host:port' in reasons
    assert '__address__ "host" is not host:port' in reasons
    assert any(r.startswith("instance api-7f9c of service api is listed already") for r in reasons)
    dev = next(d for d in st["dropped"] if d["reason"].startswith("keep"))
    assert dev["labels"]["pod"] == "api-dev" and dev["from"] == f"file_sd {sd}"


class SDServer:
    """A Prometheus http_sd endpoint: target groups as JSON, bearer token."""

    def __init__(self, token):
        self.groups, self.code, self.hits, self.delay = [], 200, 0, 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.hits += 1
                time.sleep(outer.delay)
                ok = self.headers.get("Authorization") == f"Bearer {token}"
                code = outer.code if ok else 401
                body = json.dumps(outer.groups if code == 200 else {"error": "no"}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sd"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sd_server():
    s = SDServer("sd-t0ken")
    yield s
    s.stop()


def test_http_sd_refresh_auth_and_errors(goapp, mount, sd_server, tmp_path):
    a, b = goapp(), goapp()
    sd_server.groups = [{"targets": [addr(a)], "labels": {"job": "api"}}]
    m = mount(disc_config({"http_sd": {"url": sd_server.url, "refresh_interval": "1s",
                                       "bearer_token_env": "PFS_SD_TOKEN"}}),
              env={"PFS_SD_TOKEN": "sd-t0ken"})
    assert latest(m, "api") == files(inst(a))
    assert disc(m)["discovered"][0]["from"] == f"http_sd {sd_server.url}"
    sd_server.groups = [{"targets": [addr(a), addr(b)], "labels": {"job": "api"}}]
    wait_latest(m, "api", files(inst(a), inst(b)))
    # the endpoint fails: its last good set stays, one log line says why
    sd_server.code = 500
    wait_for(lambda: disc(m)["mechanisms"][0]["last_error"], what="http_sd error")
    hits = sd_server.hits
    wait_for(lambda: sd_server.hits >= hits + 2, what="more refreshes")
    err = [l for l in m.error_lines() if "discovery" in l]
    assert len(err) == 1 and "HTTP 500" in err[0] and sd_server.url in err[0], err
    assert "sd-t0ken" not in m.log()
    time.sleep(2.5)
    assert latest(m, "api") == files(inst(a), inst(b))
    sd_server.code = 200
    sd_server.groups = []
    wait_latest(m, "api", [])


def test_listings_never_wait_for_a_refresh(goapp, mount, sd_server):
    a, b = goapp(), goapp()
    sd_server.groups = [{"targets": [addr(a)], "labels": {"job": "api"}}]
    m = mount(disc_config({"http_sd": {"url": sd_server.url, "refresh_interval": "1s",
                                       "bearer_token": "sd-t0ken", "timeout": "20s"}}))
    assert os.listdir(m.path / "fleet") == ["api"]
    # a new service: the cluster's listing (cached by the kernel) shows it
    sd_server.groups = [{"targets": [addr(a)], "labels": {"job": "api"}},
                        {"targets": [addr(b)], "labels": {"job": "db"}}]
    wait_for(lambda: sorted(os.listdir(m.path / "fleet")) == ["api", "db"], 10, "db listed")
    # the endpoint hangs: listings answer from the last result meanwhile
    sd_server.delay = 8
    hits = sd_server.hits
    wait_for(lambda: sd_server.hits > hits, 5, "a refresh in flight")
    t0 = time.monotonic()
    assert sorted(os.listdir(m.path / "fleet")) == ["api", "db"]
    assert latest(m, "db") == files(inst(b))
    json.loads((m.path / ".status.json").read_text())
    assert time.monotonic() - t0 < 5  # a cpu profile (1 s), never the 8 s refresh
    sd_server.delay = 0


def test_http_sd_wrong_token_is_logged(mount, sd_server):
    m = mount(disc_config({"http_sd": {"url": sd_server.url, "bearer_token": "wrong"}}))
    assert os.listdir(m.path / "fleet") == []
    assert disc(m)["mechanisms"][0]["last_error"].startswith("HTTP 401")
    assert any("HTTP 401" in l and sd_server.url in l for l in m.error_lines())


class Dnsmasq:
    """A real DNS server on 127.0.0.1: only its own records (--local), so
    names it does not hold are NXDOMAIN."""

    def __init__(self, tmp, records):
        self.port, self.tmp = free_port(), tmp
        self.proc = None
        self.start(records)

    def start(self, records):
        self.stop()
        args = ["dnsmasq", "-k", "-C", "/dev/null", f"--port={self.port}",
                "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
                "--local=/fleet.test/", "--user=root", "--pid-file=", *records]
        self.log = open(self.tmp / "dnsmasq.log", "a")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        time.sleep(0.3)
        assert self.proc.poll() is None, (self.tmp / "dnsmasq.log").read_text()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            self.log.close()


@pytest.fixture
def dnsmasq(tmp_path):
    if not shutil.which("dnsmasq"):
        pytest.skip("dnsmasq is not installed (scripts/install-deps installs dnsmasq-base)")
    servers = []

    def start(records):
        d = Dnsmasq(tmp_path, records)
        servers.append(d)
        return d

    yield start
    for d in servers:
        d.stop()


def test_dns_sd_srv_and_a_records(goapp, mount, dnsmasq):
    a, b = goapp(), goapp()
    srv = "_pprof._tcp.fleet.test"
    records = [f"--srv-host={srv},app-a.fleet.test,{a.port}",
               f"--srv-host={srv},app-b.fleet.test,{b.port}",
               "--host-record=app-a.fleet.test,127.0.0.1", "--host-record=app-b.fleet.test,127.0.0.1",
               "--host-record=cache.fleet.test,127.0.0.1"]
    dns = dnsmasq(records)
    server = f"127.0.0.1:{dns.port}"
    m = mount(disc_config({
        "dns_sd": [{"names": [srv, "_none._tcp.fleet.test"], "server": server,
                    "refresh_interval": "1s", "timeout": "1s"},
                   {"names": ["cache.fleet.test"], "type": "A", "port": a.port, "server": server}],
        "service": ["__meta_dns_name"],
        "instance": ["__meta_dns_srv_record_target", "__address__"]}))
    assert sorted(os.listdir(m.path / "fleet")) == ["_pprof._tcp.fleet.test", "cache.fleet.test"]
    assert latest(m, srv) == files("app-a.fleet.test", "app-b.fleet.test")
    assert latest(m, "cache.fleet.test") == files(inst(a))
    urls = {d["instance"]: d["url"] for d in disc(m)["discovered"]}
    # SRV targets resolved through the configured server
    assert urls["app-b.fleet.test"] == f"http://127.0.0.1:{b.port}/debug/pprof"
    assert [x["last_error"] for x in disc(m)["mechanisms"]] == [None, None]  # NXDOMAIN: none

    # a record goes away (dnsmasq restarted without it)
    dns.start([r for r in records if "app-b" not in r])
    wait_latest(m, srv, files("app-a.fleet.test"))
    # the server is gone: a timeout keeps the last good set
    dns.stop()
    wait_for(lambda: disc(m)["mechanisms"][0]["last_error"], 10, "dns error")
    assert "no answer" in disc(m)["mechanisms"][0]["last_error"]
    time.sleep(2.5)
    assert latest(m, srv) == files("app-a.fleet.test")


def annotated(port, types=("memory", "cpu")):
    ann = {}
    for t in types:
        ann[f"profiles.grafana.com/{t}.scrape"] = "true"
        ann[f"profiles.grafana.com/{t}.port_name"] = "pprof"
    return ann


@pytest.fixture
def kube():
    k = FakeKube(token="k8s-t0ken")
    yield k
    k.stop()


def test_kubernetes_pods_list_watch_and_410(goapp, mount, kube):
    a, b = goapp(), goapp()
    kube.max_watch = 2  # watches end often: each one resumes from its resourceVersion
    kube.add_pod("prod", "api-1", port=a.port, labels={"app.kubernetes.io/name": "api"},
                 annotations=annotated(a.port))
    kube.add_pod("prod", "api-2", port=b.port, labels={"app": "api"},
                 annotations={"parca.dev/scrape": "true", "parca.dev/port": str(b.port)})
    kube.add_pod("prod", "plain", port=a.port, labels={"app": "plain"})
    kube.add_pod("prod", "starting", port=a.port, labels={"app": "api"}, phase="Pending",
                 annotations=annotated(a.port))
    kube.add_pod("dev", "tool", port=a.port, container="tool", annotations=annotated(a.port))
    kube.add_pod("dev", "named", port=a.port, labels={"app": "x"},
                 annotations={**annotated(a.port, ("cpu",)), "pyroscope.io/service_name": "checkout"})
    m = mount(disc_config({"kubernetes": {"api_server": kube.url, "bearer_token_env": "PFS_K8S"}},
                          profiles=("heap", "allocs", "goroutine", "cpu")),
              env={"PFS_K8S": "k8s-t0ken"})
    # namespace-prefixed service names; the container name when no label names it
    assert sorted(os.listdir(m.path / "fleet")) == ["checkout", "dev.tool", "prod.api"]
    # memory -> heap and allocs, cpu -> cpu; parca.dev/scrape -> every profile
    assert latest(m, "prod.api") == sorted(
        ["allocs.api-1.pb.gz", "cpu.api-1.pb.gz", "heap.api-1.pb.gz", "allocs.api-2.pb.gz",
         "cpu.api-2.pb.gz", "goroutine.api-2.pb.gz", "heap.api-2.pb.gz"])
    assert latest(m, "checkout") == ["cpu.named.pb.gz"]
    assert "main.retainHeap" in pprof_top(m.path / "fleet/prod.api/latest/heap.api-2.pb.gz")
    st = disc(m)
    why = {d["pod"]: d["reason"] for d in st["dropped"]}
    assert why["prod/starting"] == "pod is Pending, not Running"
    assert why["prod/plain"].startswith("not annotated for profiling")
    lab = next(d for d in st["discovered"] if d["instance"] == "api-1")
    assert lab["url"] == f"http://127.0.0.1:{a.port}/debug/pprof"
    assert all(r[2] == "Bearer k8s-t0ken" for r in kube.requests)
    assert "k8s-t0ken" not in m.log()

    # watch: a pod goes, one comes, one becomes Running
    kube.delete_pod("prod", "api-1")
    kube.add_pod("prod", "api-3", port=a.port, labels={"app": "api"}, annotations=annotated(a.port))
    kube.modify_pod("prod", "starting", lambda p: p["status"].update(
        phase="Running", podIP="127.0.0.1", podIPs=[{"ip": "127.0.0.1"}]))
    want = sorted(["allocs.api-2.pb.gz", "cpu.api-2.pb.gz", "goroutine.api-2.pb.gz",
                   "heap.api-2.pb.gz", "allocs.api-3.pb.gz", "cpu.api-3.pb.gz", "heap.api-3.pb.gz",
                   "allocs.starting.pb.gz", "cpu.starting.pb.gz", "heap.starting.pb.gz"])
    wait_latest(m, "prod.api", want)
    lists = kube.lists
    # history compacted: the next watch (from an older resourceVersion) gets
    # 410 and lists again
    kube.compact()
    wait_for(lambda: kube.lists > lists, 10, "a list after 410")
    kube.delete_pod("prod", "starting")
    wait_latest(m, "prod.api", [f for f in want if "starting" not in f])
    assert m.error_lines() == []


def test_kubernetes_one_namespace_and_list_pages(goapp, mount, kube):
    a = goapp()
    for i in range(1200):  # more than one page (500)
        kube.add_pod("prod", f"api-{i:04d}", port=a.port, labels={"app": "api"},
                     annotations=annotated(a.port) if i < 3 else {})
    m = mount(disc_config({"kubernetes": {"api_server": kube.url, "bearer_token": "k8s-t0ken",
                                          "namespaces": ["prod"]}}))
    # one namespace: no prefix (the first list may outlast the mount's wait)
    wait_for(lambda: os.listdir(m.path / "fleet") == ["api"], 20, "api listed")
    assert disc(m)["n_dropped"] == 1197 and len(disc(m)["dropped"]) == 1000
    lists = [q for p, q, _ in kube.requests if p == "/api/v1/namespaces/prod/pods" and "watch" not in q]
    assert [q.get("continue") for q in lists[:3]] == [None, "500", "1000"]


def test_kubernetes_hostile_watch(goapp, mount, kube):
    a = goapp()
    kube.add_pod("prod", "api-1", port=a.port, labels={"app": "api"}, annotations=annotated(a.port))
    m = mount(disc_config({"kubernetes": {"api_server": kube.url, "bearer_token": "k8s-t0ken",
                                          "namespaces": ["prod"]}}))
    assert latest(m, "api") == files("api-1")

    def relisted_after(raw, fragment):
        lists = kube.lists
        kube.inject(raw)
        wait_for(lambda: kube.lists > lists, 15, "a list after " + fragment)
        wait_for(lambda: any(fragment in l for l in m.error_lines()), 5, fragment)
        assert discovered(m) == [("api", "api-1")]  # the last good set stays meanwhile

    relisted_after(b"{not json\n", "a watch event that is not")
    relisted_after(b'{"type": "ERROR", "object": {"kind": "Status", "code": 500, '
                   b'"message": "etcdserver: request timed out"}}\n', "watch ERROR 500")
    relisted_after(b"x" * (17 << 20), "an answer over 16 MiB")
    relisted_after(b'{"type": "SURPRISE", "object": {}}\n', "unknown watch event type")
    kube.add_pod("prod", "api-2", port=a.port, labels={"app": "api"}, annotations=annotated(a.port))
    wait_latest(m, "api", files("api-1", "api-2"))


def test_kubernetes_tls_ca_file_and_rotated_token_file(goapp, mount, tmp_path):
    """An API server over https with its own CA, and a bearer token file that
    is read again at each connection (service account tokens rotate)."""
    cert, key = tmp_path / "ca.crt", tmp_path / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    a = goapp()
    k = FakeKube(token="t1", tls=(str(cert), str(key)))
    try:
        k.max_watch = 2
        k.add_pod("prod", "api-1", port=a.port, labels={"app": "api"}, annotations=annotated(a.port))
        tok = tmp_path / "token"
        tok.write_text("t1\n")
        m = mount(disc_config({"kubernetes": {"api_server": k.url, "bearer_token_file": str(tok),
                                              "ca_file": str(cert), "namespaces": ["prod"]}}))
        assert latest(m, "api") == files("api-1")
        # the token rotates: the next connection reads the new one
        k.token = "t2"
        tok.write_text("t2\n")
        k.add_pod("prod", "api-2", port=a.port, labels={"app": "api"}, annotations=annotated(a.port))
        wait_latest(m, "api", files("api-1", "api-2"))
        assert k.requests[-1][2] == "Bearer t2"
        assert "Bearer" not in m.log()
        # without the CA the server is not trusted: one error, nothing discovered
        m2 = mount(disc_config({"kubernetes": {"api_server": k.url, "bearer_token_file": str(tok),
                                               "namespaces": ["prod"]}}), name="m2")
        assert os.listdir(m2.path / "fleet") == []
        err = disc(m2)["mechanisms"][0]["last_error"]
        assert err.startswith("list pods: ") and "certificate" in err.lower(), err
    finally:
        k.stop()


def test_fake_kube_matches_kubectl_and_python_client(tmp_path):
    """The fake speaks the real wire format: kubectl and the Python client
    list it (in pages), watch it, and see 410 as they would from a cluster."""
    kubernetes = pytest.importorskip("kubernetes", reason="Debian's python3-kubernetes")
    k = FakeKube()  # kubectl sends no token over plain http (kubectl proxy's setup)
    try:
        for i in range(3):
            k.add_pod("prod", f"api-{i}", labels={"app": "api"}, annotations=annotated(6060))
        k.add_pod("dev", "x", phase="Pending")
        kc = k.kubeconfig(tmp_path / "kubeconfig")
        if shutil.which("kubectl"):
            r = subprocess.run(["kubectl", "--kubeconfig", str(kc), "get", "pods", "-A", "-o",
                                "json", "--chunk-size=2"], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            items = json.loads(r.stdout)["items"]
            assert [p["metadata"]["name"] for p in items] == ["x", "api-0", "api-1", "api-2"]
            assert items[1]["metadata"]["annotations"]["profiles.grafana.com/cpu.scrape"] == "true"
            w = subprocess.Popen(["kubectl", "--kubeconfig", str(kc), "get", "pods", "-n", "prod",
                                  "--watch-only", "-o", "json"], stdout=subprocess.PIPE, text=True)
            time.sleep(2)
            k.add_pod("prod", "api-9")
            k.delete_pod("prod", "api-0")
            time.sleep(2)
            w.terminate()
            out = w.communicate(timeout=10)[0]
            assert out.count('"name": "api-9"') == 1 and out.count('"name": "api-0"') == 1
        from kubernetes import client, config, watch
        config.load_kube_config(str(kc))
        v1 = client.CoreV1Api()
        page = v1.list_pod_for_all_namespaces(limit=2)
        assert [p.metadata.name for p in page.items] == ["x", "api-1"]
        rest = v1.list_pod_for_all_namespaces(limit=2, _continue=page.metadata._continue)
        assert [p.metadata.name for p in rest.items] == ["api-2", "api-9"]
        assert rest.items[0].spec.containers[0].ports[0].name == "pprof"
        wt, events = watch.Watch(), []

        def later():
            time.sleep(0.5)
            k.add_pod("prod", "api-10")
            k.modify_pod("prod", "api-1", lambda p: p["metadata"]["labels"].update(x="y"))
            k.delete_pod("prod", "api-2")
            time.sleep(0.5)
            wt.stop()

        threading.Thread(target=later).start()
        for ev in wt.stream(v1.list_namespaced_pod, "prod",
                            resource_version=page.metadata.resource_version, timeout_seconds=5):
            events.append((ev["type"], ev["object"].metadata.name))
        assert events == [("ADDED", "api-10"), ("MODIFIED", "api-1"), ("DELETED", "api-2")]
        # bookmarks: the object carries only the resourceVersion to go on from
        k.bookmark_every = 0.3
        marks = []
        for ev in watch.Watch().stream(v1.list_namespaced_pod, "prod", allow_watch_bookmarks=True,
                                       resource_version=str(k.rv), timeout_seconds=1):
            # (the client leaves a BOOKMARK's object a dict, as it comes)
            marks.append((ev["type"], ev["object"]["metadata"]["resourceVersion"]))
        assert marks and all(t == "BOOKMARK" and rv == str(k.rv) for t, rv in marks), marks
        k.compact()
        with pytest.raises(client.exceptions.ApiException) as e:
            for _ in watch.Watch().stream(v1.list_namespaced_pod, "prod",
                                          resource_version=page.metadata.resource_version,
                                          timeout_seconds=3):
                pass
        assert e.value.status == 410
    finally:
        k.stop()


def test_rsync_of_a_discovered_fleet_twice(goapp, mount, tmp_path):
    a, b = goapp(), goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [{"targets": [addr(a), addr(b)], "labels": {"job": "api"}},
                      {"targets": [addr(b)], "labels": {"job": "db"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}}, latest_ttl=3600))
    dst = tmp_path / "dst"
    # per service: latest/ (2 profiles per instance), its <time>/ copy, and
    # merged/24h/ (cpu, heap, default.pgo)
    assert rsync(m.path, dst) == (4 + 4 + 3) + (2 + 2 + 3)
    assert rsync(m.path, dst) == 0
    assert sorted(os.listdir(dst / "fleet/api/latest")) == files(inst(a), inst(b))
    assert m.error_lines() == []


@pytest.mark.parametrize("discover, fragment", [
    ({"file_sdd": {"files": ["/x"]}}, 'discover.file_sdd: unknown field; did you mean "file_sd"?'),
    ({}, "discover: needs one of file_sd, http_sd, dns_sd, kubernetes"),
    ({"file_sd": {"files": ["rel.json"]}}, "discover.file_sd.files: [0] must be an absolute path"),
    ({"file_sd": {"files": ["/x"]}, "keep": {"env": "(a"}},
     "discover.keep.env: not a POSIX extended regular expression"),
    ({"file_sd": {"files": ["/x"]}, "keep": {"env": "prod|sta" + "+" * 40}},
     "discover.keep.env: a regular expression of at most 256 bytes and 16 repetitions"),
    ({"dns_sd": {"names": ["a.test"], "type": "A"}}, 'discover.dns_sd.port: is required for type "A"'),
    ({"dns_sd": {"names": ["a.test"], "server": "dns.example:53"}},
     "discover.dns_sd.server: must be an IPv4 address"),
    ({"kubernetes": {}}, "discover.kubernetes.api_server: is required outside a pod"),
    ({"http_sd": {"url": "ftp://x"}}, "discover.http_sd.url: must be an http:// or https:// URL"),
    ({"file_sd": {"files": ["/x"]}, "service": []}, "discover.service: must be a label name"),
])
def test_discover_config_errors(profilefs_bin, tmp_path, discover, fragment):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(disc_config(discover, cache_dir=str(tmp_path / "c"))))
    r = subprocess.run([str(profilefs_bin), "--check", "-c", str(cfg)], capture_output=True,
                       text=True, env={k: v for k, v in os.environ.items()
                                       if not k.startswith("KUBERNETES_")})
    assert r.returncode == 2 and f"config {cfg}: clusters.fleet.{fragment}" in r.stderr, r.stderr


def test_discover_with_services_is_refused(profilefs_bin, tmp_path):
    c = disc_config({"file_sd": {"files": ["/x"]}})
    c["clusters"]["fleet"]["services"] = {"a": {"targets": ["http://127.0.0.1:1"]}}
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(c))
    r = subprocess.run([str(profilefs_bin), "--check", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2
    assert 'clusters.fleet.services: give either "services" or "discover", not both' in r.stderr


def test_hostile_file_sd(goapp, mount, tmp_path):
    a = goapp()
    sd = tmp_path / "targets.json"
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "api"}}])
    m = mount(disc_config({"file_sd": {"files": [str(sd)]}, "max_targets": 3}))
    assert latest(m, "api") == files(inst(a))

    def fails_with(fragment):
        wait_for(lambda: fragment in (disc(m)["mechanisms"][0]["last_error"] or ""), 10, fragment)
        assert discovered(m) == [("api", inst(a))]  # the last good set stays

    write_groups(sd, [{"targets": [f"127.0.0.1:{i}" for i in range(1, 10)], "labels": {"job": "x"}}])
    fails_with("more than max_targets (3) targets")
    sd.write_text("[" * 5000 + "]" * 5000)
    fails_with("not JSON")
    write_groups(sd, [{"targets": [addr(a)], "labels": {"job": "x" * 5000}}])
    fails_with('label "job"')
    write_groups(sd, {"targets": [addr(a)]})
    fails_with("must be a JSON array of target groups")
    write_groups(sd, [{"targets": [addr(a)], "labels": {"bad-name": "x"}}])
    fails_with('label "bad-name"')
    os.remove(sd)
    os.mkdir(sd)  # a directory where the file was
    fails_with("not a regular file")
    os.rmdir(sd)
    os.symlink("/dev/zero", sd)
    fails_with("not a regular file")
    os.remove(sd)
    fails_with("No such file or directory")
