"""The S3 tier (issue 12) against a real S3 server that checks signatures:
OpenStack Swift with s3api. So far the collector half: `aws s3 sync` of a
mount fills a bucket with the mount's tree, byte for byte, idempotently."""
import calendar
import errno
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import PROFILES, config_for, pprof_top, wait_for
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


def test_wrong_secret_is_eio_one_line(goapp, mount, swift):
    collect(goapp, mount, swift)
    ws = mount({"clusters": {"local": s3_cluster(swift, secret_access_key="not-the-secret")}},
               name="workstation")
    with pytest.raises(OSError) as e:
        os.listdir(ws.path / "local")
    assert e.value.errno == errno.EIO
    errs = ws.error_lines()
    assert len(errs) == 1, errs
    assert "s3://profiles/local/" in errs[0] and "SignatureDoesNotMatch" in errs[0], errs
    assert "not-the-secret" not in ws.log() and swift.SECRET not in ws.log()


def test_rsync_of_the_workstation_mount_twice_copies_nothing(goapp, mount, swift, tmp_path):
    collect(goapp, mount, swift)
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    dst = tmp_path / "archive"
    args = ["rsync", "-a", "--exclude", "latest", "--exclude", "merged", "--stats"]
    r = subprocess.run(args + [f"{ws.path}/", f"{dst}/"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"Number of regular files transferred: {len(PROFILES)}" in r.stdout, r.stdout
    r = subprocess.run(args + [f"{ws.path}/", f"{dst}/"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Number of regular files transferred: 0" in r.stdout, r.stdout
    assert ws.error_lines() == []


def swift_put_tar(swift, bucket, files):
    """Objects put at once through Swift's own API (bulk extract-archive):
    files maps key -> bytes."""
    import io
    import tarfile
    import urllib.request
    req = urllib.request.Request(swift.url + "/auth/v1.0", headers={
        "X-Auth-User": swift.ACCESS, "X-Auth-Key": swift.SECRET})
    with urllib.request.urlopen(req, timeout=10) as r:
        storage, token = r.headers["X-Storage-Url"], r.headers["X-Auth-Token"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for key, data in files.items():
            info = tarfile.TarInfo(key)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    req = urllib.request.Request(f"{storage}/{bucket}?extract-archive=tar", data=buf.getvalue(),
                                 method="PUT", headers={"X-Auth-Token": token,
                                                        "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    assert out["Number Files Created"] == len(files), out


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_ten_thousand_rounds_list_in_pages(goapp, mount, swift):
    col = collect(goapp, mount, swift)
    rnd = round_dirs(col.path / "local/app")[-1]
    heap = (col.path / "local/app" / rnd / "heap.pb.gz").read_bytes()
    now = int(time.time()) // 60 * 60
    times = [rfc3339(now - 60 * i) for i in range(1, 10001)]
    swift_put_tar(swift, "profiles", {f"local/big/{t}/heap.pb.gz": heap for t in times})
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    assert sorted(os.listdir(ws.path / "local")) == ["app", "big"]
    got = sorted(d for d in os.listdir(ws.path / "local/big") if d not in ("latest", "merged"))
    assert got == sorted(times)  # S3 answers 1000 a page: ten pages and more
    for t in (times[0], times[-1]):
        p = ws.path / "local/big" / t / "heap.pb.gz"
        assert p.read_bytes() == heap
        assert int(p.stat().st_mtime) == calendar.timegm(time.strptime(t, "%Y-%m-%dT%H:%M:%SZ"))
    assert (ws.path / "local/big/latest/heap.pb.gz").read_bytes() == heap
    assert ws.error_lines() == []


def test_a_round_shows_once_complete(goapp, mount, swift):
    col = collect(goapp, mount, swift)
    rnd = round_dirs(col.path / "local/app")[-1]
    heap = (col.path / "local/app" / rnd / "heap.pb.gz").read_bytes()
    now = int(time.time())
    old, young = rfc3339(now - 7200), rfc3339(now - 5)
    swift_put_tar(swift, "profiles", {
        f"local/svc/{old}/heap.pb.gz": heap, f"local/svc/{young}/heap.pb.gz": heap,
        # not profiles: left out
        f"local/svc/{old}/notes.txt": b"x", f"local/svc/{old}/empty.pb.gz": b"",
        f"local/svc/{old}/deeper/heap.pb.gz": heap, "local/svc/not-a-time/heap.pb.gz": heap})
    ws = mount({"clusters": {"local": s3_cluster(swift, settle="1h", list_ttl="0s")}},
               name="workstation")
    svc = ws.path / "local/svc"
    # the newest round is younger than settle, with no marker: not complete yet
    assert sorted(os.listdir(svc)) == sorted([old, "latest", "merged"])
    assert os.listdir(svc / old) == ["heap.pb.gz"]
    with pytest.raises(FileNotFoundError):
        os.stat(svc / young)
    assert (svc / "latest/heap.pb.gz").read_bytes() == heap
    # the uploader's marker, written last, completes it
    swift_put_tar(swift, "profiles", {f"local/svc/{young}/.complete": b""})
    wait_for(lambda: young in os.listdir(svc), what="the marked round")
    assert (svc / young / "heap.pb.gz").read_bytes() == heap
    assert os.listdir(svc / young) == ["heap.pb.gz"]
    assert ws.error_lines() == []


def test_an_object_gone_after_listing_is_eio_one_line(goapp, mount, swift):
    collect(goapp, mount, swift)
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    rnd = round_dirs(ws.path / "local/app")[-1]
    assert sorted(os.listdir(ws.path / f"local/app/{rnd}")) == sorted(f"{p}.pb.gz" for p in PROFILES)
    assert swift.aws("rm", f"s3://profiles/local/app/{rnd}/heap.pb.gz").returncode == 0
    with pytest.raises(OSError) as e:
        (ws.path / f"local/app/{rnd}/heap.pb.gz").read_bytes()
    assert e.value.errno == errno.EIO
    errs = ws.error_lines()
    assert len(errs) == 1, errs
    assert f"s3://profiles/local/app/{rnd}/heap.pb.gz" in errs[0] and "NoSuchKey" in errs[0], errs
    assert not [f for f in ws.cached_files() if f.endswith("heap.pb.gz")]
    # the others still read
    assert (ws.path / f"local/app/{rnd}/mutex.pb.gz").read_bytes()


def bucket_keys(swift, bucket="profiles"):
    r = swift.aws("ls", "--recursive", f"s3://{bucket}/")
    return sorted(l.split(None, 3)[-1] for l in r.stdout.splitlines())


def upload_block(swift, bucket="profiles", **over):
    u = {"endpoint": swift.url, "bucket": bucket, "region": swift.REGION,
         "access_key_id": swift.ACCESS, "secret_access_key": swift.SECRET}
    u.update(over)
    return u


def test_the_uploader_fills_the_bucket_for_workstations(goapp, mount, swift):
    assert swift.aws("mb", "s3://profiles").returncode == 0
    app = goapp()
    col = mount(config_for({"app": [app.base]}, upload=upload_block(swift)), name="collector")
    os.listdir(col.path / "local/app")  # a round of every profile
    rnd = round_dirs(col.path / "local/app")[-1]
    want = sorted([f"local/app/{rnd}/{p}.pb.gz" for p in PROFILES] + [f"local/app/{rnd}/.complete"])
    wait_for(lambda: bucket_keys(swift) == want, timeout=30, what="the round in the bucket")
    status = json.loads((col.path / ".status.json").read_text())["upload"]
    assert status["rounds_uploaded"] == 1 and status["files_uploaded"] == len(PROFILES), status
    # a workstation sees it at once: the marker says it is complete
    ws = mount({"clusters": {"local": s3_cluster(swift, settle="1h")}}, name="workstation")
    got, exp = tree(ws.path / "local"), tree(col.path / "local")
    assert sorted(got) == sorted(exp) and len(exp) == len(PROFILES)
    assert all(got[k] == exp[k] for k in exp)
    assert col.error_lines() == [] and ws.error_lines() == []


def test_the_uploader_never_overwrites(goapp, mount, swift, tmp_path):
    assert swift.aws("mb", "s3://profiles").returncode == 0
    app = goapp()
    col = mount(config_for({"app": [app.base]}, latest_ttl="1h", upload=upload_block(swift)),
                name="collector")
    heap = (col.path / "local/app/latest/heap.pb.gz").read_bytes()
    rnd = round_dirs(col.path / "local/app")[-1]
    key = f"local/app/{rnd}/heap.pb.gz"
    wait_for(lambda: f"local/app/{rnd}/.complete" in bucket_keys(swift), what="the marker")
    junk = tmp_path / "junk"
    junk.write_bytes(b"not the snapshot")
    assert swift.aws("cp", str(junk), f"s3://profiles/{key}").returncode == 0
    # the same round gets another file: uploaded; the one there is left as it is
    mutex = (col.path / "local/app/latest/mutex.pb.gz").read_bytes()
    wait_for(lambda: f"local/app/{rnd}/mutex.pb.gz" in bucket_keys(swift), what="mutex")
    back = tmp_path / "back"
    assert swift.aws("cp", f"s3://profiles/{key}", str(back)).returncode == 0
    assert back.read_bytes() == b"not the snapshot" != heap
    assert swift.aws("cp", f"s3://profiles/local/app/{rnd}/mutex.pb.gz", str(back)).returncode == 0
    assert back.read_bytes() == mutex
    wait_for(lambda: json.loads((col.path / ".status.json").read_text())["upload"]
             ["files_there_already"] == 1, what="the count of objects left as they were")


def test_upload_with_a_wrong_secret_is_one_line(goapp, mount, swift):
    assert swift.aws("mb", "s3://profiles").returncode == 0
    app = goapp()
    col = mount(config_for({"app": [app.base]},
                           upload=upload_block(swift, secret_access_key="not-the-secret")),
                name="collector")
    os.listdir(col.path / "local/app")  # the mount works: only the upload fails
    wait_for(lambda: col.error_lines(), what="the upload error")
    time.sleep(1)
    errs = col.error_lines()
    assert len(errs) == 1 and "upload s3://profiles/local/app/" in errs[0], errs
    assert "SignatureDoesNotMatch" in errs[0] and "not-the-secret" not in col.log()
    assert bucket_keys(swift) == []
