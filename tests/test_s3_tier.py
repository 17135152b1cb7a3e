"""The S3 tier against a real S3 server that checks signatures: OpenStack
Swift with s3api. The collector fills a bucket (`aws s3 sync` of its mount,
or its own uploader); workstations mount the bucket (kind "s3") and see the
collector's files byte for byte, with its sizes and mtimes."""
import calendar
import errno
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import PROFILES, config_for, stable_name, pprof_top, wait_for
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


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def test_ten_thousand_rounds_list_in_pages(goapp, mount, swift):
    col = collect(goapp, mount, swift)
    rnd = round_dirs(col.path / "local/app")[-1]
    heap = (col.path / "local/app" / rnd / "heap.pb.gz").read_bytes()
    now = int(time.time()) // 60 * 60
    times = [rfc3339(now - 60 * i) for i in range(1, 10001)]
    swift.put_tar("profiles", {f"local/big/{t}/heap.pb.gz": heap for t in times})
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
    swift.put_tar("profiles", {
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
    swift.put_tar("profiles", {f"local/svc/{young}/.complete": b""})
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


NO_AWS_ENV = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


@pytest.mark.parametrize("over, fragment", [
    ({"bucket": None}, "clusters.ws.bucket: is required"),
    ({"bucket": "a"}, 'clusters.ws.bucket: "a" is not a bucket name (3-63 of a-z 0-9 . -)'),
    ({"bucket": "Bad_Name"}, 'clusters.ws.bucket: "Bad_Name" is not a bucket name'),
    ({"prefix": "/abs"}, "clusters.ws.prefix: must not start with / nor hold //"),
    ({"secret_access_key": None}, "clusters.ws.secret_access_key: is required with access_key_id"),
    ({"access_key_id": None, "secret_access_key": None, "credentials_file": "/nonexistent"},
     "clusters.ws.credentials_file: no credentials: give access_key_id and"),
    ({"url": "http://x"}, "clusters.ws.url: unknown field"),  # it is "endpoint"
    ({"settle": "2d"}, "clusters.ws.settle:"),
    ({"window": "1h"}, "clusters.ws.window: unknown field"),
])
def test_s3_config_errors(profilefs_bin, tmp_path, over, fragment):
    c = {"kind": "s3", "endpoint": "http://127.0.0.1:9", "bucket": "profiles",
         "access_key_id": "k", "secret_access_key": "s"}
    c.update(over)
    c = {k: v for k, v in c.items() if v is not None}
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"cache_dir": str(tmp_path / "c"), "clusters": {"ws": c}}))
    r = subprocess.run([str(profilefs_bin), "--check", "-c", str(cfg)], capture_output=True,
                       text=True, env=NO_AWS_ENV)
    assert r.returncode == 2 and f"config {cfg}: {fragment}" in r.stderr, r.stderr


def test_upload_config_errors(profilefs_bin, tmp_path):
    cfg = tmp_path / "c.json"
    for up, fragment in [({"bucket": "profiles", "threads": 0, "access_key_id": "k",
                           "secret_access_key": "s"}, "upload.threads: must be an integer"),
                         ({"bucket": "profiles", "endpoint": "ftp://x", "access_key_id": "k",
                           "secret_access_key": "s"}, "upload"),
                         ({"buckets": "x"}, 'upload.buckets: unknown field; did you mean "bucket"?')]:
        cfg.write_text(json.dumps(config_for({"a": ["http://127.0.0.1:1"]}, upload=up,
                                             cache_dir=str(tmp_path / "c"))))
        r = subprocess.run([str(profilefs_bin), "--check", "-c", str(cfg)], capture_output=True,
                           text=True, env=NO_AWS_ENV)
        assert r.returncode == 2 and fragment in r.stderr, (up, r.stderr)


def test_credentials_from_the_environment_and_the_shared_file(goapp, mount, swift, tmp_path):
    collect(goapp, mount, swift)
    want = tree(tmp_path / "collector" / "local")
    c = s3_cluster(swift)
    del c["access_key_id"], c["secret_access_key"]
    # the environment, as aws reads it
    env = dict(NO_AWS_ENV, AWS_ACCESS_KEY_ID=swift.ACCESS, AWS_SECRET_ACCESS_KEY=swift.SECRET)
    ws = mount({"clusters": {"local": c}}, name="by-env", env=env)
    assert tree(ws.path / "local") == want
    # a shared credentials file, profile [tier]; others can read it: a warning
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = nope\naws_secret_access_key = nope\n"
                     f"[tier]\naws_access_key_id = {swift.ACCESS}\n"
                     f"aws_secret_access_key = {swift.SECRET}\n")
    creds.chmod(0o644)
    c2 = dict(c, credentials_file=str(creds), profile="tier")
    ws2 = mount({"clusters": {"local": c2}}, name="by-file", env=NO_AWS_ENV)
    assert tree(ws2.path / "local") == want
    assert f"{creds} holds secrets and others can read it" in ws2.log()
    for m in (ws, ws2):
        assert swift.SECRET not in m.log() and m.error_lines() == []


def test_odd_names_in_the_bucket(goapp, mount, swift):
    col = collect(goapp, mount, swift)
    rnd = round_dirs(col.path / "local/app")[-1]
    heap = (col.path / "local/app" / rnd / "heap.pb.gz").read_bytes()
    old = rfc3339(int(time.time()) - 7200)
    swift.put_tar("profiles", {f"local/a b/{old}/heap.pb.gz": heap,
                               f"local/.../{old}/heap.pb.gz": heap,
                               f"local/x\u00e9y/{old}/heap.pb.gz": heap,
                               f"local/ok/{old}/he ap.pb.gz": heap,
                               f"local/ok/{old}/heap.pb.gz": heap})
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    names = os.listdir(ws.path / "local")
    assert sorted(names) == sorted(["app", "ok"] + [stable_name(n) for n in ("a b", "...", "x\u00e9y")])
    for n in names:
        rounds = [d for d in os.listdir(ws.path / "local" / n) if d[0].isdigit()]
        assert rounds, n
        if n != "app":
            assert (ws.path / "local" / n / rounds[0] / "heap.pb.gz").read_bytes() == heap
    assert os.listdir(ws.path / f"local/ok/{old}") == ["heap.pb.gz"]  # no unsafe file name
    assert ws.error_lines() == []


def test_unmounting_still_uploads_what_is_queued(goapp, mount, swift):
    assert swift.aws("mb", "s3://profiles").returncode == 0
    app = goapp()
    col = mount(config_for({"app": [app.base]}, upload=upload_block(swift, threads=1)),
                name="collector")
    os.listdir(col.path / "local/app")
    rnd = round_dirs(col.path / "local/app")[-1]
    col.stop()  # at once: the round may still be queued
    keys = bucket_keys(swift)
    assert f"local/app/{rnd}/.complete" in keys and len(keys) == len(PROFILES) + 1, keys
    assert "not uploaded" not in col.log()


@pytest.fixture
def fake_s3():
    from fakes.s3 import FakeS3
    f = FakeS3()
    yield f
    f.stop()


def test_hostile_bucket_answers(fake_s3, mount, goapp):
    from fakes.s3 import s3_error
    app = goapp()
    heap = subprocess.run(["curl", "-sSf", f"{app.base}/heap"], capture_output=True,
                          check=True).stdout
    old = rfc3339(int(time.time()) - 7200)
    names = ["good", "deep", "trunc", "huge", "slow", "loop", "notxml", "err"]
    for n in names:
        fake_s3.objects[f"local/{n}/{old}/heap.pb.gz"] = heap
    fake_s3.objects[f"local/good/{old}/mutex.pb.gz"] = heap
    fake_s3.sizes[f"local/good/{old}/mutex.pb.gz"] = 999  # listed as another size
    ans = fake_s3.answers
    ans["local/deep/"] = (200, b"<ListBucketResult>" + b"<a>" * 20 + b"</a>" * 20 +
                          b"</ListBucketResult>", 0)
    ans["local/trunc/"] = (200, b"<ListBucketResult><CommonPrefixes><Prefix>local/trunc/20", 0)
    ans["local/huge/"] = (200, b"<ListBucketResult>" + b" " * (17 << 20) +
                          b"</ListBucketResult>", 0)
    ans["local/slow/"] = (200, b"<ListBucketResult></ListBucketResult>", 30)
    ans["local/loop/"] = (200, b"<ListBucketResult><IsTruncated>true</IsTruncated>"
                          b"<NextContinuationToken>again</NextContinuationToken>"
                          b"</ListBucketResult>", 0)
    ans["local/notxml/"] = (200, b"hello", 0)
    ans["local/err/"] = (500, s3_error("InternalError", "We encountered an internal error."), 0)
    c = {"kind": "s3", "endpoint": fake_s3.url, "bucket": "profiles", "access_key_id": "k",
         "secret_access_key": "s", "timeout": "2s"}
    # a failed listing is not taken again for an hour: one line each
    ws = mount({"retry_after": "1h", "clusters": {"local": c}}, name="workstation")
    assert sorted(os.listdir(ws.path / "local")) == sorted(names)

    # a listing that hangs holds up no other path
    import threading
    slow = {}

    def slow_ls():
        try:
            os.listdir(ws.path / "local/slow")
            slow["errno"] = 0
        except OSError as e:
            slow["errno"] = e.errno
    t = threading.Thread(target=slow_ls)
    t0 = time.monotonic()
    t.start()
    time.sleep(0.3)
    assert old in os.listdir(ws.path / "local/good")
    assert time.monotonic() - t0 < 2
    t.join(30)
    assert not t.is_alive() and time.monotonic() - t0 < 15 and slow["errno"] == errno.EIO

    why = {"deep": "nested too deep", "trunc": "S3 answer: truncated",
           "huge": "body larger than 16777216", "slow": "timed out",
           "loop": "1000 pages, 0 entries, and more", "notxml": "S3 answer: not XML",
           "err": "HTTP 500, InternalError: We encountered an internal error."}
    for n, fragment in why.items():
        with pytest.raises(OSError) as e:
            os.listdir(ws.path / "local" / n)
        assert e.value.errno == errno.EIO, n
        lines = [l for l in ws.error_lines() if f"list local/{n} failed" in l]
        assert len(lines) == 1, (n, ws.error_lines())
        assert f"s3://profiles/local/{n}/: " in lines[0] and fragment in lines[0], lines[0]
    # an object that is not the size it was listed with
    with pytest.raises(OSError) as e:
        (ws.path / f"local/good/{old}/mutex.pb.gz").read_bytes()
    assert e.value.errno == errno.EIO
    assert (ws.path / f"local/good/{old}/heap.pb.gz").read_bytes() == heap
    line = [l for l in ws.error_lines() if "mutex.pb.gz" in l]
    assert len(line) == 1 and "listed as 999: the object changed" in line[0], line
    assert "s3://profiles/local/good/" in line[0]
    status = json.loads((ws.path / ".status.json").read_text())
    err = [t for t in status["targets"] if t["service"] == "err"][0]
    assert "listing: s3://profiles/local/err/: HTTP 500, InternalError" in err["last_error"], err


def test_workstation_merges_by_the_same_rules(goapp, mount, swift, tmp_path):
    """merged/ of a workstation mount is merged there from the bucket's
    rounds by the same rules as on the collector: the allocations between
    the first and last round (not the sum of their totals), the mean live
    heap."""
    from fakes.wire import Profile
    app = goapp("-alloc-rate", "4", "-live-heap", "8")
    col = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap", "allocs"]}},
                           latest_ttl=1), name="collector")
    for k in range(3):
        if k:
            time.sleep(1.1)
        subprocess.run(["cat", str(col.path / "local/app/latest/heap.pb.gz"),
                        str(col.path / "local/app/latest/allocs.pb.gz")], check=True,
                       stdout=subprocess.DEVNULL)
    assert swift.aws("mb", "s3://profiles").returncode == 0
    # the collector's rounds from its cache: a sync of the mount stats
    # latest/ past latest_ttl, and the round that starts would be the
    # collector's alone (a slow build lands it meanwhile)
    r = swift.aws("sync", f"{col.cache}/", "s3://profiles/", "--exclude", ".*",
                  "--exclude", "*/.*")
    assert r.returncode == 0, r.stderr
    rs = sorted(d for d in os.listdir(col.cache / "local/app") if d[0].isdigit())
    assert len(rs) >= 3
    ws = mount({"clusters": {"local": s3_cluster(swift)}}, name="workstation")
    out = {}
    for name, m in (("col", col), ("ws", ws)):
        for p in ("heap", "allocs"):
            f = tmp_path / f"{name}-{p}.pb.gz"
            subprocess.run(["cp", str(m.path / "local/app/merged/24h" / f"{p}.pb.gz"), str(f)],
                           check=True)
            pprof_top(f)
            out[name, p] = Profile(f.read_bytes())
    first = Profile((col.path / "local/app" / rs[0] / "allocs.pb.gz").read_bytes())
    last = Profile((col.path / "local/app" / rs[-1] / "allocs.pb.gz").read_bytes())
    span = (last.time_nanos - first.time_nanos) / 1e9
    for name in ("col", "ws"):
        got = out[name, "allocs"].total("alloc_space", "main.allocSteady")
        assert abs(got - 4 * (1 << 20) * span) <= 0.15 * 4 * (1 << 20) * span, (name, got, span)
        live = out[name, "heap"].total("inuse_space", "main.holdLive")
        assert abs(live - 8 * (1 << 20)) <= 0.15 * 8 * (1 << 20), (name, live)
    assert out["ws", "allocs"].samples == out["col", "allocs"].samples
    assert ws.error_lines() == []


def test_first_command_on_a_fresh_workstation_is_latest(goapp, mount, swift, tmp_path):
    """`cat <cluster>/<service>/latest/heap.pb.gz` as the very first command
    on a fresh workstation mount waits for the first listing (as <time>/
    does), on three fresh mounts in a row."""
    col = collect(goapp, mount, swift)
    rnd = round_dirs(col.path / "local/app")[-1]
    want = (col.path / "local/app" / rnd / "heap.pb.gz").read_bytes()
    for k in range(3):
        ws = mount({"clusters": {"local": s3_cluster(swift)}}, name=f"ws{k}")
        r = subprocess.run(["cat", str(ws.path / "local/app/latest/heap.pb.gz")],
                           capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want
        ws.stop()
