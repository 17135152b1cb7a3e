"""A fake Kubernetes API server: pods, list (paged, with continue) and
watch (ADDED, MODIFIED, DELETED, BOOKMARK; a resourceVersion older than
the kept history gets ERROR 410 Gone), plus the discovery documents kubectl
reads first. It speaks the wire format of kube-apiserver's core/v1 pods;
test_discovery checks it against the real kubectl and the Python client.

    k = FakeKube(); k.add_pod("prod", "api-1", ip="127.0.0.1", ...)
    k.delete_pod("prod", "api-1"); k.compact()  # old watches get 410
"""
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def pod(ns, name, ip="127.0.0.1", port=6060, port_name="pprof", annotations=None, labels=None,
        phase="Running", container="app", rv="1"):
    """A Pod as kube-apiserver returns it (the fields clients read)."""
    return {
        "metadata": {
            "name": name, "namespace": ns, "uid": str(uuid.uuid4()), "resourceVersion": rv,
            "creationTimestamp": "2026-12-06T10:00:00Z", "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "containers": [{
                "name": container, "image": "example/app:1",
                "ports": [{"name": port_name, "containerPort": port, "protocol": "TCP"}]
                if port else [],
                "resources": {}, "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
            }],
            "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "nodeName": "node-1",
            "serviceAccountName": "default", "schedulerName": "default-scheduler",
        },
        "status": {
            "phase": phase, "hostIP": "10.0.0.1",
            **({"podIP": ip, "podIPs": [{"ip": ip}]} if ip and phase == "Running" else {}),
            "startTime": "2026-12-06T10:00:01Z", "qosClass": "BestEffort",
        },
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake = None

    def log_message(self, *a):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.reply(code, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                          "status": "Failure", "message": message, "reason": reason,
                          "code": code})

    def do_GET(self):
        f = self.fake
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        f.requests.append((u.path, q, self.headers.get("Authorization")))
        if f.token and self.headers.get("Authorization") != f"Bearer {f.token}":
            return self.status(401, "Unauthorized", "Unauthorized")
        parts = u.path.strip("/").split("/")
        if u.path == "/api":
            return self.reply(200, {"kind": "APIVersions", "versions": ["v1"],
                                    "serverAddressByClientCIDRs": [
                                        {"clientCIDR": "0.0.0.0/0",
                                         "serverAddress": "127.0.0.1:6443"}]})
        if u.path == "/apis":
            return self.reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if u.path == "/api/v1":
            return self.reply(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
                 "verbs": ["get", "list", "watch"], "shortNames": ["po"],
                 "categories": ["all"]}]})
        if u.path == "/version":
            return self.reply(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0",
                                    "platform": "linux/amd64"})
        ns = None
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "pods":
            ns = parts[3]
        elif parts != ["api", "v1", "pods"]:
            return self.status(404, "NotFound", "the server could not find the requested resource")
        # as Go's strconv.ParseBool (the Python client sends "True")
        if q.get("watch") in ("1", "t", "T", "true", "TRUE", "True"):
            return self.watch(ns, q)
        return self.list(ns, q)

    def list(self, ns, q):
        f = self.fake
        f.lists += 1
        with f.lock:
            if f.fail_lists:
                f.fail_lists -= 1
                return self.status(500, "InternalError", "etcd is down")
            items = [p for (pns, _), p in sorted(f.pods.items()) if ns in (None, pns)]
            rv = str(f.rv)
        limit = int(q.get("limit", 0) or 0)
        start = int(q.get("continue", 0) or 0)
        meta = {"resourceVersion": rv}
        if limit and start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
        page = items[start:start + limit] if limit else items
        self.reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                         "items": [json.loads(json.dumps(p)) for p in page]})

    def chunk(self, obj):
        data = json.dumps(obj).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def watch(self, ns, q):
        f = self.fake
        f.watches += 1
        since = int(q.get("resourceVersion", 0) or 0)
        end = time.monotonic() + min(int(q.get("timeoutSeconds", 1800) or 1800), f.max_watch)
        bookmarks = q.get("allowWatchBookmarks") in ("1", "t", "T", "true", "TRUE", "True")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            with f.lock:
                if since and since < f.oldest:
                    self.chunk({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "reason": "Expired", "code": 410,
                        "message": f"too old resource version: {since} ({f.oldest})"}})
                    self.wfile.write(b"0\r\n\r\n")
                    return
            sent, last_bookmark = since, time.monotonic()
            while time.monotonic() < end and not f.stopping:
                with f.lock:
                    evs = [e for e in f.events if e[0] > sent]
                    if not evs:
                        f.cond.wait(0.2)
                for rv, typ, (pns, obj) in evs:
                    sent = rv
                    if typ == "RAW":  # hostile bytes, as they come
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(obj), obj))
                        self.wfile.flush()
                    elif ns in (None, pns):
                        self.chunk({"type": typ, "object": {"kind": "Pod", "apiVersion": "v1",
                                                            **obj}})
                if bookmarks and time.monotonic() - last_bookmark > f.bookmark_every:
                    last_bookmark = time.monotonic()
                    with f.lock:
                        rv = f.rv
                    self.chunk({"type": "BOOKMARK", "object": {
                        "kind": "Pod", "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(rv)}}})
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


class FakeKube:
    def __init__(self, token=None, tls=None):
        """tls: (certfile, keyfile) to serve https, as a real API server does."""
        self.token = token
        self.pods = {}
        self.events = []  # (rv, type, (ns, object))
        self.rv = 100
        self.oldest = 0   # watches from before this get 410
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.requests, self.lists, self.watches = [], 0, 0
        self.fail_lists = 0
        self.max_watch = 3600
        self.bookmark_every = 2
        self.stopping = False
        h = type("H", (Handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), h)
        self.server.daemon_threads = True
        scheme = "http"
        if tls:
            import ssl
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _event(self, typ, ns, obj):
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, typ, (ns, json.loads(json.dumps(obj)))))
        self.cond.notify_all()

    def add_pod(self, ns, name, **kw):
        with self.lock:
            p = pod(ns, name, **kw)
            typ = "MODIFIED" if (ns, name) in self.pods else "ADDED"
            self.pods[(ns, name)] = p
            self._event(typ, ns, p)
            return p

    def modify_pod(self, ns, name, fn):
        with self.lock:
            p = self.pods[(ns, name)]
            fn(p)
            self._event("MODIFIED", ns, p)

    def delete_pod(self, ns, name):
        with self.lock:
            p = self.pods.pop((ns, name))
            self._event("DELETED", ns, p)

    def inject(self, raw):
        """Send raw bytes (a hostile line) to every watch, as an event."""
        with self.lock:
            self.rv += 1
            self.events.append((self.rv, "RAW", (None, raw)))
            self.cond.notify_all()

    def compact(self):
        """Compact the history: a new watch from an older resourceVersion gets
        410 (watches running go on, as etcd's do)."""
        with self.lock:
            self.oldest = self.rv + 1

    def kubeconfig(self, path):
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "u", "user": {"token": self.token} if self.token else {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}]}))
        return path

    def stop(self):
        self.stopping = True
        with self.lock:
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()
