"""merged/<range>/ tells the truth: each sample type merged by what its
numbers mean, checked against a workload the test controls (the sample
app's -alloc-rate, -live-heap, -goroutines and -contend-rate), not against
the code's own arithmetic.

- cumulative types (alloc_*, contentions, delay, threadcreate): per target
  the differences between consecutive snapshots; a restart counts the
  snapshot after it whole;
- gauges (inuse_*, goroutine): per target the mean of its snapshots;
- cpu: summed.
Targets add up."""
import os
import re
import subprocess
import time

import pytest

from conftest import GoApp, config_for, free_port, go_env, pprof_top, wait_for
from fakes.wire import Profile

MIB = 1 << 20
SNAPS = ["heap", "allocs", "goroutine", "block", "mutex"]


def rounds(m, svc="api"):
    """The rounds stored (from the cache: listing the service after
    latest_ttl would start one)."""
    return sorted(d for d in os.listdir(m.cache / "local" / svc) if d[0].isdigit())


def take_rounds(m, n, ttl, svc="api"):
    """n snapshot rounds of every profile, latest_ttl apart: `cat` of each
    latest/ file after the ttl starts a round and waits for its file."""
    latest = m.path / "local" / svc / "latest"
    for k in range(n):
        if k:
            time.sleep(ttl + 0.1)
        files = [str(latest / f) for f in os.listdir(latest)]
        subprocess.run(["cat", *files], check=True, stdout=subprocess.DEVNULL)


def snap(svc, rnd, name):
    return Profile((svc / rnd / f"{name}.pb.gz").read_bytes())


def merged(svc, name, tmp_path, rng="24h"):
    """cp of merged/<rng>/<name>.pb.gz, as a user exports it; go tool pprof
    must read it."""
    out = tmp_path / f"merged-{rng}-{name}.pb.gz"
    subprocess.run(["cp", str(svc / "merged" / rng / f"{name}.pb.gz"), str(out)], check=True)
    pprof_top(out)
    return Profile(out.read_bytes())


def span_s(svc, rs, name):
    """Seconds between the first and last snapshot of a profile (the times
    the Go runtime wrote into them)."""
    a, b = snap(svc, rs[0], name), snap(svc, rs[-1], name)
    return (b.time_nanos - a.time_nanos) / 1e9


def within(got, want, tol):
    assert want > 0 and abs(got - want) <= tol * want, f"got {got}, want {want} +-{tol:.0%}"


def test_each_type_by_what_its_numbers_mean(goapp, mount, tmp_path):
    rate, live, parked, contend = 4, 8, 7, 50
    app = goapp("-alloc-rate", str(rate), "-live-heap", str(live), "-goroutines", str(parked),
                "-contend-rate", str(contend))
    m = mount(config_for({"api": {"targets": [app.base], "profiles": SNAPS}}, latest_ttl=2))
    svc = m.path / "local/api"
    take_rounds(m, 5, 2)
    rs = rounds(m)
    assert len(rs) == 5

    allocs = merged(svc, "allocs", tmp_path)
    span = span_s(svc, rs, "allocs")
    assert span > 6
    # what the process allocated between the first and the last snapshot,
    # not the sum of 5 totals since it started
    within(allocs.total("alloc_space", "main.allocSteady"), rate * MIB * span, 0.15)
    newest = snap(svc, rs[-1], "allocs")
    assert allocs.total("alloc_space") < newest.total("alloc_space")
    # the result says what it holds: from the first snapshot, for the span
    first = snap(svc, rs[0], "allocs")
    assert allocs.time_nanos == first.time_nanos
    assert allocs.duration_nanos == newest.time_nanos - first.time_nanos
    text = "\n".join(allocs.comments)
    assert "5 snapshots of 1 target" in text, text
    assert "alloc_objects, alloc_space: totals since each process started" in text, text
    assert "inuse_objects, inuse_space: values at an instant" in text, text
    assert "differences begin at its first snapshot" in text, text
    r = subprocess.run(["go", "tool", "pprof", "-comments", str(tmp_path / "merged-24h-allocs.pb.gz")],
                       capture_output=True, text=True, env=go_env(), timeout=60)
    assert r.returncode == 0 and "5 snapshots of 1 target" in r.stdout, r.stderr

    # the live heap, once (the mean), not 5 times
    heap = merged(svc, "heap", tmp_path)
    within(heap.total("inuse_space", "main.holdLive"), live * MIB, 0.15)
    # the goroutines parked, as many as there are
    g = merged(svc, "goroutine", tmp_path)
    assert abs(g.total("goroutine", "main.parkedKnown") - parked) <= 1
    for rnd in rs:
        assert snap(svc, rnd, "goroutine").total("goroutine", "main.parkedKnown") == parked
    # contentions at the rate the app makes them, over the span
    mutex = merged(svc, "mutex", tmp_path)
    within(mutex.total("contentions", "main.contendKnown"),
           contend * span_s(svc, rs, "mutex"), 0.2)
    block = merged(svc, "block", tmp_path)
    within(block.total("contentions", "main.contendKnown.func1"),
           contend * span_s(svc, rs, "block"), 0.2)
    for p in (allocs, heap, g, mutex, block):
        assert all(v >= 0 for _, vs in p.samples for v in vs)


def test_merged_allocs_equals_go_tool_pprof_diff_base(goapp, mount, tmp_path):
    """One target, no restart: the differences add up to LAST - FIRST, as
    `go tool pprof -proto -diff_base FIRST LAST` totals it."""
    app = goapp("-alloc-rate", "2")
    m = mount(config_for({"api": {"targets": [app.base], "profiles": ["allocs"]}}, latest_ttl=1))
    svc = m.path / "local/api"
    take_rounds(m, 4, 1)
    rs = rounds(m)
    ours = merged(svc, "allocs", tmp_path)
    diff = tmp_path / "diff.pb.gz"
    r = subprocess.run(["go", "tool", "pprof", "-proto", "-diff_base",
                        str(svc / rs[0] / "allocs.pb.gz"), str(svc / rs[-1] / "allocs.pb.gz")],
                       capture_output=True, env=go_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    diff.write_bytes(r.stdout)
    theirs = Profile(diff.read_bytes())
    for t in ("alloc_objects", "alloc_space"):
        assert ours.total(t) == theirs.total(t) > 0, t


def test_a_restart_counts_what_the_new_process_did(goapp_bin, mount, tmp_path):
    """A target killed and started again on its port mid-range: nothing
    negative, and the allocations are those of the time it was alive."""
    rate, port = 4, free_port()
    args = ("-addr", f"127.0.0.1:{port}", "-alloc-rate", str(rate))
    app = GoApp(goapp_bin, tmp_path, *args)
    try:
        m = mount(config_for({"api": {"targets": [app.base], "profiles": ["allocs"]}},
                             latest_ttl=1))
        svc = m.path / "local/api"
        take_rounds(m, 3, 1)
        app.stop()
        killed = time.time()
        app = GoApp(goapp_bin, tmp_path, *args)
        started = time.time()
        time.sleep(1.1)
        take_rounds(m, 3, 1)
        rs = rounds(m)
        assert len(rs) >= 6
        ours = merged(svc, "allocs", tmp_path)
        assert all(v >= 0 for _, vs in ours.samples for v in vs)
        t = [snap(svc, r, "allocs").time_nanos / 1e9 for r in rs]
        alive = (killed - t[0]) + (t[-1] - started)
        within(ours.total("alloc_space", "main.allocSteady"), rate * MIB * alive, 0.2)
        assert "1 restart" in "\n".join(ours.comments)
    finally:
        app.stop()


def test_targets_add_up(goapp, mount, tmp_path):
    """Two targets: their gauges add up, and so do their differences."""
    a = goapp("-alloc-rate", "2", "-live-heap", "4", "-goroutines", "3")
    b = goapp("-alloc-rate", "3", "-live-heap", "12", "-goroutines", "5")
    m = mount(config_for({"api": {"targets": [{"url": a.base, "name": "a"},
                                              {"url": b.base, "name": "b"}],
                                  "profiles": ["heap", "goroutine"]}}, latest_ttl=2))
    svc = m.path / "local/api"
    take_rounds(m, 4, 2)
    rs = rounds(m)
    heap = merged(svc, "heap", tmp_path)
    within(heap.total("inuse_space", "main.holdLive"), 16 * MIB, 0.15)
    spans = [span_s(svc, rs, f"heap.{n}") for n in ("a", "b")]
    within(heap.total("alloc_space", "main.allocSteady"),
           (2 * spans[0] + 3 * spans[1]) * MIB, 0.15)
    g = merged(svc, "goroutine", tmp_path)
    assert abs(g.total("goroutine", "main.parkedKnown") - 8) <= 1
    assert "8 snapshots of 2 targets" in "\n".join(heap.comments)


def test_cpu_is_summed(goapp, mount, tmp_path):
    """cpu is work in each snapshot's window: the merge is the sum, as
    `go tool pprof -proto` merges."""
    app = goapp()
    m = mount(config_for({"api": {"targets": [app.base], "profiles": ["cpu"]}}, latest_ttl=1))
    svc = m.path / "local/api"
    take_rounds(m, 3, 1)
    rs = rounds(m)
    ours = merged(svc, "cpu", tmp_path)
    want = sum(snap(svc, r, "cpu").total("cpu") for r in rs)
    assert ours.total("cpu") == want > 0
    assert "samples, cpu: work in each snapshot's window, summed" in "\n".join(ours.comments)


def test_a_range_starts_at_the_snapshot_before_it(goapp, mount, tmp_path):
    """merged/7s/ holds the snapshots of the last 7 s, its first difference
    taken from the snapshot just before them: adjacent ranges neither count
    anything twice nor miss what happened between them."""
    rate = 4
    app = goapp("-alloc-rate", str(rate))
    m = mount(config_for({"api": {"targets": [app.base], "profiles": ["allocs"]}},
                         latest_ttl=2, merged=["7s", "24h"]))
    svc = m.path / "local/api"
    take_rounds(m, 5, 2)
    rs = rounds(m)
    p = merged(svc, "allocs", tmp_path, "7s")
    text = "\n".join(p.comments)
    n = int(re.search(r"(\d+) snapshots? of 1 target", text).group(1))
    assert 1 <= n < len(rs), text
    base = snap(svc, rs[len(rs) - n - 1], "allocs")
    assert p.time_nanos == base.time_nanos  # covered from the snapshot before the range
    assert p.duration_nanos == snap(svc, rs[-1], "allocs").time_nanos - base.time_nanos
    assert "differences begin" not in text, text
    within(p.total("alloc_space", "main.allocSteady"), rate * MIB * p.duration_nanos / 1e9, 0.15)
