"""pprof targets over https with a private CA, as fleets serve them:
ca_file, cert_file/key_file (mTLS) and insecure_skip_verify at every level
targets take settings; an untrusted certificate is EIO with the TLS reason
in one line."""
import json
import os
import ssl
import subprocess
import urllib.request

import pytest

from conftest import config_for
from fakes.base import FakeServer, Handler


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path):
    """A private CA, a server certificate for 127.0.0.1 and a client
    certificate, both signed by it; and a stranger's self-signed one."""
    d = tmp_path / "pki"
    d.mkdir()
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", "ca.key",
            "-out", "ca.pem", "-subj", "/CN=profilefs test CA", cwd=d)
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
                cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout",
            "other.key", "-out", "other.pem", "-subj", "/CN=someone else", cwd=d)
    for f in ("ca.key", "server.key", "client.key", "other.key"):
        os.chmod(d / f, 0o600)
    return d


class Https(FakeServer):
    """An https pprof target: the bytes of a real Go heap profile for any
    path; with client_ca, a client certificate it signed is required."""
    class handler(Handler):
        def do_GET(self):
            self.fake.calls.append(self.path)
            self.reply(200, self.fake.body, "application/octet-stream")

    def __init__(self, pki, body, client_ca=False):
        self.body = body
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
        if client_ca:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(pki / "ca.pem")
        super().__init__(tls=ctx)
        self.url += "/debug/pprof"


def heap_of(goapp):
    app = goapp()
    with urllib.request.urlopen(f"{app.base}/heap", timeout=10) as r:
        return r.read()


def test_private_ca_mtls_and_insecure_at_every_level(goapp, mount, pki, tmp_path):
    body = heap_of(goapp)
    plain, mtls = Https(pki, body), Https(pki, body, client_ca=True)
    try:
        cfg = config_for({
            # cluster level: the CA; a service that inherits it
            "ca": {"targets": [plain.url], "profiles": ["heap"]},
            # service level: a client certificate (the CA from the cluster)
            "mtls": {"targets": [mtls.url], "profiles": ["heap"],
                     "cert_file": str(pki / "client.pem"), "key_file": str(pki / "client.key")},
            # target level: no client certificate where one is required
            "nocert": {"targets": [{"url": mtls.url}], "profiles": ["heap"]},
            # target level: a CA that did not sign the server's certificate
            "wrongca": {"targets": [{"url": plain.url, "ca_file": str(pki / "other.pem")}],
                        "profiles": ["heap"]},
            # service level: no check at all
            "insecure": {"targets": [plain.url], "profiles": ["heap"],
                         "ca_file": str(pki / "other.pem"), "insecure_skip_verify": True},
        }, retry_after=60)
        cfg["clusters"]["local"]["ca_file"] = str(pki / "ca.pem")
        m = mount(cfg)
        warn = [l for l in m.log().splitlines() if "insecure_skip_verify" in l]
        assert len(warn) == 1 and "not checked" in warn[0], m.log()
        for svc in ("ca", "mtls", "insecure"):
            assert (m.path / f"local/{svc}/latest/heap.pb.gz").read_bytes() == body, svc
        for svc in ("nocert", "wrongca"):
            with pytest.raises(OSError) as e:
                (m.path / f"local/{svc}/latest/heap.pb.gz").read_bytes()
            assert e.value.errno == 5
        errs = m.error_lines()
        assert len(errs) == 2, errs
        wrong = next(e for e in errs if "local/wrongca" in e)
        assert "SSL certificate problem" in wrong, wrong
        nocert = next(e for e in errs if "local/nocert" in e)
        # the server's refusal reaches curl as a TLS alert, or (TLS 1.3: the
        # client's handshake is done before the server checks it) as the
        # connection it closed
        assert any(w in nocert for w in ("SSL", "alert", "TLS", "errno 107", "reset",
                                         "Recv failure", "closed")), nocert
        st = json.loads((m.path / ".status.json").read_text())
        assert all(t["failures"] == (t["service"] in ("nocert", "wrongca")) for t in st["targets"])
    finally:
        plain.stop()
        mtls.stop()


def test_untrusted_certificate_without_ca_file(goapp, mount, pki):
    """No ca_file: the system's CAs do not know the private one."""
    body = heap_of(goapp)
    h = Https(pki, body)
    try:
        m = mount(config_for({"a": {"targets": [h.url], "profiles": ["heap"]}}, retry_after=60))
        with pytest.raises(OSError) as e:
            (m.path / "local/a/latest/heap.pb.gz").read_bytes()
        assert e.value.errno == 5
        errs = m.error_lines()
        assert len(errs) == 1 and "SSL certificate problem" in errs[0] and h.url in errs[0], errs
    finally:
        h.stop()


@pytest.mark.parametrize("cfg,msg", [
    ({"cert_file": "CERT"}, "key_file: is required with cert_file"),
    ({"ca_file": "/nonexistent/ca.pem"}, "ca_file: /nonexistent/ca.pem: No such file"),
    ({"insecure_skip_verify": "yes"}, "insecure_skip_verify: must be true or false"),
])
def test_tls_settings_are_checked(pki, tmp_path, cfg, msg):
    from conftest import PROFILEFS
    cfg = {k: (str(pki / "client.pem") if v == "CERT" else v) for k, v in cfg.items()}
    c = config_for({"a": dict(cfg, targets=["https://127.0.0.1:1/debug/pprof"])},
                   cache_dir=str(tmp_path / "c"))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(c))
    path.chmod(0o600)
    r = subprocess.run([str(PROFILEFS), "--check", "-c", str(path)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
