"""coreutils cp, cp -r, install and GNU tar on a fresh mount and while
rounds land: each stats a path, opens it (a second lookup) and compares
st_dev/st_ino of the two ("skipping file ..., as it was replaced while
being copied"); a file whose size is not known yet (a merged/ file not
built, a latest/ file not fetched) must keep its inode from the stat to
the open."""
import os
import subprocess
import threading
import time

from conftest import PROFILES, config_for, pprof_top

MERGED = sorted([f"{p}.pb.gz" for p in PROFILES] + ["default.pgo"])


def sh(*cmd, cwd=None):
    r = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, timeout=300)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr}"
    return r


def test_cp_r_of_a_fresh_mount(goapp, mount, tmp_path):
    app = goapp()
    m = mount(config_for({"api": [app.base]}))
    sh("cp", "-r", str(m.path / "local"), str(tmp_path / "export"))
    assert sorted(os.listdir(tmp_path / "export/api/merged/24h")) == MERGED
    for f in MERGED:
        pprof_top(tmp_path / "export/api/merged/24h" / f)


def test_cp_and_install_of_one_merged_file_first_thing(goapp, mount, tmp_path):
    """README's first PGO command, and install, each the first command on a
    fresh mount; .status.json too."""
    for i, cmd in enumerate([["cp"], ["install", "-m", "0644"]]):
        app = goapp()
        m = mount(config_for({"api": [app.base]}), name=f"m{i}")
        for f in ("default.pgo", "cpu.pb.gz", "heap.pb.gz"):
            sh(*cmd, str(m.path / "local/api/merged/24h" / f), str(tmp_path / f"{i}-{f}"))
            pprof_top(tmp_path / f"{i}-{f}")
        sh(*cmd, str(m.path / ".status.json"), str(tmp_path / f"{i}-status.json"))


def test_copies_while_rounds_land(goapp, mount, tmp_path):
    """latest_ttl 1 and a reader of latest/: a round lands every second
    while cp, cp -r, install and tar run, again and again."""
    app = goapp()
    m = mount(config_for({"api": [app.base]}, latest_ttl=1))
    svc = m.path / "local/api"
    stop = threading.Event()

    def land():
        while not stop.wait(0.3):
            subprocess.run(["cat", str(svc / "latest/heap.pb.gz")], capture_output=True)
    t = threading.Thread(target=land, daemon=True)
    t.start()
    try:
        end = time.monotonic() + 12
        k = 0
        while time.monotonic() < end:
            k += 1
            sh("cp", str(svc / "merged/24h/heap.pb.gz"), str(tmp_path / f"heap{k}"))
            sh("install", "-m", "0644", str(svc / "merged/24h/cpu.pb.gz"), str(tmp_path / f"cpu{k}"))
            sh("cp", str(svc / "latest/goroutine.pb.gz"), str(tmp_path / f"g{k}"))
            sh("cp", "-r", str(svc), str(tmp_path / f"tree{k}"))
            sh("tar", "-czf", str(tmp_path / f"t{k}.tgz"), "-C", str(m.path), "local")
        assert k >= 2
        rounds = [d for d in os.listdir(m.cache / "local/api") if d[0].isdigit()]
        assert len(rounds) >= 4, rounds  # rounds did land meanwhile
    finally:
        stop.set()
        t.join()
    pprof_top(tmp_path / f"heap{k}")
