"""The S3 tier (issue 12) against a real S3 server that checks signatures:
OpenStack Swift with s3api. So far the collector half: `aws s3 sync` of a
mount fills a bucket with the mount's tree, byte for byte, idempotently."""
import os
import shutil
import subprocess

import pytest

from conftest import PROFILES, config_for, pprof_top
from test_core import round_dirs


@pytest.fixture
def swift(tmp_path):
    for tool in ("swift-proxy-server", "memcached", "aws"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (scripts/install-deps installs it)")
    from swift_s3 import Swift
    s = Swift(tmp_path / "swift")
    yield s
    s.stop()


def test_collector_sync_into_swift(goapp, mount, swift, tmp_path):
    app = goapp()
    m = mount(config_for({"app": [app.base]}))
    r = swift.aws("mb", "s3://profiles")
    assert r.returncode == 0, r.stderr
    # the documented collector: the tree without latest/
    cmd = ["sync", f"{m.path}/", "s3://profiles/", "--exclude", "*/latest/*"]
    r = swift.aws(*cmd)
    assert r.returncode == 0, r.stderr
    rnd = round_dirs(m.path / "local/app")[-1]
    keys = sorted(l.split()[-1] for l in swift.aws("ls", "--recursive", "s3://profiles/")
                  .stdout.splitlines())
    want = sorted([f"local/app/{rnd}/{p}.pb.gz" for p in PROFILES] +
                  [f"local/app/merged/24h/{p}.pb.gz" for p in PROFILES] +
                  ["local/app/merged/24h/default.pgo"])
    assert keys == want  # ':' in keys, as the mount names its <time> directories
    # byte for byte
    back = tmp_path / "back"
    r = swift.aws("cp", "--recursive", "s3://profiles/local/", f"{back}/")
    assert r.returncode == 0, r.stderr
    for p in PROFILES:
        assert (back / "app" / rnd / f"{p}.pb.gz").read_bytes() == \
            (m.path / "local/app" / rnd / f"{p}.pb.gz").read_bytes()
    # idempotent: a second sync uploads nothing
    r = swift.aws(*cmd)
    assert r.returncode == 0 and "upload:" not in r.stdout, r.stdout
    # and the server checks signatures (npm's s3rver does not)
    r = swift.aws("ls", "s3://profiles/", AWS_SECRET_ACCESS_KEY="wrong")
    assert r.returncode != 0 and "SignatureDoesNotMatch" in r.stderr


def s3_cluster(swift, bucket="profiles", **over):
    c = {"kind": "s3", "endpoint": swift.url, "bucket": bucket, "region": swift.REGION,
         "access_key_id": swift.ACCESS, "secret_access_key": swift.SECRET, "settle": "1s"}
    c.update(over)
    return c


def collect(goapp, mount, swift, services=("app",), bucket="profiles"):
    """The collector host: a mount of Go targets, synced into the bucket."""
    apps = {name: [goapp().base] for name in services}
    m = mount(config_for(apps), name="collector")
    assert swift.aws("mb", f"s3://{bucket}").returncode == 0
    for name in services:  # a round per service
        os.listdir(m.path / "local" / name)
    r = swift.aws("sync", f"{m.path}/", f"s3://{bucket}/", "--exclude", "*/latest/*")
    assert r.returncode == 0, r.stderr
    return m


def tree(root):
    """Every file under root (latest/ and merged/ left out): path -> (size, mtime, bytes)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("latest", "merged")]
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, int(st.st_mtime), open(p, "rb").read())
    return out


def test_workstation_mount_is_the_collectors(goapp, mount, swift, tmp_path):
    col = collect(goapp, mount, swift, services=("api", "web"))
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    want = tree(col.path / "local")
    got = tree(ws.path / "local")
    assert sorted(got) == sorted(want) and len(want) == 2 * len(PROFILES)
    for k in want:
        assert got[k] == want[k], k
    for k in want:
        pprof_top(ws.path / "local" / k)
    assert ws.error_lines() == []
