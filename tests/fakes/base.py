"""An HTTP server on 127.0.0.1 in a thread, for the fake upstream APIs."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    fake = None  # set by FakeServer

    def log_message(self, *a):
        pass

    def reply(self, code, body, ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeServer:
    handler = Handler

    def __init__(self, tls=None):
        """tls: an ssl.SSLContext to serve https with."""
        self.mode, self.calls = "ok", []
        h = type("H", (self.handler,), {"fake": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), h)
        if tls:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
