"""No stall, no hang, no use-after-free: slow targets against many readers."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import config_for, pprof_top, wait_for


def timed(fn):
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def test_slow_profile_does_not_stall_its_directory(goapp, mount):
    """While latest/cpu.pb.gz is taken (4 s), stat and cat of latest/heap.pb.gz
    in the same directory answer at once (the kernel serializes lookups per
    directory, and libfuse 3.14 never grants parallel ones)."""
    app = goapp()
    m = mount(config_for({"a": [app.base]}, cpu_seconds=4))
    lat = m.path / "local/a/latest"
    th = threading.Thread(target=lambda: (lat / "cpu.pb.gz").read_bytes())
    th.start()
    time.sleep(0.5)
    assert timed(lambda: os.stat(lat / "heap.pb.gz")) < 1.0
    assert timed(lambda: (lat / "goroutine.pb.gz").read_bytes()) < 1.0
    assert timed(lambda: os.stat(lat / "heap.pb.gz")) < 1.0
    th.join(10)
    assert m.error_lines() == []


def test_many_waiting_readers_do_not_stall_others(goapp, mount):
    """70 readers of slow targets wait without holding FUSE threads:
    .status.json and a frozen snapshot still answer at once."""
    app = goapp()
    slow = {f"s{i}": {"targets": [app.fault("delay4000")], "profiles": ["heap"], "timeout": 8}
            for i in range(70)}
    slow["fine"] = {"targets": [app.base], "profiles": ["heap"]}
    m = mount(config_for(slow))
    (m.path / "local/fine/latest/heap.pb.gz").read_bytes()
    [rnd] = [d for d in os.listdir(m.path / "local/fine") if d[0].isdigit()]
    errors = []

    def reader(i):
        try:
            (m.path / f"local/s{i}/latest/heap.pb.gz").read_bytes()
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(70)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert timed(lambda: json.loads((m.path / ".status.json").read_text())) < 0.5
    assert timed(lambda: (m.path / "local/fine" / rnd / "heap.pb.gz").read_bytes()) < 0.5
    assert timed(lambda: os.listdir(m.path / "local")) < 0.5
    for t in threads:
        t.join(15)
    assert errors == [] and m.error_lines() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupted_reader_returns_at_once(goapp, mount, sig):
    app = goapp()
    m = mount(config_for({"stuck": {"targets": [app.fault("slow")], "timeout": 20}}))
    p = subprocess.Popen(["cat", str(m.path / "local/stuck/latest/heap.pb.gz")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.7)
    assert p.poll() is None  # still waiting for the fetch
    t0 = time.monotonic()
    p.send_signal(sig)
    p.wait(timeout=10)
    assert time.monotonic() - t0 < 1.5, "the interrupted request waited for the fetch"
    # the mount is fine afterwards
    assert json.loads((m.path / ".status.json").read_text())["targets"]


def test_latest_ttl_shorter_than_fetch_is_one_fetch_per_access(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.fault("delay2500")], "profiles": ["heap"]}},
                         latest_ttl=1))
    out = tmp_path / "heap.pb.gz"
    subprocess.run(["cp", str(m.path / "local/a/latest/heap.pb.gz"), str(out)], check=True)
    pprof_top(out)
    doc = json.loads((m.path / ".status.json").read_text())
    [t] = doc["targets"]
    assert t["fetches"] == 1, t


def test_readers_racing_retention_and_short_ttl(goapp, mount, tmp_path):
    """Retention of 1 s, latest of 1 s and fetches of 1.2 s under 24 readers:
    rounds are freed while others are waited on (a use-after-free before;
    the ASan build of this test reports it)."""
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.fault("delay1200")],
                                "profiles": ["heap", "goroutine"]}},
                         latest_ttl=1, retention=1))
    stop = time.monotonic() + 6
    errors = []

    def reader(i):
        name = ["heap", "goroutine"][i % 2]
        while time.monotonic() < stop:
            try:
                if i % 3 == 0:
                    os.listdir(m.path / "local/a")
                    (m.path / f"local/a/merged/24h/{name}.pb.gz").read_bytes()
                else:
                    (m.path / f"local/a/latest/{name}.pb.gz").read_bytes()
            except FileNotFoundError:
                pass  # a merged range whose rounds retention just removed
            except OSError as e:
                errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert m.proc.poll() is None, m.log()[-2000:]
    assert errors == [], errors[:3]


def test_max_connections_queues_the_rest_in_order(goapp, mount):
    """max_connections bounds transfers in flight (memory, sockets); the
    others wait their turn and all complete."""
    app = goapp()
    svcs = {f"s{i}": {"targets": [app.fault("delay400")], "profiles": ["heap"]} for i in range(6)}
    m = mount(config_for(svcs, max_connections=2, timeout=10))
    t0 = time.monotonic()
    os.listdir(m.path / "local")  # starts all six
    for i in range(6):
        assert (m.path / f"local/s{i}/latest/heap.pb.gz").read_bytes()[:2] == b"\x1f\x8b"
    took = time.monotonic() - t0
    assert 1.1 < took < 5, took  # three rounds of two, 0.4 s each
    assert m.error_lines() == []
