"""PGO: every cpu file the mount serves drives a real `go build -pgo` (the
shared Go 1.21.12), merged/<range>/default.pgo is trimmed as Pyroscope's
`profilecli query go-pgo` does and makes the same inlining decisions, and
merged/ is there on a fresh mount."""
import errno
import gzip
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import (BUILD, GOAPP_SRC, PROFILES, GoApp, assert_fetch_fails, config_for,
                      free_port, go_build_pgo, go_env, pprof_top, pprof_top_nodes, wait_for,
                      windows)
from fakes import wire
from fakes.parca import Fake as ParcaFake
from fakes.pyroscope import Fake as PyroFake

ALL = sorted([f"{p}.pb.gz" for p in PROFILES] + ["default.pgo"])


def stacks(gz_bytes):
    """[(location ids leaf first, label count)] of a profile, and its
    locations {id: (address, [(function id, line)])}."""
    f = wire.decode(gzip.decompress(gz_bytes))
    samples = []
    for s in f.get(2, []):
        sf = wire.decode(s)
        ids = []
        for packed in sf.get(1, []):
            if isinstance(packed, int):
                ids.append(packed)
            else:
                i = 0
                while i < len(packed):
                    v, i = wire._read_varint(packed, i)
                    ids.append(v)
        samples.append((ids, len(sf.get(3, []))))
    locs = {}
    for l in f.get(4, []):
        lf = wire.decode(l)
        lines = [(wire.decode(ln).get(1, [0])[0], wire.decode(ln).get(2, [0])[0])
                 for ln in lf.get(4, [])]
        locs[lf[1][0]] = (lf.get(3, [0])[0], lines)
    return samples, locs


def test_fresh_mount_lists_merged_files(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"api": [app.base]}))
    rng = m.path / "local/api/merged/24h"
    t0 = time.monotonic()
    assert sorted(os.listdir(rng)) == ALL  # the very first access of the mount
    assert time.monotonic() - t0 < 15
    for name in ALL:
        assert os.stat(rng / name).st_size > 0
    out = tmp_path / "default.pgo"
    out.write_bytes((rng / "default.pgo").read_bytes())
    assert "Type: cpu" in pprof_top(out)
    assert m.error_lines() == []


def test_fresh_mount_cp_merged_cpu_takes_a_snapshot(goapp, mount, tmp_path):
    """README's PGO command is the first thing done with a fresh mount."""
    app = goapp()
    m = mount(config_for({"api": [app.base]}))
    out = tmp_path / "default.pgo"
    shutil.copy(m.path / "local/api/merged/24h/cpu.pb.gz", out)
    assert "Type: cpu" in pprof_top(out)
    # it took the snapshot it merged: one round, whose cpu file it sums
    rounds = [d for d in os.listdir(m.path / "local/api") if d[0].isdigit()]
    assert len(rounds) == 1
    assert pprof_top_nodes(m.path / "local/api" / rounds[0] / "cpu.pb.gz") == \
        pprof_top_nodes(out)
    pgo = tmp_path / "trimmed.pgo"
    shutil.copy(m.path / "local/api/merged/24h/default.pgo", pgo)
    assert "Type: cpu" in pprof_top(pgo)
    assert m.error_lines() == []


def test_fresh_mount_merged_of_a_down_target_is_eio(mount):
    dead = f"http://127.0.0.1:{free_port()}/debug/pprof"
    m = mount(config_for({"api": [dead]}))
    assert_fetch_fails(m, "local/api/merged/24h/cpu.pb.gz", dead + "/profile", "cpu.pb.gz")
    # a listing shows no file that does not exist
    assert os.listdir(m.path / "local/api/merged/24h") == []


def test_every_cpu_file_drives_go_build_pgo(go121, goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"api": [app.base]}, latest_ttl="1s"))
    svc = m.path / "local/api"
    first = (svc / "latest/cpu.pb.gz").read_bytes()
    time.sleep(1.5)
    latest = (svc / "latest/cpu.pb.gz").read_bytes()
    rounds = sorted(d for d in os.listdir(svc) if d[0].isdigit())
    assert len(rounds) == 2
    # <time>/ files are the bytes latest/ served
    assert (svc / rounds[0] / "cpu.pb.gz").read_bytes() == first
    assert (svc / rounds[1] / "cpu.pb.gz").read_bytes() == latest
    files = {"latest": latest, "merged": (svc / "merged/24h/cpu.pb.gz").read_bytes(),
             "pgo": (svc / "merged/24h/default.pgo").read_bytes()}
    paths = {}
    for k, b in files.items():
        paths[k] = tmp_path / f"{k}.pprof"
        paths[k].write_bytes(b)
    go_build_pgo(go121, paths["latest"], tmp_path / "app-latest")
    full = go_build_pgo(go121, paths["merged"], tmp_path / "app-merged", debug=True)
    trimmed = go_build_pgo(go121, paths["pgo"], tmp_path / "app-pgo", debug=True)
    # the profile had decisions to make, and the trimmed one makes the same
    assert any(l.startswith("hot-node enabled") for l in full), full[:5]
    assert sorted(trimmed) == sorted(full)
    # trimmed as profilecli's go-pgo: 5 leaf locations, callees aggregated,
    # no labels; smaller than the merge of the same snapshots
    assert len(files["pgo"]) < len(files["merged"])
    full_samples, _ = stacks(files["merged"])
    samples, locs = stacks(files["pgo"])
    assert max(len(ids) for ids, _ in full_samples) > 5
    assert samples and max(len(ids) for ids, _ in samples) <= 5
    assert all(n == 0 for _, n in samples)
    for ids, _ in samples:
        addr, lines = locs[ids[0]]
        if lines:
            assert addr == 0 and lines[0][1] == 0
    assert m.error_lines() == []


def test_api_windows_drive_go_build_pgo(go121, mount, tmp_path):
    pyro, parca = PyroFake(["checkout"]), ParcaFake(["api"])
    try:
        m = mount({"retry_after": 60, "clusters": {
            "pyro": {"kind": "pyroscope", "url": pyro.url, "window": "1h", "range": "2h"},
            "parca": {"kind": "parca", "url": parca.url, "window": "1h", "range": "2h"}}})
        w = windows(2)[1]
        for cluster, svc in (("pyro", "checkout"), ("parca", "api")):
            p = tmp_path / f"{cluster}.pprof"
            p.write_bytes((m.path / cluster / svc / w / "cpu.pb.gz").read_bytes())
            go_build_pgo(go121, p, tmp_path / f"app-{cluster}")
            rng = m.path / cluster / svc / "merged/24h"
            assert "default.pgo" in os.listdir(rng)
            pgo = tmp_path / f"{cluster}.pgo"
            pgo.write_bytes((rng / "default.pgo").read_bytes())
            assert "Type: cpu" in pprof_top(pgo)
        assert m.error_lines() == []
    finally:
        pyro.stop()
        parca.stop()


@pytest.fixture(scope="session")
def goapp_go119():
    """The sample app built by Debian's Go 1.19: cpu profiles without
    Function.start_line, as any program built by Go < 1.20 serves."""
    out = BUILD / "goapp-go119"
    if not out.exists() or out.stat().st_mtime < GOAPP_SRC.stat().st_mtime:
        subprocess.run(["/usr/lib/go-1.19/bin/go", "build", "-o", str(out), str(GOAPP_SRC)],
                       check=True, env=go_env(), cwd=GOAPP_SRC.parent)
    return out


def test_cpu_without_start_line_is_said_and_left_out_of_default_pgo(
        go121, goapp, goapp_go119, mount, tmp_path):
    old = GoApp(goapp_go119, tmp_path)
    try:
        new = goapp()
        m = mount(config_for({"old": [old.base], "mixed": [old.base, new.base]}))
        # the premise: Go's PGO rejects such a profile
        cpu = tmp_path / "old.pprof"
        cpu.write_bytes((m.path / "local/old/latest/cpu.pb.gz").read_bytes())
        r = subprocess.run([str(go121), "build", f"-pgo={cpu}", "-o", str(tmp_path / "x"),
                            str(GOAPP_SRC)], capture_output=True, text=True, env=go_env(),
                           cwd=GOAPP_SRC.parent, timeout=300)
        assert r.returncode != 0 and "missing Function.start_line" in r.stderr, r.stderr
        # no default.pgo from it: not listed, not there
        rng = m.path / "local/old/merged/24h"
        assert "cpu.pb.gz" in os.listdir(rng) and "default.pgo" not in os.listdir(rng)
        with pytest.raises(OSError) as e:
            os.stat(rng / "default.pgo")
        assert e.value.errno == errno.ENOENT
        # a service with an old and a new target: default.pgo of the new one only
        assert len(os.listdir(m.path / "local/mixed/latest")) == 14  # both targets fetched
        mixed = m.path / "local/mixed/merged/24h"
        assert "default.pgo" in os.listdir(mixed)
        pgo = tmp_path / "mixed.pgo"
        pgo.write_bytes((mixed / "default.pgo").read_bytes())
        go_build_pgo(go121, pgo, tmp_path / "app-mixed")
        # said once per target, in the log and in .status.json
        warn = [l for l in m.log().splitlines() if "no Function.start_line" in l]
        assert any("local/old cpu.pb.gz" in l and old.base in l and "Go < 1.20" in l
                   for l in warn), warn
        assert any("1 of 2 cpu snapshots" in l and "mixed" in l for l in warn), warn
        st = json.loads((m.path / ".status.json").read_text())["targets"]
        pgo_of = {(t["service"], t["url"]): t.get("pgo") for t in st}
        assert pgo_of[("old", old.base)].startswith("no: ")
        assert "start_line" in pgo_of[("old", old.base)]
        assert pgo_of[("mixed", new.base)] == "ok"
        assert m.error_lines() == []
    finally:
        old.stop()


def test_kept_merged_listing_gains_default_pgo(goapp, goapp_go119, mount, tmp_path):
    """The kernel keeps merged/<range>/'s listing (no_opendir) while every
    file in it has an input; default.pgo appears in it once a cpu snapshot
    with Function.start_line arrives (pushed: fails without)."""
    old = GoApp(goapp_go119, tmp_path)
    try:
        port = free_port()
        down = f"http://127.0.0.1:{port}/debug/pprof"
        m = mount(config_for({"s": {"targets": [{"url": old.base, "name": "old"},
                                                {"url": down, "name": "new"}],
                                    "profiles": ["cpu"]}}, latest_ttl=1))
        rng = m.path / "local/s/merged/24h"
        assert os.listdir(rng) == ["cpu.pb.gz"]  # the old target's cpu: no default.pgo
        time.sleep(1.1)  # the listing's attributes settle; latest_ttl passes
        assert os.listdir(rng) == ["cpu.pb.gz"]  # kept by the kernel from now on
        goapp("-addr", f"127.0.0.1:{port}")
        # a new round (latest_ttl passed): its cpu has Function.start_line
        (m.path / "local/s/latest/cpu.new.pb.gz").read_bytes()
        wait_for(lambda: sorted(os.listdir(rng)) == ["cpu.pb.gz", "default.pgo"], timeout=5,
                 what="default.pgo listed")
    finally:
        old.stop()


def test_default_pgo_leaf_that_is_also_a_caller_and_a_leaf_without_lines(go121, mount, tmp_path):
    """Two cases Pyroscope's `profilecli query go-pgo` got wrong until 2026
    (grafana/pyroscope 5635-5637): a location that is a leaf in one stack
    and a caller in another keeps its line where it calls (only the leaf
    use loses it), and an unsymbolized leaf (an address, no line) is kept
    as it is, its samples counted."""
    from fakes.hostile import Hostile
    cpu = wire.profile([("samples", "count"), ("cpu", "nanoseconds")],
                       [(["main.a", "main.main"], [3, 30]),            # a: leaf
                        (["main.b", "main.a", "main.main"], [5, 50]),  # a: caller of b
                        ([0x4242, "main.a", "main.main"], [7, 70])],   # a leaf without lines
                       period_type=("cpu", "nanoseconds"), period=10,
                       time_nanos=time.time_ns(), duration_nanos=10**9)
    h = Hostile()
    h.static["profile"] = gzip.compress(cpu)
    try:
        m = mount(config_for({"api": {"targets": [f"{h.url}/static"], "profiles": ["cpu"]}}))
        pgo = tmp_path / "default.pgo"
        subprocess.run(["cp", str(m.path / "local/api/merged/24h/default.pgo"), str(pgo)],
                       check=True)
        samples, locs = stacks(pgo.read_bytes())
        f = wire.decode(gzip.decompress(pgo.read_bytes()))
        strings = [x.decode() for x in f[6]]
        fname = {wire.decode(fn)[1][0]: strings[wire.decode(fn)[2][0]] for fn in f[5]}
        vals = {}
        for s in f[2]:
            sf = wire.decode(s)
            ids = wire._packed(sf[1])
            names = [(fname[locs[i][1][0][0]], locs[i][1][0][1]) if locs[i][1]
                     else hex(locs[i][0]) for i in ids]
            vals[tuple(names)] = wire._packed(sf[2])
        a = 1  # main.a's line (wire: a function's line is its id)
        assert vals == {(("main.a", 0), ("main.main", 2)): [3, 30],
                        (("main.b", 0), ("main.a", a), ("main.main", 2)): [5, 50],
                        ("0x4242", ("main.a", a), ("main.main", 2)): [7, 70]}, vals
        go_build_pgo(go121, pgo, tmp_path / "app")
        assert "Type: cpu" in pprof_top(pgo)
    finally:
        h.stop()
