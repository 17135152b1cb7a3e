"""Command line: help, version, config errors, fstab-style mounting."""
import json
import re
import os
import shutil
import subprocess

import pytest

from conftest import PROFILEFS, config_for, is_mounted, unmount, wait_for


def run(*args, **kw):
    return subprocess.run([str(PROFILEFS), *args], capture_output=True, text=True, timeout=30, **kw)


def test_help_and_version(profilefs_bin):
    r = run("--help")
    assert r.returncode == 0
    assert "usage: profilefs" in r.stdout and "-c, --config=FILE" in r.stdout
    assert "-o allow_other" in r.stdout  # FUSE's own options follow
    # our options come first, then FUSE's
    assert r.stdout.index("--check") < r.stdout.index("-o allow_other")
    for flag in ("--version", "-V"):
        r = run(flag)
        assert r.returncode == 0
        lines = r.stdout.splitlines()  # one component a line
        assert lines[0] == "profilefs 0.1.0" and lines[1].startswith("libfuse 3.")
        names = [l.split()[0] for l in lines[1:]]
        assert names == ["libfuse", "libcurl", "zlib", "jansson", "protobuf-c", "libnats"]


@pytest.mark.parametrize("opt", ["--bogus", "-x", "--config-file=a.json"])
def test_unknown_option_is_a_usage_error_naming_it(profilefs_bin, tmp_path, opt):
    r = run(opt, "-c", str(tmp_path / "c.json"), str(tmp_path))
    assert r.returncode == 2
    assert r.stderr == f"profilefs: error: unknown option {opt} (see --help)\n"


def test_check_mode(profilefs_bin, tmp_path, monkeypatch):
    """Like promtool check config: validate, resolve *_env secrets, print OK or
    the error, exit 0 or 2, mount nothing."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(config_for({"a": ["http://127.0.0.1:1/debug/pprof"]},
                                          bearer_token_env="PFS_T", cache_dir=str(tmp_path / "c"))))
    good.chmod(0o600)
    monkeypatch.setenv("PFS_T", "s3cret-t0ken")
    r = run("--check", "-c", str(good))
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == f"{good}: OK (1 cluster, 1 service listed, cache {tmp_path / 'c'})\n"
    assert not (tmp_path / "c").exists()  # nothing made, nothing mounted
    # config fields as mount options (fstab), over the file's
    r = run("--check", "-c", str(good), "-o", "cache_dir=/srv/pc,latest_ttl=2m,cpu_seconds=5")
    assert r.returncode == 0 and "cache /srv/pc)" in r.stdout, r.stderr
    r = run("--check", "-c", str(good), "-o", "latest_ttl=forever")
    assert r.returncode == 2 and "latest_ttl: must be a duration" in r.stderr
    monkeypatch.delenv("PFS_T")
    r = run("--check", str(good))
    assert r.returncode == 2 and "PFS_T" in r.stderr and "s3cret" not in r.stderr + r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text('{"retenton": "7d", "clusters": {}}')
    r = run("--check", "-c", str(bad))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (f"profilefs: error: config {bad}: retenton: unknown field; "
                                'did you mean "retention"?')
    bad.write_text('{"latest_ttl": "1 minute", "clusters": {}}')
    r = run("--check", "-c", str(bad))
    assert r.returncode == 2 and '"10s", "500ms", "1m", "2h", "1d"' in r.stderr
    r = run("--check", "-c", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip() == (
        f"profilefs: error: config {tmp_path}: is a directory, not a JSON file")


@pytest.mark.parametrize("form", ["--opt=value", "--opt value"])
def test_every_long_option_takes_both_forms(goapp, mount, tmp_path, form):
    """--config, --log-file and --log-level, as getopt_long takes them: README
    writes `--log-file=... --log-level=warning`."""
    app = goapp()
    log = tmp_path / "pfs.log"
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}},
                                         cache_dir=str(tmp_path / "cache"))))
    cfg.chmod(0o600)

    def opt(name, value):
        return [f"{name}={value}"] if form == "--opt=value" else [name, value]
    r = run("--check", *opt("--config", str(cfg)), *opt("--log-level", "warning"))
    assert r.returncode == 0 and r.stdout.endswith("OK (1 cluster, 1 service listed, cache "
                                                   f"{tmp_path / 'cache'})\n"), r.stderr
    r = run("--check", *opt("--config", str(cfg)), *opt("--log-level", "loud"))
    assert r.returncode == 2 and r.stderr == ("profilefs: error: --log-level loud: use error, "
                                              "warning, info or debug\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run(*opt("--log-file", str(log)), *opt("--log-level", "warning"), "-c", str(cfg), str(mnt))
    try:
        assert r.returncode == 0, r.stderr
        wait_for(lambda: is_mounted(mnt), what="mount")
        assert (mnt / "local/a/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    finally:
        unmount(mnt)
    assert log.exists()


def test_log_file_and_level(goapp, mount, tmp_path):
    app = goapp()
    log = tmp_path / "pfs.log"
    dead = "http://127.0.0.1:1/debug/pprof"
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]},
                          "b": {"targets": [dead], "profiles": ["heap"]}}),
              extra_args=["--log-file", str(log), "-o", "log_level=warning,retry_after=60"])
    (m.path / "local/a/latest/heap.pb.gz").read_bytes()
    for _ in range(2):  # retry_after=60 from -o: one fetch, one line
        with pytest.raises(OSError):
            (m.path / "local/b/latest/heap.pb.gz").read_bytes()
    text = log.read_text()
    lines = text.splitlines()
    assert len(lines) == 1, lines  # the error; no info line at level warning
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ profilefs\[\d+\]: error: fetch local/b ",
                    lines[0]), lines[0]
    assert m.log() == ""  # nothing on stderr


@pytest.mark.skipif(os.path.exists("/dev/log"), reason="syslog is there: daemon logs go to it")
def test_daemon_without_syslog_logs_to_the_cache(goapp, profilefs_bin, tmp_path):
    """No /dev/log (a container): a daemon would lose every line; it says so
    before detaching and logs to CACHE_DIR/.profilefs.log."""
    app = goapp()
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}},
                                          cache_dir=str(tmp_path / "cache"))))
    path.chmod(0o600)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = run("-c", str(path), str(mnt))
    try:
        assert r.returncode == 0, r.stderr
        log = tmp_path / "cache/.profilefs.log"
        assert r.stderr == f"profilefs: warning: no syslog (/dev/log): logging to {log}\n"
        wait_for(lambda: is_mounted(mnt), what="mount")
        assert (mnt / "local/app/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
        assert f"info: mounted {path} on {mnt}" in log.read_text()
    finally:
        unmount(mnt)


def test_second_mount_on_a_mountpoint_or_cache_fails_clearly(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}}))
    r = run("-f", "-c", str(m.config_path), str(m.path))
    assert r.returncode == 2
    assert r.stderr == (f"profilefs: error: {m.path} is mounted already ({m.config_path}, type "
                        f"fuse.profilefs): unmount it first (fusermount3 -u {m.path})\n")
    other = tmp_path / "other"
    other.mkdir()
    r = run("-f", "-c", str(m.config_path), str(other))
    assert r.returncode != 0 and not is_mounted(other)
    assert str(m.cache) in r.stderr and "in use" in r.stderr, r.stderr
    assert (m.path / "local/app/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"


def test_no_arguments_is_usage_error(profilefs_bin):
    r = run()
    assert r.returncode == 2 and "no mountpoint" in r.stderr


BAD_CONFIGS = [
    ("{not json", "line 1"),
    ("[]", "(top level): must be a JSON object"),
    ({"clusters": {}}, "clusters: must be a non-empty object"),
    ({"clusters": {"c": {"services": {"s": {"targets": [42]}}}}},
     "clusters.c.services.s.targets[0]: a target must be a URL string"),
    ({"clusters": {"c": {"services": {"s": {"targets": [{"url": "ftp://x"}]}}}}},
     "clusters.c.services.s.targets[0].url: must be an http:// or https:// URL"),
    ({"clusters": {"c": {"services": {"s": {"targets": ["http://x"], "profiels": []}}}}},
     "clusters.c.services.s.profiels: unknown field"),
    ({"clusters": {"c": {"services": {"s": {"targets": ["http://x"], "profiles": ["trace"]}}}}},
     "clusters.c.services.s.profiles[0]: must be one of"),
    ({"clusters": {"c": {"services": {"..": {"targets": ["http://x"]}}}}},
     "clusters.c.services.\"..\": service name must be"),
    ({"clusters": {"a/b": {"services": {"s": {"targets": ["http://x"]}}}}},
     "clusters.\"a/b\": cluster name must be"),
    ({"clusters": {"c": {"services": {"s": {"targets": [{"url": "http://x", "name": "../up"}]}}}}},
     "clusters.c.services.s.targets[0].name: a target name must be"),
    ({"clusters": {"c": {"services": {"s": {"targets": ["http://x:1", "http://x:1"]}}}}},
     "clusters.c.services.s.targets[1].name: target name \"x_1\" is used twice"),
    ({"timeout": "soon", "clusters": {"c": {"services": {"s": {"targets": ["http://x"]}}}}},
     "timeout: must be a duration"),
    ({"clusters": {"c": {"services": {"s": {"targets": ["http://x"],
                                            "bearer_token_env": "PFS_UNSET_VAR"}}}}},
     "clusters.c.services.s.bearer_token_env: environment variable PFS_UNSET_VAR is not set"),
    ({"clusters": {"c": {"kind": "zipkin", "services": {"s": {"targets": ["http://x"]}}}}},
     "clusters.c.kind: unknown source kind"),
]

# Durations and counts that are not finite or out of range: each would
# overflow a conversion later (long ms, time_t), or make endless listings.
ONE = {"c": {"services": {"s": {"targets": ["http://x"]}}}}
BAD_CONFIGS += [
    ({"timeout": "nan", "clusters": ONE}, "timeout: must be a duration from 1ms to 1h"),
    ({"timeout": "inf", "clusters": ONE}, "timeout: must be a duration from 1ms to 1h"),
    ({"timeout": "-infs", "clusters": ONE}, "timeout: must be a duration"),
    ({"timeout": 1e300, "clusters": ONE}, "timeout: must be a duration from 1ms to 1h"),
    ({"retention": "1e30d", "clusters": ONE}, "retention: must be a duration from 1s to 3650d"),
    ({"latest_ttl": 0.5, "clusters": ONE}, "latest_ttl: must be a duration from 1s to 365d"),
    ({"cpu_seconds": 1e18, "clusters": ONE}, "cpu_seconds: must be a duration from 1s to 1h"),
    ({"cpu_seconds": 1e30, "clusters": ONE}, "cpu_seconds: must be a duration from 1s to 1h"),
    ({"clusters": {"c": {"services": {"s": {"targets": ["http://x"], "cpu_seconds": "1e30"}}}}},
     "clusters.c.services.s.cpu_seconds: must be a duration from 1s to 1h"),
    ({"clusters": {"c": {"services": {"s": {"targets": [{"url": "http://x", "timeout": "nan"}]}}}}},
     "clusters.c.services.s.targets[0].timeout: must be a duration from 1ms to 1h"),
    ({"max_profile_bytes": 1 << 40, "clusters": ONE}, "max_profile_bytes: must be an integer from 1024"),
    ({"merged": ["1e30d"], "clusters": ONE}, "merged[0]: must be a duration string"),
    ({"clusters": {"p": {"kind": "parca", "url": "http://x", "window": "1s", "range": "3650d"}}},
     "clusters.p.range: must be from one to 10000 windows"),
    ({"clusters": {"p": {"kind": "parca", "url": "http://x", "window": "inf"}}},
     "clusters.p.window: must be a duration from 1s to 365d"),
    ({"clusters": {"p": {"kind": "parca", "url": "http://x", "discover_every": "nan"}}},
     "clusters.p.discover_every: must be a duration from 0 to 1d"),
    ({"max_connections": 0, "clusters": ONE}, "max_connections: must be an integer from 1 to 65536"),
    ({"max_memory": 1.5, "clusters": ONE}, "max_memory: must be an integer from 16777216"),
    ({"decode_threads": 1000, "clusters": ONE}, "decode_threads: must be an integer from 1 to 64"),
    ({"max_profile_raw_bytes": -1, "clusters": ONE}, "max_profile_raw_bytes: must be an integer"),
]


@pytest.mark.parametrize("cfg,msg", BAD_CONFIGS, ids=[m for _, m in BAD_CONFIGS])
def test_bad_config_is_one_line_exit_2_nothing_mounted(profilefs_bin, tmp_path, cfg, msg):
    path = tmp_path / "c.json"
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PFS_UNSET_VAR"}
    r = run("-f", "-c", str(path), str(mnt), env=env)
    try:
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"profilefs: error: config {path}: ")
        assert msg in lines[0], lines[0]
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)


def test_config_as_mount_option(goapp, mount, profilefs_bin, tmp_path):
    """-o config=FILE, as an fstab options field can carry it."""
    app = goapp()
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}},
                                          cache_dir=str(tmp_path / "cache"))))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([str(PROFILEFS), "-f", "-o", f"ro,config={path}", str(mnt)],
                            stderr=subprocess.PIPE)
    try:
        wait_for(lambda: is_mounted(mnt), what="mount")
        assert (mnt / "local/app/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    finally:
        unmount(mnt)
        proc.wait(timeout=10)


def test_missing_config_file(profilefs_bin, tmp_path):
    r = run("-f", "-c", str(tmp_path / "nope.json"), str(tmp_path))
    assert r.returncode == 2 and "nope.json" in r.stderr and len(r.stderr.splitlines()) == 1


@pytest.mark.skipif(shutil.which("mount") is None, reason="no mount(8)")
@pytest.mark.parametrize("form", ["config-as-source", "config-as-option"])
def test_mount_t_fuse_profilefs_like_fstab(goapp, tmp_path, form):
    """What an /etc/fstab line does, in both forms
         /etc/profilefs.json  /mnt/prof  fuse.profilefs  rw,allow_other  0 0
         none  /mnt/prof  fuse.profilefs  config=/etc/profilefs.json,allow_other  0 0
    mount(8) runs the fuse helper, which runs `profilefs SOURCE DIR -o OPTS`.
    `-t fuse.profilefs` finds profilefs on the helper's own PATH (/usr/local/bin
    after meson install); the "prog#source" form used here runs the same
    command with the binary from the build tree."""
    app = goapp()
    cfg = config_for({"app": {"targets": [app.base], "profiles": ["heap"]}},
                     cache_dir=str(tmp_path / "cache"))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    source, opts = ((f"{PROFILEFS}#{path}", "rw,allow_other,nodev,nosuid")
                    if form == "config-as-source" else
                    (f"{PROFILEFS}#none", f"config={path},allow_other"))
    r = subprocess.run(["mount", "-t", "fuse", source, str(mnt), "-o", opts],
                       capture_output=True, text=True, timeout=30)
    try:
        assert r.returncode == 0, r.stderr
        wait_for(lambda: is_mounted(mnt), what="mount")
        assert (mnt / "local/app/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
        with open("/proc/self/mounts") as f:
            fields = next(l for l in f if l.split()[1] == str(mnt)).split()
        assert fields[0] == str(path) and fields[2] == "fuse.profilefs"
        assert "ro" in fields[3].split(",")  # read-only even when asked for rw
        assert "allow_other" in fields[3]
    finally:
        unmount(mnt)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_signal_unmounts_and_exits_0(goapp, mount, sig):
    """systemd stops with SIGTERM: a clean stop, not a failure (exit 0)."""
    import signal
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    (m.path / "local/app/latest/heap.pb.gz").read_bytes()
    m.proc.send_signal(getattr(signal, sig))
    assert m.proc.wait(timeout=10) == 0, m.log()
    wait_for(lambda: not is_mounted(m.path), what="unmount")
    assert "unmounting" in m.log()


def test_build_guards_thread_stacks():
    """Every object is built with stack-clash protection, and a frame over
    16 KB fails the build (the flame-graph walk had 32 KB frames on the
    fetcher thread: deep input jumped its guard page)."""
    from conftest import BUILD
    cmds = json.loads((BUILD / "compile_commands.json").read_text())
    ours = [c for c in cmds if "/src/" in c["file"]]
    assert ours
    for c in ours:
        cmd = c.get("command") or " ".join(c["arguments"])
        assert "-fstack-clash-protection" in cmd, c["file"]
        assert "-Werror=frame-larger-than=16384" in cmd, c["file"]


def test_meson_install_installs_the_systemd_unit(tmp_path):
    """meson install puts the binary, the man page and the unit in place; the
    unit runs the installed binary and does not restart a bad config."""
    build = PROFILEFS.parent
    r = subprocess.run(["meson", "install", "-C", str(build), "--no-rebuild", "--destdir",
                        str(tmp_path / "dest")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    prefix = subprocess.run(["meson", "introspect", "--buildoptions", str(build)],
                            capture_output=True, text=True, check=True).stdout
    prefix = next(o["value"] for o in json.loads(prefix) if o["name"] == "prefix")
    root = tmp_path / "dest" / prefix.lstrip("/")
    unit = (root / "lib/systemd/system/profilefs.service").read_text()
    assert f"ExecStart={prefix}/bin/profilefs -f -c /etc/profilefs.json" in unit
    assert "RestartPreventExitStatus=2" in unit and "EnvironmentFile=-/etc/profilefs.env" in unit
    assert "LimitNOFILE=65536" in unit
    assert (root / "bin/profilefs").exists() and (root / "share/man/man1/profilefs.1").exists()
