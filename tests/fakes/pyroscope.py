"""A fake Grafana Pyroscope querier speaking Connect unary with
application/proto, as api/querier/v1/querier.proto defines (the field
numbers are checked against what profilefs sends)."""
import base64
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fakes import wire

PATH = "/querier.v1.QuerierService/"
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds"
HEAP = "memory:inuse_space:bytes:space:bytes"
TYPES = [(CPU, "process_cpu", "cpu", "nanoseconds", "cpu", "nanoseconds"),
         (HEAP, "memory", "inuse_space", "bytes", "space", "bytes")]


def value_for(service, type_id, start_ms):
    return (1000 + (start_ms // 3_600_000) % 7 * 100 + len(service) + sum(service.encode()) % 89 * 3
            + (5 if type_id == HEAP else 0) + sum(type_id.encode()) % 7 * 1000)


class Fake:
    """services: label values; empty: {(service, type)} with no data;
    mode: "ok", "unauth", "slow", "garbage", "notfound".
    Pyroscope OSS checks no Authorization and, single-tenant (tenant=None),
    ignores X-Scope-OrgID: a token or basic pair stands for a proxy in front
    of it, a tenant for multitenancy_enabled."""

    def __init__(self, services, tenant=None, token=None, window_ms=3_600_000, basic=None):
        self.services, self.tenant, self.token, self.window_ms = services, tenant, token, window_ms
        self.types = list(TYPES)
        self.basic = basic  # (user, password) instead of a bearer token
        self.empty, self.mode, self.calls = set(), "ok", []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def _handler(fake):
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def reply(self, code, body, ctype="application/proto"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def error(self, code, connect_code, msg):
                self.reply(code, json.dumps({"code": connect_code, "message": msg}).encode(),
                           "application/json")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                method = self.path[len(PATH):] if self.path.startswith(PATH) else None
                fake.calls.append((method, self.headers, body))
                if fake.mode == "slow":
                    time.sleep(30)
                want = f"Bearer {fake.token}" if fake.token else None
                if fake.basic:
                    want = "Basic " + base64.b64encode(":".join(fake.basic).encode()).decode()
                if fake.mode == "unauth" or (want and self.headers.get("Authorization") != want):
                    return self.error(401, "unauthenticated", "invalid token")
                if fake.mode == "notfound" or method not in ("ProfileTypes", "LabelValues",
                                                             "SelectMergeProfile"):
                    # no handler: the mux's plain Go 404, not a Connect error
                    return self.reply(404, b"404 page not found\n", "text/plain; charset=utf-8")
                if self.headers.get("Content-Type") not in ("application/proto",
                                                            "application/json"):
                    # connect-go: 415, no body, the codecs it takes in Accept-Post
                    self.send_response(415)
                    self.send_header("Accept-Post", "application/json, application/proto")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.headers.get("Content-Type") == "application/json":
                    return self.error(501, "unimplemented", "the fake speaks application/proto")
                if fake.tenant and self.headers.get("X-Scope-OrgID") != fake.tenant:
                    return self.error(401, "unauthenticated", "no org id")
                if fake.mode == "garbage" and method == "SelectMergeProfile":
                    return self.reply(200, b"\xff\xfe not a protobuf")
                return getattr(self, method)(wire.decode(body))

            def ProfileTypes(self, f):
                assert f[1][0] > 0 and f[2][0] > f[1][0]  # start, end in ms
                out = b""
                for tid, name, st, su, pt, pu in fake.types:
                    out += wire.field_bytes(1, wire.field_bytes(1, tid) + wire.field_bytes(2, name) +
                                            wire.field_bytes(4, st) + wire.field_bytes(5, su) +
                                            wire.field_bytes(6, pt) + wire.field_bytes(7, pu))
                self.reply(200, out)

            def LabelValues(self, f):
                if f[1][0] != b"service_name" or not f.get(3) or not f.get(4):
                    return self.error(400, "invalid_argument", "bad LabelValuesRequest")
                self.reply(200, b"".join(wire.field_bytes(1, s) for s in fake.services))

            def SelectMergeProfile(self, f):
                tid, sel = f[1][0].decode(), f[2][0].decode()
                start, end = f[3][0], f[4][0]
                m = re.fullmatch(r'\{service_name="((?:[^"\\]|\\.)*)"\}', sel)
                if not m or end - start != fake.window_ms or start % fake.window_ms:
                    return self.error(400, "invalid_argument", f"bad request {sel} {start} {end}")
                svc = re.sub(r"\\(.)", r"\1", m.group(1))
                t = next((t for t in fake.types if t[0] == tid), None)
                if svc not in fake.services or t is None or (svc, tid) in fake.empty:
                    return self.reply(200, b"")  # an empty google.v1.Profile
                v = value_for(svc, tid, start)
                prof = wire.profile([(t[2], t[3])],
                                    [([f"main.work_{len(svc)}", "main.main"], [v]),
                                     (["runtime.gcBgMarkWorker"], [v // 10])],
                                    period_type=(t[4], t[5]), period=10_000_000,
                                    time_nanos=start * 1_000_000,
                                    duration_nanos=(end - start) * 1_000_000)
                self.reply(200, prof)
        return H
