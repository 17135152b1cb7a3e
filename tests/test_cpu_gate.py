"""One cpu profile per process at a time: Go's runtime takes one at once
(a second /debug/pprof/profile answers 500 "cpu profiling already in use"),
so two services pointing at one process take theirs one after the other."""
import threading
import time

from conftest import config_for, pprof_top


def read_all(paths):
    """Read every path at once; (bytes or OSError per path, seconds taken)."""
    out = [None] * len(paths)

    def rd(i):
        try:
            out[i] = paths[i].read_bytes()
        except OSError as e:
            out[i] = e

    t0 = time.monotonic()
    threads = [threading.Thread(target=rd, args=(i,)) for i in range(len(paths))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, time.monotonic() - t0


def test_two_services_on_one_process_take_cpu_in_turn(goapp, mount, tmp_path):
    """Three services on one Go process (two on other URL paths of the same
    port): each cpu.pb.gz is served, one after another, nothing fails."""
    app = goapp()
    m = mount(config_for({"a": [app.base], "b": [app.base], "c": [app.fault("delay1")]},
                         cpu_seconds=2, timeout=3), extra_args=["-d"])
    paths = [m.path / f"local/{s}/latest/cpu.pb.gz" for s in "abc"]
    out, took = read_all(paths)
    for p, o in zip(paths, out):
        assert isinstance(o, bytes), f"{p}: {o}; {m.error_lines()}"
        f = tmp_path / f"{p.parent.parent.name}.pb.gz"
        f.write_bytes(o)
        assert "burnCPU" in pprof_top(f)
    assert took >= 3 * 2, f"three 2 s cpu profiles of one process overlapped ({took:.1f} s)"
    assert m.error_lines() == []
    assert m.log().count("waits: another one of pprof 127.0.0.1:%d" % app.port) == 2


def test_cpu_of_different_processes_runs_at_once(goapp, mount):
    """The gate is per process: cpu profiles of two Go programs overlap."""
    a, b = goapp(), goapp()
    m = mount(config_for({"a": [a.base], "b": [b.base]}, cpu_seconds=2, timeout=3))
    out, took = read_all([m.path / f"local/{s}/latest/cpu.pb.gz" for s in "ab"])
    assert all(isinstance(o, bytes) for o in out), (out, m.error_lines())
    assert took < 3.5, f"cpu profiles of two processes were serialized ({took:.1f} s)"


def test_other_profiles_do_not_wait_for_a_queued_cpu(goapp, mount):
    """While b's cpu profile queues behind a's, b's heap answers at once."""
    app = goapp()
    m = mount(config_for({"a": [app.base], "b": [app.base]}, cpu_seconds=3, timeout=3))
    ta = threading.Thread(target=(m.path / "local/a/latest/cpu.pb.gz").read_bytes)
    tb = threading.Thread(target=(m.path / "local/b/latest/cpu.pb.gz").read_bytes)
    ta.start()
    time.sleep(0.3)
    tb.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    assert b"\x1f\x8b" == (m.path / "local/b/latest/heap.pb.gz").read_bytes()[:2]
    assert time.monotonic() - t0 < 1.0
    ta.join(20)
    tb.join(20)
    assert m.error_lines() == []


def test_unmount_with_a_cpu_profile_queued(goapp, mount):
    """SIGTERM while one cpu profile is taken and another queues behind it:
    the daemon exits 0 within its fetch timeout, readers get an error, the
    queued fetch never starts (and, on build-asan, nothing leaks)."""
    import signal
    app = goapp()
    m = mount(config_for({"a": [app.base], "b": [app.base], "c": [app.base]},
                         cpu_seconds=3, timeout=3), extra_args=["-d"])
    paths = [m.path / f"local/{s}/latest/cpu.pb.gz" for s in "abc"]
    res = []
    threads = [threading.Thread(target=lambda p=p: res.append(read_all([p])[0][0]))
               for p in paths]
    for t in threads:
        t.start()
    time.sleep(1.0)
    assert m.log().count("waits: another one of") == 2
    t0 = time.monotonic()
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(timeout=15) == 0
    assert time.monotonic() - t0 < 8
    for t in threads:
        t.join(10)
    assert len(res) == 3 and all(isinstance(r, OSError) for r in res), res
    # only the first was ever asked of the target
    assert m.log().count("/debug/pprof/profile failed") <= 1
    assert m.log().count(f"from pprof 127.0.0.1:{app.port} failed: unmounting; it was queued") == 2
