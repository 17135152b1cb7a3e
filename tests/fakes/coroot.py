"""A fake Coroot: session-cookie login, the applications overview and the
profiling view, with the JSON shapes of coroot's api/views (flame graph
nodes {name,total,self,comp,children,color_by,data}).

As coroot does: the login body must be JSON with email and password (else
400, empty), wrong ones are 404 "Invalid email or password."; a request
without the session is 401 with an empty body; a project is named by its
8-character id in URLs (GET /api/user lists {"id", "name"} of each, as
api.User writes it, not wrapped in "data"); an unknown project is 200
with "data": null; the profiling view's query={"type","from","to"} takes
from/to in unix MILLISECONDS (timeseries.Time divides by 1000), so seconds
there ask about January 1970, where there are no profiles."""
import json
import time
from urllib.parse import parse_qs, unquote, urlparse

from fakes.base import FakeServer, Handler

CPU = "go:profile_cpu:nanoseconds"
HEAP = "go:heap_inuse_space:bytes"


def node(name, self_, children=()):
    children = list(children)
    return {"name": name, "total": self_ + sum(c["total"] for c in children), "self": self_,
            "comp": 0, "children": children, "color_by": "", "data": None}


def deep_flamegraph_json(depth):
    """A chain of depth nodes under "total", as JSON text (too deep for json.dumps)."""
    head = "".join(f'{{"name":"main.f{i}","total":{10_000_000},"self":{10_000_000 if i == depth - 1 else 0},'
                   f'"comp":0,"color_by":"","data":null,"children":[' for i in range(depth))
    return ('{"name":"total","total":10000000,"self":0,"comp":0,"color_by":"","data":null,"children":['
            + head + "]}" * depth + "]}")


def flamegraph(app, type_, frm):
    k = 1 + frm // 3600 % 3
    if type_ == CPU:
        return node("total", 0, [node("runtime.main", 0, [
            node("main.main", 10_000_000 * k, [node("main.handle", 30_000_000 * k),
                                                node("encoding/json.Marshal", 20_000_000)])]),
            node("runtime.gcBgMarkWorker", 10_000_000)])
    return node("total", 0, [node("main.main", 0, [node("main.cache", 4096 * k)])])


class H(Handler):
    def do_POST(self):
        f = self.fake
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        f.calls.append(("POST", self.path, self.headers))
        if self.path != "/api/login":
            return self.reply(404, b"404 page not found\n", "text/plain")
        try:
            body = json.loads(raw)
            ok = isinstance(body, dict) and all(isinstance(body.get(k), str) and body[k]
                                                for k in ("email", "password"))
        except ValueError:
            ok = False
        if not ok:  # forms.ReadAndValidate failed
            return self.reply(400, b"\n", "text/plain")
        if (body["email"], body["password"]) != (f.email, f.password):
            return self.reply(404, b"Invalid email or password.\n", "text/plain")
        self.send_response(200)
        self.send_header("Set-Cookie", f"coroot_session={f.session}; Path=/; HttpOnly")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        f = self.fake
        u = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(u.query).items()}
        f.calls.append(("GET", self.path, self.headers))
        if f.mode == "slow":
            time.sleep(30)
        if f"coroot_session={f.session}" not in self.headers.get("Cookie", "") or f.mode == "expired":
            return self.reply(401, b"\n", "text/plain")
        ctx = {"status": {"status": "ok"}, "search": {}}
        if u.path == "/api/user":
            projects = sorted(({"id": i, "name": n} for i, n in f.projects.items()),
                              key=lambda p: p["name"])
            return self.reply(200, {"name": "Admin", "email": f.email, "role": "Admin",
                                    "anonymous": False, "projects": projects or None})
        if u.path.startswith("/api/project/") and not u.path.startswith(f"/api/project/{f.project}/"):
            return self.reply(200, {"context": ctx, "data": None})
        if u.path == f"/api/project/{f.project}/overview/applications":
            apps = [{"id": a, "category": "application", "labels": {}, "status": "ok",
                     "upstreams": [], "downstreams": []} for a in f.apps]
            return self.reply(200, {"context": ctx, "data": {"applications": apps, "nodes": None}})
        prefix = f"/api/project/{f.project}/app/"
        if not (u.path.startswith(prefix) and u.path.endswith("/profiling")):
            return self.reply(404, b"not found\n", "text/plain")
        app = unquote(u.path[len(prefix):-len("/profiling")])
        if app in f.hang:
            time.sleep(10)
        if app not in f.apps or f.mode == "notfound":
            return self.reply(404, b"application not found\n", "text/plain")
        if f.mode == "badjson":
            return self.reply(200, b"<html>oops</html>")
        profiles = [{"type": CPU, "name": "CPU"}, {"type": HEAP, "name": "Memory (inuse_space)"}]
        view = {"status": "ok", "message": "OK", "services": [], "profiles": profiles,
                "profile": {"type": CPU, "flamegraph": None, "diff": False}, "chart": None}
        if "query" in q:
            query = json.loads(q["query"])
            # timeseries.Time: ms -> s; absent: the URL's from (ms too)
            frm = (query.get("from") or int(q.get("from", 0))) // 1000
            view["profile"]["type"] = query["type"]
            if frm < time.time() - 30 * 86400:  # nothing stored then
                view.update(status="unknown", message="No profiles found")
            elif f.mode == "chwarning":
                view.update(status="warning", message="clickhouse error: timeout")
            elif f.depth and query["type"] == CPU:
                view["profile"]["flamegraph"] = "@FG@"
                body = json.dumps({"context": ctx, "data": view}).replace(
                    '"@FG@"', deep_flamegraph_json(f.depth))
                return self.reply(200, body.encode())
            elif (app, query["type"]) not in f.empty:
                view["profile"]["flamegraph"] = flamegraph(app, query["type"], frm)
            else:
                view.update(status="unknown", message="No profiles found")
        self.reply(200, {"context": ctx, "data": view})


class Fake(FakeServer):
    handler = H

    def __init__(self, apps, project="x7k2p9qa", project_name="prod", email="admin@example.com",
                 password="c0r00t-s3cret"):
        self.apps, self.project, self.email, self.password = apps, project, email, password
        # every project the user sees, id -> name; apps live in `project`
        self.projects = {project: project_name, "b3v8n1zt": "staging-eu"}
        self.session, self.empty = "sess-abc123", set()
        self.depth = 0  # > 0: CPU flame graphs are one chain this deep
        self.hang = set()  # apps whose profiling view answers after 10 s
        super().__init__()
