"""`make bench`'s quick mode still works: OrbitMQ standalone (both flush modes) under mqbench.

Runs bench/run_bench.py --quick against OrbitMQ only (peers may be absent in CI) and checks that
it printed the comparison table and wrote its JSON. A smoke test of the benchmark's plumbing:
no figure is asserted (the machine is shared; figures are reported, never tested).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MQBENCH = os.environ.get("MQBENCH", str(ROOT.parent / "shared" / "bench" / "mqbench"))
QUICK_TIMEOUT_S = 55  # the quick mode's promise: under a minute


@pytest.mark.skipif(not os.access(MQBENCH, os.X_OK), reason=f"mqbench not found at {MQBENCH}")
def test_quick_bench_prints_table_and_writes_json(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_bench.py"), "--quick",
         "--systems", "orbitmq-async,orbitmq-sync", "--json", str(out_json)],
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, cwd=ROOT,
        env={**os.environ, "MQBENCH": MQBENCH},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "OrbitMQ vs peers" in proc.stdout
    assert "publish, 4 producers" in proc.stdout and "targets (issue 16)" in proc.stdout
    doc = json.loads(out_json.read_text())
    assert doc["meta"]["quick"] is True
    assert doc["systems"] == ["orbitmq-async", "orbitmq-sync"]
    workloads = {(r["system"], r["workload"]) for r in doc["runs"] if "msgs_s" in r}
    for system in doc["systems"]:
        for workload in ("pub p1", "sub", "pub p4", "batch64", "sync p1"):
            assert (system, workload) in workloads, doc["runs"]
    assert all(str(r.get("errors", "0")) == "0" for r in doc["runs"]), doc["runs"]
    assert {t["target"] for t in doc["targets"]} >= {"consume / Redis XREADGROUP"}
