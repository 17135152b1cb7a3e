"""A cold cpu profile keeps a listing waiting for cpu_seconds: the log says
so when it starts, and .status.json shows what is in flight since when."""
import json
import os
import re
import threading
import time

from conftest import config_for, wait_for


def status(m):
    return json.loads((m.path / ".status.json").read_text())


def test_cpu_wait_is_logged_and_in_flight_shown(goapp, mount):
    app = goapp()
    m = mount(config_for({"a": {"targets": [app.base], "profiles": ["cpu", "heap"]}},
                         cpu_seconds=3))
    listed = []
    t = threading.Thread(target=lambda: listed.extend(os.listdir(m.path / "local/a/latest")))
    t0 = time.time()
    t.start()
    wait_for(lambda: status(m)["in_flight"] == 1, timeout=5, what="the cpu fetch in flight")
    doc = status(m)
    [tgt] = doc["targets"]
    assert tgt["in_flight"] == 1 and tgt["in_flight_since"]
    # which file, of which round, since when
    [f] = tgt["in_flight_files"]
    assert f["file"] == "cpu.pb.gz" and f["since"] == tgt["in_flight_since"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", f["round"]), f
    assert abs(time.mktime(time.strptime(tgt["in_flight_since"], "%Y-%m-%dT%H:%M:%SZ"))
               - time.mktime(time.gmtime(t0))) <= 2
    assert "info: local/a: taking cpu profile of 1 target (3 s)" in m.log()
    t.join(timeout=15)
    assert sorted(listed) == ["cpu.pb.gz", "heap.pb.gz"]
    doc = status(m)
    assert doc["in_flight"] == 0 and doc["targets"][0]["in_flight_since"] is None
    assert "in_flight_files" not in doc["targets"][0]
