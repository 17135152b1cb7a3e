"""merged/<range>/: the snapshots of a service merged in C (what each type's
numbers mean: test_merged_truth.py)."""
import json
import os
import subprocess
import time

import pytest

from conftest import config_for, go_env, pprof_top, pprof_top_nodes


def snapshot_files(svc_dir, name):
    return sorted(svc_dir / d / f for d in os.listdir(svc_dir) if d[0].isdigit()
                  for f in os.listdir(svc_dir / d) if f.startswith(name + "."))


def pprof_merge(files, out):
    r = subprocess.run(["go", "tool", "pprof", "-proto", *map(str, files)], capture_output=True,
                       env=go_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    out.write_bytes(r.stdout)
    return out


def test_merged_cpu_equals_pprof_merge(goapp, mount, tmp_path):
    """cpu is work in each snapshot's window: merged/ sums it, as `go tool
    pprof -proto a b ...` merges (other types: test_merged_truth.py)."""
    a, b = goapp(), goapp()
    m = mount(config_for({"api": {"targets": [{"url": a.base, "name": "a"},
                                              {"url": b.base, "name": "b"}],
                                  "profiles": ["cpu"]}}, latest_ttl=3))
    svc = m.path / "local/api"
    os.listdir(svc / "latest")
    time.sleep(3.1)
    os.listdir(svc / "latest")  # a second snapshot round; listing svc within 3 s starts none
    inputs = snapshot_files(svc, "cpu")
    assert len(inputs) == 4
    assert os.listdir(svc / "merged") == ["24h"]
    assert os.listdir(svc / "merged/24h") == ["cpu.pb.gz", "default.pgo"]
    ours = tmp_path / "ours.pb.gz"
    ours.write_bytes((svc / "merged/24h/cpu.pb.gz").read_bytes())
    theirs = pprof_merge(inputs, tmp_path / "theirs.pb.gz")
    assert pprof_top_nodes(ours) == pprof_top_nodes(theirs)
    st = os.stat(svc / "merged/24h/cpu.pb.gz")
    assert st.st_size == ours.stat().st_size
    assert st.st_mtime == max(os.stat(f).st_mtime for f in inputs)
    # stable while no new snapshot arrives: same bytes, size, mtime
    assert (svc / "merged/24h/cpu.pb.gz").read_bytes() == ours.read_bytes()


def test_merged_cpu_is_a_pgo_profile(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"api": {"targets": [app.base], "profiles": ["cpu"]}}))
    (m.path / "local/api/latest/cpu.pb.gz").read_bytes()
    pgo = tmp_path / "default.pgo"
    pgo.write_bytes((m.path / "local/api/merged/24h/cpu.pb.gz").read_bytes())
    top = pprof_top(pgo)
    assert "Type: cpu" in top and "main.burnCPU" in top


def test_merged_updates_when_a_snapshot_arrives(goapp, mount):
    app = goapp()
    m = mount(config_for({"api": {"targets": [app.base], "profiles": ["goroutine"]}},
                         latest_ttl=1))
    f = m.path / "local/api/merged/24h/goroutine.pb.gz"
    st1 = os.stat(f)  # a fresh mount: the stat took the first snapshot
    assert os.listdir(m.path / "local/api/merged/24h") == ["goroutine.pb.gz"]
    time.sleep(2.1)
    (m.path / "local/api/latest/goroutine.pb.gz").read_bytes()
    time.sleep(1.1)  # attribute cache
    st2 = os.stat(f)
    assert st2.st_mtime > st1.st_mtime


def test_mismatched_sample_types_is_eio_with_reason(goapp, mount):
    app = goapp()
    m = mount(config_for({"api": {"targets": [{"url": app.base, "name": "real"},
                                              {"url": app.fault("swap"), "name": "swapped"}],
                                  "profiles": ["heap"]}}))
    os.listdir(m.path / "local/api/latest")
    with pytest.raises(OSError) as e:
        (m.path / "local/api/merged/24h/heap.pb.gz").read_bytes()
    assert e.value.errno == 5
    errs = m.error_lines()
    assert len(errs) == 1 and "mismatched sample types" in errs[0], errs
    assert "alloc_objects/count" in errs[0] and "goroutine/count" in errs[0]


def test_status_json(goapp, mount):
    app = goapp()
    m = mount(config_for({"ok": {"targets": [app.base], "profiles": ["heap"]},
                          "bad": {"targets": [app.fault("status500")], "profiles": ["heap"]}},
                         retry_after=60))
    assert ".status.json" not in os.listdir(m.path)  # exports of the mount stay stable
    (m.path / "local/ok/latest/heap.pb.gz").read_bytes()
    with pytest.raises(OSError):
        (m.path / "local/bad/latest/heap.pb.gz").read_bytes()
    raw = (m.path / ".status.json").read_bytes()
    doc = json.loads(raw)
    assert os.stat(m.path / ".status.json").st_size == len(raw)
    by = {t["service"]: t for t in doc["targets"]}
    assert by["ok"]["fetches"] == 1 and by["ok"]["failures"] == 0 and by["ok"]["bytes"] > 0
    assert by["ok"]["last_ok"] and by["ok"]["last_error"] is None
    assert by["bad"]["failures"] == 1 and by["bad"]["last_ok"] is None
    assert by["bad"]["last_error"].startswith("HTTP 500: Could not enable CPU profiling")
    assert by["bad"]["url"] == app.fault("status500")
    assert doc["cache_bytes"] == by["ok"]["bytes"]


def test_one_snapshot_merge_is_that_snapshot_and_a_few_bytes(goapp, mount, tmp_path):
    """A range with one snapshot (the common case after a round) keeps no
    file of its own: goroutine and cpu (values unchanged) are the snapshot's
    bytes then a gzip member saying what they hold; block (every value
    cumulative: nothing yet) a profile of its types alone. Read whole
    (cp), in odd pieces (dd bs=37, across the seam) and by go tool pprof,
    they are the same file."""
    from fakes.wire import Profile
    app = goapp("-goroutines", "20")
    m = mount(config_for({"a": {"targets": [app.base],
                                "profiles": ["goroutine", "cpu", "block"]}}, latest_ttl=3600))
    svc = m.path / "local/a"
    snap = {p: (svc / "latest" / f"{p}.pb.gz").read_bytes() for p in ("goroutine", "cpu", "block")}
    for p in ("goroutine", "cpu", "block"):
        f = svc / "merged/24h" / f"{p}.pb.gz"
        out = tmp_path / f"{p}.pb.gz"
        subprocess.run(["cp", str(f), str(out)], check=True)
        data = out.read_bytes()
        assert os.stat(f).st_size == len(data)
        r = subprocess.run(["dd", f"if={f}", "bs=37", "status=none"], capture_output=True,
                           check=True)
        assert r.stdout == data, p
        merged, one = Profile(data), Profile(snap[p])
        if p == "block":
            assert not data.startswith(snap[p]) and merged.samples == []
            assert merged.types == one.types
        else:
            assert data.startswith(snap[p]) and len(data) < len(snap[p]) + 1024, p
            typ = "goroutine" if p == "goroutine" else "samples"
            assert merged.total(typ) == one.total(typ) > 0, p
        assert "1 snapshot of 1 target" in "\n".join(merged.comments), merged.comments
        pprof_top(out)  # go tool pprof opens it
        r = subprocess.run(["go", "tool", "pprof", "-comments", str(out)], capture_output=True,
                           text=True, env=go_env(), timeout=60)
        assert r.returncode == 0 and "1 snapshot of 1 target" in r.stdout, r.stdout + r.stderr
