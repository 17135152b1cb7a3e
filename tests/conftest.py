"""Fixtures: a real Go pprof target, a real profilefs mount, and helpers.

Every mount is unmounted in teardown, even when the test failed.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("PROFILEFS_BUILD", ROOT / "build"))
PROFILEFS = BUILD / "profilefs"
GOAPP_SRC = ROOT / "tests" / "goapp" / "main.go"
GOAPP = BUILD / "goapp"
# scripts/toolchains unpacks the shared Go 1.21.12 and nats-server 2.10.23 here
TOOLCHAINS = Path(os.environ.get("PROFILEFS_TOOLCHAIN_DIR", ROOT / "build" / "toolchains"))
GO121 = TOOLCHAINS / "go" / "bin" / "go"
NATS210 = TOOLCHAINS / "nats-server"
PROFILES = ["heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu"]
# Sanitizer builds (build-asan/) abort on the first report; the report is in
# the daemon's log, which teardown checks.
SANITIZER_ENV = {"ASAN_OPTIONS": "abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1",
                 "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def daemon_env(extra=None):
    env = dict(os.environ)
    env.update(SANITIZER_ENV)
    env.update(extra or {})
    return env


def sanitizer_report(text):
    """The first line of a sanitizer report in text, or None."""
    for line in text.splitlines():
        if any(m in line for m in SANITIZER_MARKS):
            return line
    return None


def go_env():
    # one Go build cache for both suite runs (build/, build-asan/): a PGO
    # build recompiles the standard library for each new profile
    env = dict(os.environ)
    env.update(GO111MODULE="off", GOPROXY="off", GOFLAGS="",
               GOCACHE=str(ROOT / "build" / "gocache"), GOPATH=str(ROOT / "build" / "gopath"))
    return env


def go_build_pgo(go, profile, out, debug=False):
    """`go build -pgo=profile` of the sample app with go (Go >= 1.21); asserts
    it built without a word (with debug, words of -d=pgodebug=1 only) and
    that `go version -m` records the profile. Returns pgodebug's lines."""
    cmd = [str(go), "build", f"-pgo={profile}", "-o", str(out)]
    if debug:
        cmd.append("-gcflags=all=-d=pgodebug=1")
    r = subprocess.run(cmd + [str(GOAPP_SRC)], capture_output=True, text=True, env=go_env(),
                       cwd=GOAPP_SRC.parent, timeout=300)
    assert r.returncode == 0, f"go build -pgo={profile}: {r.stderr}"
    words = [l for l in (r.stdout + r.stderr).splitlines() if not l.startswith("# ")]
    assert all(l.startswith("hot-") for l in words) if debug else not words, words[:5]
    v = subprocess.run([str(go), "version", "-m", str(out)], capture_output=True, text=True,
                       env=go_env(), check=True).stdout
    assert f"build\t-pgo={profile}" in v, v
    return words


@pytest.fixture(scope="session")
def profilefs_bin():
    assert PROFILEFS.exists(), f"{PROFILEFS} missing: run scripts/build first"
    return PROFILEFS


def need_toolchain(path):
    if not path.exists():
        pytest.skip(f"{path} missing: scripts/toolchains found no shared toolchains "
                    "(set PROFILEFS_TOOLCHAINS to the directory with their tarballs)")
    return path


@pytest.fixture(scope="session")
def go121():
    """The shared Go 1.21.12 (go build -pgo); skipped without it."""
    return need_toolchain(GO121)


@pytest.fixture(scope="session")
def goapp_bin():
    """The sample app, built with Go 1.21.12 when it is there (as scripts/build does)."""
    go = str(GO121) if GO121.exists() else "go"
    if not GOAPP.exists() or GOAPP.stat().st_mtime < GOAPP_SRC.stat().st_mtime:
        subprocess.run([go, "build", "-o", str(GOAPP), str(GOAPP_SRC)],
                       check=True, env=go_env(), cwd=GOAPP_SRC.parent)
    return GOAPP


class NatsServer:
    """A real nats-server: the system account SYS (user sys) and an account
    APP (user app), optionally routed to others in a cluster."""
    def __init__(self, binary, tmp, name, cluster_port=None, routes=(), prof=False):
        self.name, self.port = name, free_port()
        self.prof = free_port() if prof else None
        conf = tmp / f"{name}.conf"
        text = f"""server_name: "{name}"
listen: "127.0.0.1:{self.port}"
accounts: {{
  SYS: {{ users: [ {{ user: sys, password: "sys-s3cret" }} ] }}
  APP: {{ users: [ {{ user: app, password: "app-pass" }} ] }}
}}
system_account: SYS
"""
        if self.prof:
            text += f"prof_port: {self.prof}\n"
        if cluster_port:
            text += (f'cluster {{ name: "c1", listen: "127.0.0.1:{cluster_port}", routes: ['
                     + ", ".join(f'"nats-route://127.0.0.1:{r}"' for r in routes) + "] }\n")
        conf.write_text(text)
        self.log_path = tmp / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(binary), "-c", str(conf)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: self._info() is not None, what=f"nats-server {name}")
        self.id = self._info()["server_id"]

    def _info(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                line = s.makefile("rb").readline()
            if self.prof:
                socket.create_connection(("127.0.0.1", self.prof), timeout=0.5).close()
            return json.loads(line.split(b" ", 1)[1])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def nats_servers(tmp_path):
    """Factory: nats_servers(n, binary=None, prof=False) -> [NatsServer];
    n > 1 are routed into one cluster. Default binary: the real 2.10.23."""
    started = []

    def start(n=1, binary=None, prof=False):
        binary = binary or need_toolchain(NATS210)
        routes = [free_port() for _ in range(n)] if n > 1 else []
        out = [NatsServer(binary, tmp_path, f"nats-{chr(ord('a') + len(started) + i)}",
                          routes[i] if routes else None, routes, prof) for i in range(n)]
        started.extend(out)
        return out

    yield start
    for s in started:
        s.stop()


def read_in_thread(path):
    """Start reading path in a thread (a slow or hostile target's file):
    (thread, result); result gets "errno" (None if the read worked) and
    "took" (seconds) when it ends."""
    import threading
    result = {}

    def read():
        t0 = time.monotonic()
        try:
            Path(path).read_bytes()
            result["errno"] = None
        except OSError as e:
            result["errno"] = e.errno
        result["took"] = time.monotonic() - t0
    th = threading.Thread(target=read)
    th.start()
    return th, result


def wait_for(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class GoApp:
    def __init__(self, binary, tmp, *args):
        self.port_file = tmp / f"goapp-{time.monotonic_ns()}.port"
        self.log = open(tmp / f"{self.port_file.name}.log", "w")
        self.proc = subprocess.Popen([str(binary), "-port-file", str(self.port_file), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.port_file.exists, what="goapp port file")
        self.port = int(self.port_file.read_text())
        self.base = f"http://127.0.0.1:{self.port}/debug/pprof"

    def fault(self, mode):
        return f"http://127.0.0.1:{self.port}/fault/{mode}/debug/pprof"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def goapp(goapp_bin, tmp_path):
    """Factory: goapp(*flags) starts a Go pprof target, killed at teardown."""
    apps = []

    def start(*args):
        app = GoApp(goapp_bin, tmp_path, *args)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def unmount(path):
    if is_mounted(path):
        r = subprocess.run(["fusermount3", "-u", str(path)], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-uz", str(path)], capture_output=True)


class Mount:
    def __init__(self, binary, tmp, config, extra_args=(), name="mnt", env=None):
        self.tmp = tmp
        self.path = tmp / name
        self.path.mkdir(exist_ok=True)
        self.config_path = tmp / f"{name}.json"
        config.setdefault("cache_dir", str(tmp / f"{name}-cache"))
        self.cache = Path(config["cache_dir"])
        self.config_path.write_text(json.dumps(config, indent=1))
        self.config_path.chmod(0o600)
        self.log_path = tmp / f"{name}.log"
        self.binary = binary
        self.extra_args = list(extra_args)
        self.env = daemon_env(env)
        self.proc = None
        self.start()

    def start(self):
        self.logf = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [str(self.binary), "-f", "-c", str(self.config_path), *self.extra_args, str(self.path)],
            stdout=self.logf, stderr=subprocess.STDOUT, env=self.env)
        wait_for(lambda: is_mounted(self.path) or self.proc.poll() is not None, what="mount")
        assert self.proc.poll() is None, f"profilefs exited: {self.log()}"

    def stop(self):
        unmount(self.path)
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()

    def restart(self):
        self.stop()
        self.start()

    def log(self):
        return self.log_path.read_text()

    def error_lines(self):
        return [l for l in self.log().splitlines() if ": error: " in l]

    def cached_files(self):
        return sorted(str(p.relative_to(self.cache)) for p in self.cache.rglob("*")
                      if p.is_file() and ".tmp" not in p.parts and p.name != ".lock")


@pytest.fixture
def mount(profilefs_bin, tmp_path):
    """Factory: mount(config_dict, extra_args=(), name="mnt") -> Mount."""
    mounts = []

    def make(config, extra_args=(), name="mnt", env=None):
        m = Mount(profilefs_bin, tmp_path, config, extra_args, name, env)
        mounts.append(m)
        return m

    yield make
    reports = []
    for m in mounts:
        m.stop()
        rep = sanitizer_report(m.log())
        if rep:
            reports.append(f"{m.path}: {rep}")
    assert not reports, f"sanitizer report in the daemon log: {reports}"


def config_for(services, **top):
    """A config with one cluster "local"; services maps name -> targets."""
    cfg = {"cpu_seconds": 1, "timeout": 5, "retry_after": 0}
    cfg.update(top)
    cfg["clusters"] = {"local": {"services": {
        name: (t if isinstance(t, dict) else {"targets": t}) for name, t in services.items()}}}
    return cfg


def pprof_top(path, *flags):
    """`go tool pprof -top [flags] FILE`; asserts it accepted the file."""
    r = subprocess.run(["go", "tool", "pprof", "-top", *flags, str(path)], capture_output=True,
                       text=True, env=go_env(), timeout=60)
    assert r.returncode == 0, f"go tool pprof rejected {path}: {r.stderr}"
    return r.stdout


def pprof_top_nodes(path, *flags):
    """`go tool pprof -top`'s table of nodes (from "Showing nodes" on): what
    a profile holds, without its header (comments, time, duration)."""
    top = pprof_top(path, *flags)
    return top[top.index("Showing nodes"):]


def assert_fetch_fails(m, path, *fragments):
    """Reading path fails with EIO, the log has exactly one error line and
    it names every fragment, and nothing reached the cache."""
    import errno
    with pytest.raises(OSError) as e:
        (m.path / path).read_bytes()
    assert e.value.errno == errno.EIO, e.value
    errs = m.error_lines()
    assert len(errs) == 1, errs
    for frag in fragments:
        assert frag in errs[0], (frag, errs[0])
    assert m.cached_files() == []
    return errs[0]


SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")


def stable_name(s):
    """The path component profilefs shows an upstream name as (names.c)."""
    if SAFE_NAME.fullmatch(s) and not s.startswith("."):
        return s
    h = 1469598103934665603
    for b in s.encode():
        h = ((h ^ b) * 1099511628211) & (2 ** 64 - 1)
    base = "".join(chr(b) if re.fullmatch(rb"[A-Za-z0-9._-]", bytes([b])) else "_"
                   for b in s.encode())[:180] or "_"
    if base.startswith("."):
        base = "_" + base[1:]
    return f"{base}~{(h ^ (h >> 40)) & 0xffffffffff:010x}"


def windows(n, size=3600):
    """Names of the n newest complete windows, oldest first."""
    newest = int(time.time()) // size * size - size
    return [time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(newest - k * size))
            for k in range(n - 1, -1, -1)]
