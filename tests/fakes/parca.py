"""A fake Parca speaking its grpc-gateway REST API (/api/profiles/...):
JSON with camelCase names, RFC 3339 times, "pprof" as base64 of gzip."""
import base64
import re
import time
from urllib.parse import parse_qs, unquote, urlparse

from fakes import wire
from fakes.base import FakeServer, Handler

TYPES = [{"name": "process_cpu", "sampleType": "cpu", "sampleUnit": "nanoseconds",
          "periodType": "cpu", "periodUnit": "nanoseconds", "delta": True},
         {"name": "memory", "sampleType": "inuse_space", "sampleUnit": "bytes",
          "periodType": "space", "periodUnit": "bytes", "delta": False}]
CPU = "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta"


def rfc3339(s):
    return int(time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%SZ"))) - time.timezone


class H(Handler):
    def do_GET(self):
        f = self.fake
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        f.calls.append((u.path, q, self.headers))
        if f.mode == "slow":
            time.sleep(30)
        # Parca itself has no auth: a token stands for a proxy in front of it
        if f.mode == "unauth" or (f.token and
                                  self.headers.get("Authorization") != f"Bearer {f.token}"):
            return self.reply(401, {"code": 16, "message": "unauthenticated", "details": []})
        if u.path == "/api/profiles/types":
            rfc3339(q["start"]), rfc3339(q["end"])
            return self.reply(200, {"types": TYPES})
        m = re.fullmatch(r"/api/profiles/labels/([^/]+)/values", u.path)
        if m:
            assert unquote(m.group(1)) == "job"
            rfc3339(q["start"]), rfc3339(q["end"])
            return self.reply(200, {"labelValues": f.services})
        if u.path != "/api/profiles/query" or f.mode == "notfound":
            return self.reply(404, {"code": 5, "message": "Not Found", "details": []})
        if f.mode == "badjson":
            return self.reply(200, b"{not json")
        if f.mode == "nopprof":
            return self.reply(200, {"report": "flamegraph"})
        if f.mode == "badbase64":
            return self.reply(200, {"pprof": "!!not base64!!"})
        if f.mode == "badproto":
            return self.reply(200, {"pprof": base64.b64encode(b"\x1f\x8b" + b"x" * 40).decode()})
        m = re.fullmatch(r'([^{]+)\{job="((?:[^"\\]|\\.)*)"\}', q.get("merge.query", ""))
        start, end = rfc3339(q["merge.start"]), rfc3339(q["merge.end"])
        if (q.get("mode") != "MODE_MERGE" or q.get("reportType") != "REPORT_TYPE_PPROF" or not m
                or end - start != 3600 or start % 3600):
            return self.reply(400, {"code": 3, "message": f"bad query {q}", "details": []})
        tid, svc = m.group(1), re.sub(r"\\(.)", r"\1", m.group(2))
        t = next((t for t in TYPES if tid.startswith(f"{t['name']}:{t['sampleType']}:")), None)
        if t is None or svc not in f.services:
            samples = []
        else:
            v = 2000 + start // 3600 % 5 * 10 + len(svc)
            samples = [([f"main.parca_{len(svc)}", "main.main"], [v])]
        prof = wire.profile([(t["sampleType"], t["sampleUnit"])] if t else [("x", "y")], samples,
                            period_type=(t["periodType"], t["periodUnit"]) if t else None,
                            period=1, time_nanos=start * 10**9, duration_nanos=3600 * 10**9)
        self.reply(200, {"pprof": base64.b64encode(wire.gz(prof)).decode()})


class Fake(FakeServer):
    handler = H

    def __init__(self, services, token=None):
        self.services, self.token = services, token
        super().__init__()
