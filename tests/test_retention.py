"""Retention applies to every kind and to what is on disk, not only to
rounds this mount made."""
import os
import time

from conftest import config_for, wait_for, windows
from fakes.pyroscope import Fake as Pyroscope


def plant(cache, rel, data=b"x"):
    d = cache / rel
    d.mkdir(parents=True, exist_ok=True)
    (d / "heap.pb.gz").write_bytes(data)
    return d


def test_windows_past_range_and_retention_are_deleted(mount, tmp_path):
    fake = Pyroscope(["checkout"])
    try:
        cache = tmp_path / "cache"
        cache.mkdir(mode=0o700)
        ancient = plant(cache, "pyro/checkout/2020-01-01T00:00:00Z")
        in_range = plant(cache, f"pyro/checkout/{windows(2)[0]}")
        unknown = plant(cache, "pyro/vanished/2020-01-01T00:00:00Z")
        m = mount({"cache_dir": str(cache), "retention": "1d", "clusters": {"pyro": {
            "kind": "pyroscope", "url": fake.url, "tenant": "anonymous", "window": "1h",
            "range": "2h"}}})
        os.listdir(m.path / "pyro/checkout")
        assert not ancient.exists() and not unknown.exists()
        assert in_range.exists()
    finally:
        fake.stop()


def test_retention_runs_while_mounted(goapp, mount, tmp_path):
    """Rounds age out while the mount runs, including those of a service
    nobody reads and those left by an earlier mount."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]},
                          "b": {"targets": [app.base], "profiles": ["heap"]}},
                         retention=3, latest_ttl=1))
    (m.path / "local/a/latest/heap.pb.gz").read_bytes()
    (m.path / "local/b/latest/heap.pb.gz").read_bytes()
    rounds = lambda s: [d for d in os.listdir(m.cache / "local" / s) if d[0].isdigit()]
    assert rounds("a") and rounds("b")
    wait_for(lambda: not rounds("b"), timeout=10, what="b's round to age out")
    assert not rounds("a")


def test_api_cluster_listed_before_any_discovery(mount):
    """An API cluster whose discovery fails has no services yet: listing it
    and .status.json work (memcpy(NULL, 0) before: UB, caught by UBSan)."""
    import json
    from conftest import free_port
    url = f"http://127.0.0.1:{free_port()}"
    m = mount({"clusters": {"pyro": {"kind": "pyroscope", "url": url, "timeout": 1},
                            "parca": {"kind": "parca", "url": url, "timeout": 1}}})
    assert json.loads((m.path / ".status.json").read_text())["targets"] == []
    assert os.listdir(m.path / "pyro") == [] and os.listdir(m.path / "parca") == []
    assert json.loads((m.path / ".status.json").read_text())["targets"] == []
    assert len(m.error_lines()) == 2  # one discovery failure each


def test_frozen_rounds_are_kernel_cached_and_forgotten_when_removed(goapp, mount):
    """A frozen round's directory and files are cached by the kernel (stat
    again costs no request), and when retention removes the round the
    kernel forgets it: it is gone from stat at once, not a day later."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["heap"]}},
                         retention=3, latest_ttl=1), extra_args=["-d"])
    (m.path / "local/a/latest/heap.pb.gz").read_bytes()
    [rnd] = [d for d in os.listdir(m.path / "local/a") if d[0].isdigit()]
    time.sleep(1.2)  # latest moves on: the round is frozen
    f = m.path / "local/a" / rnd / "heap.pb.gz"
    # the round's nodes: a FUSE inode number is the node id
    ids = {os.stat(f).st_ino, os.stat(f.parent).st_ino}

    def getattrs():
        return sum(m.log().count(f"opcode: GETATTR (3), nodeid: {i},") for i in ids)
    before = getattrs()
    for _ in range(20):
        os.stat(f)
    assert getattrs() == before  # from the kernel's cache
    wait_for(lambda: not (m.cache / "local/a" / rnd).exists(), timeout=10, what="retention")
    wait_for(lambda: not os.path.exists(f), timeout=2, what="the kernel to forget the round")
