"""README's commands, run as written: the lines of the `sh` blocks of its
Use, Export and PGO sections, with only the mount path, the config, the
target directories and the bucket's endpoint substituted, by the real tools
(coreutils cp and install, tar, rsync, aws, go build -pgo, go tool pprof).
So the docs and what profilefs does cannot drift apart. Each way README
mounts is tried on a fresh mount, and one of them while rounds land."""
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from conftest import (GO121, GOAPP_SRC, PROFILEFS, ROOT, GoApp, go_env, is_mounted, unmount,
                      wait_for)
from fakes.wire import Profile

README = ROOT / "README.md"
# Use's install lines change the machine (meson install into /usr/local,
# systemctl): test_cli.py checks meson install into a DESTDIR instead.
NOT_HERE = ("scripts/build", "systemctl ")


def section(name):
    """The text of README's section `name` (## or ###), to the next heading."""
    text = README.read_text()
    m = re.search(rf"^#+ {re.escape(name)}\n(.*?)(?=^#+ )", text, re.S | re.M)
    assert m, f"README has no section {name}"
    return m.group(1)


def commands(name):
    """The command lines of a section's sh blocks, comments cut."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", section(name), re.S):
        for line in block.splitlines():
            cmd = re.sub(r"\s+#.*$", "", line).strip()
            if cmd and not cmd.startswith(NOT_HERE):
                out.append(cmd)
    return out


class Env:
    """Where the commands run: a mount point, a config, a work directory
    with the sample app as cmd/api, a bucket."""
    def __init__(self, tmp, app, swift):
        self.tmp, self.swift = tmp, swift
        self.mnt = tmp / "mnt-prof"
        self.mnt.mkdir()
        self.cfg = tmp / "profilefs.json"
        self.app = app
        self.n = 0

    def config(self, **top):
        import json
        self.n += 1
        cfg = {"cpu_seconds": 1, "timeout": 5, "cache_dir": str(self.tmp / f"cache{self.n}"),
               "clusters": {"prod": {"services": {"api": {"targets": [self.app.base]}}}}}
        cfg.update(top)
        self.cfg.write_text(json.dumps(cfg))
        self.cfg.chmod(0o600)

    def workdir(self):
        d = self.tmp / f"work{self.n}"
        (d / "cmd/api").mkdir(parents=True)
        shutil.copy(GOAPP_SRC, d / "cmd/api/main.go")
        return d

    def sub(self, cmd):
        """The command with this test's paths for README's."""
        cmd = re.sub(r"^profilefs ", f"{PROFILEFS} ", cmd)
        cmd = cmd.replace("-c ...", f"-c {self.cfg}")
        cmd = cmd.replace("/etc/profilefs.json", str(self.cfg))
        cmd = re.sub(r"(-c )profilefs\.json", rf"\g<1>{self.cfg}", cmd)
        cmd = cmd.replace("/var/log/profilefs.log", str(self.tmp / "profilefs.log"))
        cmd = cmd.replace("/mnt/prof", str(self.mnt))
        cmd = cmd.replace("/srv/profiles/", "./srv-profiles/")
        cmd = re.sub(r"^aws ", f"aws --endpoint-url {self.swift.url} ", cmd)
        return cmd

    def run(self, cmd, cwd, check=True):
        env = go_env()
        env.update(self.swift.env())
        env["PATH"] = f"{GO121.parent}:{env['PATH']}"
        r = subprocess.run(["bash", "-c", self.sub(cmd)], cwd=cwd, env=env, capture_output=True,
                           text=True, timeout=600)
        if check:
            assert r.returncode == 0, f"README: {cmd}\n -> {self.sub(cmd)}\n{r.stdout}{r.stderr}"
        return r


def is_mount(cmd):
    return cmd.startswith("profilefs ") and cmd.rstrip().endswith("/mnt/prof")


@pytest.fixture
def swift(tmp_path):
    for tool in ("swift-proxy-server", "memcached", "aws"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (scripts/install-deps installs it)")
    from swift_s3 import Swift
    s = Swift(tmp_path / "swift")
    wait_for(lambda: s.aws("mb", "s3://profiles").returncode == 0, timeout=30,
             what="the bucket (a fresh Swift may answer 503 at first)")
    yield s
    s.stop()


def check_outputs(work, env):
    """What the commands made is what README says they make."""
    for f in ("cmd/api/default.pgo", "heap.pb.gz", "api-cpu.pprof"):
        assert (work / f).stat().st_size > 0, f
    assert oct((work / "api-cpu.pprof").stat().st_mode & 0o777) == "0o644"
    export = work / "export/api"
    assert sorted(os.listdir(export / "merged/24h")) == sorted(
        [f"{p}.pb.gz" for p in ("heap", "allocs", "goroutine", "block", "mutex",
                                "threadcreate", "cpu")] + ["default.pgo"])
    assert Profile((work / "heap.pb.gz").read_bytes()).total("inuse_space") > 0
    names = subprocess.run(["tar", "-tzf", str(work / "profiles.tar.gz")], capture_output=True,
                           text=True, check=True).stdout.split()
    assert "prod/api/merged/24h/default.pgo" in names
    assert any(re.fullmatch(r"prod/api/\d{4}-\d\d-\d\dT[\d:]+Z/heap\.pb\.gz", n) for n in names)
    assert any(p.name == "cpu.pb.gz" for p in (work / "archive/prod/api").rglob("*"))
    keys = env.swift.aws("ls", "--recursive", "s3://profiles/").stdout
    assert "prod/api/merged/24h/default.pgo" in keys and "/latest/" not in keys


def test_readme_commands_as_written(goapp, swift, tmp_path):
    app = goapp("-alloc-rate", "1")
    env = Env(tmp_path, app, swift)
    use = commands("Use")
    mounts = [c for c in use if is_mount(c)]
    assert len(mounts) == 3 and any("--log-level=warning" in c for c in mounts)
    unmounts = [c for c in use if c.startswith("fusermount3 -u")]
    assert unmounts
    checks = [c for c in use if c.startswith("profilefs --check")]
    lines = [c for c in use if c not in mounts + unmounts + checks]
    export, pgo = commands("Export"), commands("PGO")
    assert any(c.startswith("cp -r ") for c in export)
    assert any(c.startswith("go build -pgo=/mnt/prof/") for c in pgo)

    env.config()
    for c in checks:
        r = env.run(c, tmp_path)
        assert ": OK (1 cluster, 1 service listed" in r.stdout, r.stdout
    stop = threading.Event()
    try:
        for k, mount in enumerate(mounts):
            # the first: a fresh mount, every command once; the others: a
            # round lands every second meanwhile (latest_ttl 1 and a reader)
            env.config(**({} if k == 0 else {"latest_ttl": 1}))
            work = env.workdir()
            fg = " -f " in f" {mount} "
            if fg:
                proc = subprocess.Popen(["bash", "-c", env.sub(mount)], cwd=work,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            else:
                env.run(mount, work)
            wait_for(lambda: is_mounted(env.mnt), what=f"README's mount: {mount}")
            if k:
                stop.clear()
                latest = env.mnt / "prod/api/latest/heap.pb.gz"

                def land():
                    while not stop.wait(0.5):
                        subprocess.run(["cat", str(latest)], capture_output=True)
                threading.Thread(target=land, daemon=True).start()
            todo = lines + export + (pgo if k == 0 else
                                     [c for c in pgo if not c.startswith("go ")])
            for c in todo:
                env.run(c, work)
            stop.set()
            check_outputs(work, env)
            if k == 0:
                r = env.run("go version -m api", work)
                assert "-pgo=" in r.stdout
            for c in unmounts:
                env.run(c, work)
            wait_for(lambda: not is_mounted(env.mnt), what="unmount")
            if fg:
                assert proc.wait(timeout=10) == 0
            if "--log-file=" in mount:
                assert (tmp_path / "profilefs.log").exists()
    finally:
        stop.set()
        unmount(env.mnt)
