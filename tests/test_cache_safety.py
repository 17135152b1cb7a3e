"""The cache directory: no symlink in it is ever followed, it must be ours,
and one mount holds it at a time."""
import errno
import os
import shutil
import subprocess

import pytest

from conftest import Mount, config_for, is_mounted, pprof_top, unmount, wait_for, windows
from fakes.pyroscope import Fake as Pyroscope


def outside(tmp_path):
    """A directory outside the cache with a file that must survive and never be served."""
    d = tmp_path / "outside"
    d.mkdir(exist_ok=True)
    (d / "precious").write_text("keep me")
    (d / "heap.pb.gz").write_bytes(b"OUTSIDE")
    (d / "cpu.pb.gz").write_bytes(b"OUTSIDE")
    return d


def test_symlinked_tmp_is_replaced_not_emptied(goapp, mount, tmp_path):
    out = outside(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    (cache / ".tmp").symlink_to(out)
    app = goapp()
    m = mount(config_for({"app": [app.base]}, cache_dir=str(cache)))
    assert (out / "precious").read_text() == "keep me"
    assert not (cache / ".tmp").is_symlink() and (cache / ".tmp").is_dir()
    (tmp_path / "h.pb.gz").write_bytes((m.path / "local/app/latest/heap.pb.gz").read_bytes())
    pprof_top(tmp_path / "h.pb.gz")
    assert sorted(os.listdir(out)) == ["cpu.pb.gz", "heap.pb.gz", "precious"]
    assert "is not a directory (a symlink): replacing it" in m.log()


def test_symlinked_service_and_round_dirs_are_not_followed(goapp, mount, tmp_path):
    """An old round behind a symlinked service dir is neither served nor
    deleted by retention; a symlinked round is not served."""
    out = outside(tmp_path)
    old_round = out / "2020-01-01T00:00:00Z"
    old_round.mkdir()
    (old_round / "heap.pb.gz").write_bytes(b"OUTSIDE")
    cache = tmp_path / "cache"
    (cache / "local").mkdir(parents=True, mode=0o700)
    os.chmod(cache, 0o700)
    (cache / "local/app").symlink_to(out)
    (cache / "local/other").mkdir()
    (cache / "local/other/2026-01-01T00:00:00Z").symlink_to(out)
    app = goapp()
    m = mount(config_for({"app": [app.base], "other": [app.base]}, cache_dir=str(cache),
                         retention="3650d"))
    svc = m.path / "local/app"
    assert "2020-01-01T00:00:00Z" not in os.listdir(svc)
    assert "2026-01-01T00:00:00Z" not in os.listdir(m.path / "local/other")
    with pytest.raises(FileNotFoundError):
        (m.path / "local/other/2026-01-01T00:00:00Z/heap.pb.gz").read_bytes()
    data = (svc / "latest/heap.pb.gz").read_bytes()
    assert data != b"OUTSIDE" and data[:2] == b"\x1f\x8b"
    m.stop()
    m2 = mount(config_for({"app": [app.base]}, cache_dir=str(cache), retention="1d"), name="m2")
    wait_for(lambda: "mounted" in m2.log(), what="mount log")
    assert (old_round / "heap.pb.gz").read_bytes() == b"OUTSIDE"  # retention did not reach it
    assert (out / "precious").read_text() == "keep me"


def test_symlinked_window_is_fetched_not_read_through(mount, tmp_path):
    """A Parca/Pyroscope window directory replaced by a symlink to an outside
    directory: its files are fetched from upstream, never read from there."""
    out = outside(tmp_path)
    fake = Pyroscope(["checkout"])
    try:
        w = windows(2)[0]
        cache = tmp_path / "cache"
        (cache / "pyro/checkout").mkdir(parents=True)
        os.chmod(cache, 0o700)
        (cache / "pyro/checkout" / w).symlink_to(out)
        m = mount({"clusters": {"pyro": {"kind": "pyroscope", "url": fake.url, "tenant": "anonymous", "window": "1h",
                                         "range": "2h"}}, "cache_dir": str(cache)})
        data = (m.path / "pyro/checkout" / w / "cpu.pb.gz").read_bytes()
        assert data != b"OUTSIDE" and data[:2] == b"\x1f\x8b"
        assert sorted(os.listdir(out)) == ["cpu.pb.gz", "heap.pb.gz", "precious"]
        assert (out / "cpu.pb.gz").read_bytes() == b"OUTSIDE"
        assert not (cache / "pyro/checkout" / w).is_symlink()
    finally:
        fake.stop()


def test_symlinked_file_in_a_round_is_not_served(goapp, mount, tmp_path):
    out = outside(tmp_path)
    app = goapp()
    cfg = config_for({"app": [app.base]}, retention="3650d", latest_ttl=3600)
    m = mount(cfg)
    rnd = m.path / "local/app/latest"
    (tmp_path / "x").write_bytes((rnd / "heap.pb.gz").read_bytes())
    m.stop()
    [r] = [d for d in os.listdir(m.cache / "local/app") if d[0].isdigit()]
    f = m.cache / "local/app" / r / "goroutine.pb.gz"
    f.unlink(missing_ok=True)
    f.symlink_to(out / "heap.pb.gz")
    m.start()
    assert "goroutine.pb.gz" not in os.listdir(m.path / "local/app" / r)
    with pytest.raises(OSError):
        (m.path / "local/app" / r / "goroutine.pb.gz").read_bytes()


def test_a_crash_leftover_staged_file_is_neither_listed_nor_served(goapp, mount):
    """Snapshots are staged in their round's directory (.stage.<pid>.<n>)
    and renamed into place once on disk. One a crash left behind, even
    a whole one, is not a snapshot: absent from the listing, ENOENT, and
    the round's real files are as they were."""
    app = goapp()
    m = mount(config_for({"app": {"targets": [app.base], "profiles": ["heap"]}},
                         retention="3650d", latest_ttl=3600))
    data = (m.path / "local/app/latest/heap.pb.gz").read_bytes()
    m.stop()
    [r] = [d for d in os.listdir(m.cache / "local/app") if d[0].isdigit()]
    assert os.listdir(m.cache / "local/app" / r) == ["heap.pb.gz"]  # nothing staged left
    (m.cache / "local/app" / r / ".stage.1.1").write_bytes(data[:10])
    m.start()
    assert os.listdir(m.path / "local/app" / r) == ["heap.pb.gz"]
    with pytest.raises(OSError) as e:
        os.stat(m.path / "local/app" / r / ".stage.1.1")
    assert e.value.errno == errno.ENOENT
    assert (m.path / "local/app" / r / "heap.pb.gz").read_bytes() == data
    pprof_top(m.path / "local/app" / r / "heap.pb.gz")


def mount_fails(profilefs_bin, tmp_path, cfg, name="mnt"):
    path = tmp_path / f"{name}.json"
    import json
    path.write_text(json.dumps(cfg))
    path.chmod(0o600)
    mnt = tmp_path / name
    mnt.mkdir(exist_ok=True)
    r = subprocess.run([str(profilefs_bin), "-f", "-c", str(path), str(mnt)], capture_output=True,
                       text=True, timeout=30)
    try:
        assert r.returncode == 1, r.stderr
        assert not is_mounted(mnt)
    finally:
        unmount(mnt)
    return r.stderr


@pytest.mark.parametrize("how", ["world-writable", "group-writable", "other-owner"])
def test_cache_dir_others_can_write_is_refused(profilefs_bin, tmp_path, how):
    cache = tmp_path / "cache"
    cache.mkdir()
    if how == "other-owner":
        os.chmod(cache, 0o700)
        os.chown(cache, 65534, 65534)
    else:
        os.chmod(cache, 0o777 if how == "world-writable" else 0o770)
    err = mount_fails(profilefs_bin, tmp_path, config_for({"a": ["http://127.0.0.1:1"]},
                                                          cache_dir=str(cache)))
    assert f"cache_dir {cache}:" in err and "refusing" in err, err
    assert ("owned by another user" if how == "other-owner" else "writable by others") in err


def test_two_mounts_cannot_share_a_cache_dir(goapp, mount, profilefs_bin, tmp_path):
    app = goapp()
    cfg = config_for({"app": [app.base]})
    m = mount(cfg)
    err = mount_fails(profilefs_bin, tmp_path, dict(cfg, cache_dir=str(m.cache)), name="second")
    assert f"cache_dir {m.cache} is in use by another profilefs (pid {m.proc.pid})" in err, err
    assert (m.path / "local/app/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
