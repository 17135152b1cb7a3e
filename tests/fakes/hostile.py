"""Hostile pprof targets: GET <base>/<profile> under
  /bomb   a gzip bomb (one gzip member of 1 GiB of zeros, about 1 MB)
  /flood  HTTP 200 without Content-Length and bytes until the client hangs up
  /static the bytes in .static[<profile>] (hand-made profiles; cpu: "profile")
  /trickle HTTP 200 and a gzip header, then one byte every half second, never done
"""
import time
import zlib
from pathlib import Path

from fakes.base import FakeServer, Handler


def gzip_bomb(path: Path, gib=1):
    if not path.exists():
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        zero = bytes(1 << 20)
        with open(path.with_suffix(".tmp"), "wb") as f:
            for _ in range(1024 * gib):
                f.write(c.compress(zero))
            f.write(c.flush())
        path.with_suffix(".tmp").rename(path)
    return path.read_bytes()


class H(Handler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        f = self.fake
        f.calls.append(self.path)
        if self.path.startswith("/bomb/"):
            return self.reply(200, f.bomb, "application/octet-stream")
        if self.path.startswith("/static/"):
            return self.reply(200, f.static[self.path.split("/")[2].split("?")[0]], "application/octet-stream")
        if self.path.startswith("/trickle/"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            try:
                self.wfile.write(b"\x1f\x8b")
                for _ in range(240):
                    self.wfile.flush()
                    time.sleep(0.5)
                    self.wfile.write(b"\x00")
            except OSError:
                pass
            return
        if self.path.startswith("/flood/"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            chunk = b"\x1f\x8b" + bytes(1 << 20)
            try:
                for _ in range(f.flood_mb):
                    self.wfile.write(chunk)
            except OSError:
                pass
            return
        self.reply(404, b"not found\n", "text/plain")


class Hostile(FakeServer):
    handler = H

    def __init__(self, bomb=b"", flood_mb=512):
        self.bomb, self.flood_mb, self.static = bomb, flood_mb, {}
        super().__init__()
