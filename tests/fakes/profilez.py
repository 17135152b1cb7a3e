"""The PROFILEZ responder that Debian's nats-server (2.9) lacks.

It connects to a real nats-server as a system-account user, subscribes to
$SYS.REQ.SERVER.<that server's id>.PROFILEZ and answers exactly as 2.10+
does (server/monitor.go profilez, server/events.go ServerAPIResponse): the
profile comes from the same server's real -profile HTTP port, as base64 in
data.profile; bad names or durations give data.error. Plain NATS protocol
over a socket, no client library."""
import base64
import json
import socket
import threading
import time
import urllib.request

NAMES = {"goroutine", "threadcreate", "heap", "allocs", "block", "mutex"}


class Responder:
    def __init__(self, port, user, password, prof_port):
        self.prof_port, self.mode = prof_port, "ok"
        self.cpu = True  # False: as before 2.10.19, "cpu" is no profile name
        self.requests = []  # the request JSON of each PROFILEZ asked
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")
        info = json.loads(self.f.readline().split(b" ", 1)[1])
        self.server_id, self.server_name = info["server_id"], info.get("server_name", "")
        self.lock = threading.Lock()
        self._send(b"CONNECT " + json.dumps({"user": user, "pass": password, "verbose": False,
                                             "pedantic": False, "protocol": 1}).encode() + b"\r\n")
        self._send(f"SUB $SYS.REQ.SERVER.{self.server_id}.PROFILEZ 1\r\nPING\r\n".encode())
        line = self.f.readline()
        assert line.startswith(b"PONG"), line
        self.sock.settimeout(None)
        threading.Thread(target=self._loop, daemon=True).start()

    def _send(self, b):
        with self.lock:
            self.sock.sendall(b)

    def _loop(self):
        try:
            while True:
                line = self.f.readline()
                if not line:
                    return
                if line.startswith(b"PING"):
                    self._send(b"PONG\r\n")
                elif line.startswith(b"MSG "):
                    parts = line.split()
                    reply, n = (parts[3], int(parts[4])) if len(parts) == 5 else (None, int(parts[3]))
                    payload = self.f.read(n + 2)[:n]
                    if reply:
                        threading.Thread(target=self._answer, args=(reply.decode(), payload),
                                         daemon=True).start()
        except OSError:
            return

    def _answer(self, reply, payload):
        if self.mode == "silent":
            return
        server = {"name": self.server_name, "host": "127.0.0.1", "id": self.server_id,
                  "ver": "2.10.0", "seq": 1, "jetstream": False,
                  "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        try:
            opts = json.loads(payload)
        except ValueError as e:
            out = {"server": server, "error": {"code": 400, "description": str(e)}}
        else:
            self.requests.append(opts)
            out = {"server": server, "data": self._profilez(opts)}
        if self.mode == "garbage":
            out = {"server": server, "data": {"profile": base64.b64encode(b"junk" * 10).decode()}}
        body = json.dumps(out).encode() if self.mode != "badjson" else b"{\"server\": "
        self._send(f"PUB {reply} {len(body)}\r\n".encode() + body + b"\r\n")

    def _profilez(self, opts):
        name, duration = opts.get("name", ""), opts.get("duration", 0)
        if name == "":
            return {"error": "Profile name not specified"}
        if name == "cpu" and self.cpu:
            if not 0 < duration <= 15 * 10**9:
                return {"error": f"Duration {duration / 1e9:g}s should be between 0s and 15s"}
            path = f"profile?seconds={max(1, duration // 10**9)}"
        elif name in NAMES:
            path = name
        else:
            return {"error": f'Profile "{name}" not found'}
        url = f"http://127.0.0.1:{self.prof_port}/debug/pprof/{path}"
        data = urllib.request.urlopen(url, timeout=30).read()
        return {"profile": base64.b64encode(data).decode()}

    def stop(self):
        self.sock.close()
