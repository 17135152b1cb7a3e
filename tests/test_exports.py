"""Exports of a mount with one dead target succeed: a listing shows only
files that exist (a failed one is EIO by name, its reason in the log and
.status.json), so rsync and aws s3 sync copy the healthy part and exit 0."""
import errno
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import PROFILES, ROOT, config_for, free_port, wait_for

FILES = sorted(f"{p}.pb.gz" for p in PROFILES)


def rsync(src, dst):
    r = subprocess.run(["rsync", "-a", "--stats", f"{src}/", f"{dst}/"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr)
    return int(next(l for l in r.stdout.splitlines()
                    if l.startswith("Number of regular files transferred:")).split(":")[1]
               .replace(",", ""))


def dead_url():
    return f"http://127.0.0.1:{free_port()}/debug/pprof"


def test_rsync_with_a_dead_target_exits_0_twice(goapp, mount, tmp_path):
    app, dead = goapp(), dead_url()
    m = mount(config_for({"up": [app.base], "down": [dead]}))
    dst = tmp_path / "dst"
    # latest/, its <time>/ and merged/24h/ (with default.pgo) of the live service
    assert rsync(m.path, dst) == 3 * len(PROFILES) + 1
    assert sorted(os.listdir(dst / "local/up/latest")) == FILES
    assert sorted(os.listdir(dst / "local/down")) == ["latest", "merged"]
    assert os.listdir(dst / "local/down/latest") == []
    assert os.listdir(dst / "local/down/merged/24h") == []
    assert rsync(m.path, dst) == 0
    # by name, a failed file is EIO; why is in the log and .status.json
    with pytest.raises(OSError) as e:
        (m.path / "local/down/latest/heap.pb.gz").read_bytes()
    assert e.value.errno == errno.EIO
    assert any(dead in l for l in m.error_lines())
    st = {t["service"]: t for t in json.loads((m.path / ".status.json").read_text())["targets"]}
    assert st["down"]["last_error"] and st["down"]["last_ok"] is None
    assert st["up"]["last_error"] is None


def test_first_listing_of_a_down_service_shows_no_round(mount):
    m = mount(config_for({"down": [dead_url()]}))
    svc = m.path / "local/down"
    assert sorted(os.listdir(svc)) == ["latest", "merged"]  # waited for its round: none
    assert os.listdir(svc / "latest") == []
    assert sorted(os.listdir(svc)) == ["latest", "merged"]


def test_status_keeps_the_last_error_after_a_success(goapp, mount):
    port = free_port()
    m = mount(config_for({"s": {"targets": [f"http://127.0.0.1:{port}/debug/pprof"],
                                "profiles": ["heap"]}}, latest_ttl=1))
    with pytest.raises(OSError) as e:
        (m.path / "local/s/latest/heap.pb.gz").read_bytes()
    assert e.value.errno == errno.EIO
    goapp("-addr", f"127.0.0.1:{port}")
    time.sleep(1.1)  # latest_ttl: the next read takes a new round
    assert (m.path / "local/s/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    [t] = json.loads((m.path / ".status.json").read_text())["targets"]
    assert t["failures"] == 1 and t["fetches"] == 2 and t["last_ok"]
    assert t["last_error"] and t["last_error_file"] == "heap.pb.gz"
    assert t["last_error_at"] <= t["last_ok"]


S3RVER = ROOT / "build" / "npm" / "node_modules" / ".bin" / "s3rver"


@pytest.fixture
def s3(tmp_path):
    """npm's s3rver on loopback, and the environment of an aws cli client."""
    if not S3RVER.exists() or not shutil.which("aws", path="/usr/bin"):
        pytest.skip("s3rver (scripts/install-deps: npm) or Debian's awscli missing")
    port = free_port()
    (tmp_path / "s3").mkdir()
    proc = subprocess.Popen([str(S3RVER), "--directory", str(tmp_path / "s3"), "--port", str(port),
                             "--address", "127.0.0.1", "--silent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE="/dev/null",
               AWS_SHARED_CREDENTIALS_FILE="/dev/null")
    url = f"http://127.0.0.1:{port}"

    def aws(*args):
        return subprocess.run(["/usr/bin/aws", "--endpoint-url", url, *args], capture_output=True,
                              text=True, env=env, timeout=120)
    try:
        wait_for(lambda: aws("s3", "ls").returncode == 0, timeout=20, what="s3rver")
        assert aws("s3", "mb", "s3://profiles").returncode == 0
        yield aws
    finally:
        proc.kill()
        proc.wait()


def test_aws_s3_sync_with_a_dead_target_exits_0_twice(goapp, mount, s3):
    app = goapp()
    m = mount(config_for({"up": [app.base], "down": [dead_url()]}))
    cmd = ["s3", "sync", f"{m.path}/", "s3://profiles/", "--exclude", "*/latest/*"]
    r = s3(*cmd)
    assert r.returncode == 0, r.stderr
    uploads = [l for l in r.stdout.splitlines() if l.startswith("upload:")]
    assert len(uploads) == 2 * len(PROFILES) + 1  # <time>/ and merged/24h/ of "up"
    listed = s3("s3", "ls", "--recursive", "s3://profiles/").stdout
    assert "local/up/merged/24h/default.pgo" in listed and "local/down" not in listed
    r = s3(*cmd)
    assert r.returncode == 0, r.stderr
    assert not [l for l in r.stdout.splitlines() if l.startswith("upload:")], r.stdout
