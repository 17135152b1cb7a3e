"""A real OpenStack Swift cluster with its S3 layer (s3api, tempauth, one
replica) on 127.0.0.1, from Debian's packages, in a directory of its own:
the S3 server the S3 tier is tested against, since it checks signatures
(npm's s3rver accepts any). Its S3 credentials: access key "test:tester"
(a ':' in the key, as tempauth names users), secret "testing".

    s = Swift(tmp_path / "swift"); ...; s.stop()
"""
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import free_port

SERVERS = ("account", "container", "object")


class Swift:
    ACCESS, SECRET, REGION = "test:tester", "testing", "us-east-1"

    def __init__(self, root):
        self.root = Path(root)
        self.etc, self.node = self.root / "etc", self.root / "node"
        (self.node / "sdb1").mkdir(parents=True, exist_ok=True)
        self.etc.mkdir(parents=True, exist_ok=True)
        self.ports = {s: free_port() for s in SERVERS + ("proxy", "memcached")}
        (self.etc / "swift.conf").write_text(
            "[swift-hash]\nswift_hash_path_suffix = pfs\nswift_hash_path_prefix = pfs\n"
            "[storage-policy:0]\nname = gold\ndefault = yes\n")
        common = (f"[DEFAULT]\ndevices = {self.node}\nmount_check = false\n"
                  f"bind_ip = 127.0.0.1\nworkers = 0\nuser = root\nswift_dir = {self.etc}\n"
                  "log_level = INFO\n")
        for s in SERVERS:
            b = str(self.etc / f"{s}.builder")
            for args in (["create", "6", "1", "1"],
                         ["add", f"r1z1-127.0.0.1:{self.ports[s]}/sdb1", "100"], ["rebalance"]):
                subprocess.run(["swift-ring-builder", b, *args], check=True, capture_output=True)
            (self.etc / f"{s}-server.conf").write_text(
                common + f"bind_port = {self.ports[s]}\n[pipeline:main]\npipeline = {s}-server\n"
                f"[app:{s}-server]\nuse = egg:swift#{s}\n")
        filters = ["catch_errors", "gatekeeper", "healthcheck", "proxy-logging", "cache",
                   "listing_formats", "bulk", "slo", "dlo", "s3api", "tempauth", "copy",
                   "versioned_writes"]
        conf = (common + f"bind_port = {self.ports['proxy']}\n[pipeline:main]\npipeline = "
                f"{' '.join(filters)} proxy-logging proxy-server\n"
                "[app:proxy-server]\nuse = egg:swift#proxy\naccount_autocreate = true\n")
        for f in filters:
            conf += f"[filter:{f}]\nuse = egg:swift#{f.replace('-', '_').replace('cache', 'memcache')}\n"
        # tempauth keeps its tokens in memcached: s3api's requests need it too
        conf = conf.replace("use = egg:swift#memcache\n",
                            f"use = egg:swift#memcache\nmemcache_servers = "
                            f"127.0.0.1:{self.ports['memcached']}\n")
        conf = conf.replace("use = egg:swift#s3api\n",
                            f"use = egg:swift#s3api\nlocation = {self.REGION}\n")
        conf = conf.replace("use = egg:swift#tempauth\n",
                            f"use = egg:swift#tempauth\nuser_test_tester = {self.SECRET} .admin\n")
        (self.etc / "proxy-server.conf").write_text(conf)
        self.log = open(self.root / "swift.log", "a")
        self.procs = [subprocess.Popen(["memcached", "-u", "root", "-l", "127.0.0.1", "-p",
                                        str(self.ports["memcached"]), "-U", "0", "-m", "16"],
                                       stdout=self.log, stderr=subprocess.STDOUT)]
        for s in SERVERS + ("proxy",):  # -v: log to the console (no syslog here)
            self.procs.append(subprocess.Popen(
                [f"swift-{s}-server", str(self.etc / f"{s}-server.conf"), "-v"],
                stdout=self.log, stderr=subprocess.STDOUT))
        self.url = f"http://127.0.0.1:{self.ports['proxy']}"
        end = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(self.url + "/healthcheck", timeout=1).read() == b"OK":
                    break
            except OSError:
                pass
            if time.monotonic() > end:
                self.stop()
                raise AssertionError("swift did not start: " +
                                     (self.root / "swift.log").read_text()[-2000:])
            time.sleep(0.2)

    def env(self, **over):
        """The environment the aws command line reads its credentials from."""
        import os
        env = dict(os.environ, AWS_ACCESS_KEY_ID=self.ACCESS, AWS_SECRET_ACCESS_KEY=self.SECRET,
                   AWS_DEFAULT_REGION=self.REGION, AWS_EC2_METADATA_DISABLED="true")
        env.update(over)
        return env

    def aws(self, *args, **over):
        return subprocess.run(["aws", "--endpoint-url", self.url, "s3", *args],
                              env=self.env(**over), capture_output=True, text=True, timeout=120)

    def put_tar(self, bucket, files):
        """Objects put at once through Swift's own API (bulk extract-archive,
        one request): files maps key -> bytes."""
        import io
        import json
        import tarfile
        req = urllib.request.Request(self.url + "/auth/v1.0", headers={
            "X-Auth-User": self.ACCESS, "X-Auth-Key": self.SECRET})
        with urllib.request.urlopen(req, timeout=10) as r:
            storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for key, data in files.items():
                info = tarfile.TarInfo(key)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        req = urllib.request.Request(f"{storage}/{bucket}?extract-archive=tar",
                                     data=buf.getvalue(), method="PUT",
                                     headers={"X-Auth-Token": token, "Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        assert out["Number Files Created"] == len(files), out

    def s3_requests(self):
        """S3 requests the proxy answered so far (its log; Swift's own
        subrequests and health checks left out)."""
        n = 0
        for line in (self.root / "swift.log").read_text(errors="replace").splitlines():
            f = line.split()
            if line.startswith("proxy-server: ") and len(f) > 6 and \
                    not f[5].startswith(("/v1/", "/auth", "/healthcheck")):
                n += 1
        return n

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log.close()
