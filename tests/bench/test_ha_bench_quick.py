"""`make bench`'s replication benchmark still works: bench/ha_bench.py --quick.

Three broker sets and a catch-up run as real processes under mqload (bench/mqload); checks that the table and
the JSON came out with every cell measured and no failed send. A smoke test of the plumbing: no
figure is asserted (the machine is shared; figures are reported, never tested).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CC = os.environ.get("CC", "cc")  # bench/mqload is built with it on first use
QUICK_TIMEOUT_S = 180  # the quick mode takes well under a minute on an idle box


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC}) to build bench/mqload")
def test_quick_ha_bench_prints_the_table_and_writes_json(tmp_path: Path) -> None:
    out_json = tmp_path / "ha.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "ha_bench.py"), "--quick", "--json", str(out_json)],
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "OrbitMQ replication, 1 KiB messages" in proc.stdout
    assert "slave catch-up" in proc.stdout and "FAILED" not in proc.stdout
    doc = json.loads(out_json.read_text())
    assert doc["meta"]["quick"] is True
    names = ["lone SYNC_FLUSH", "SYNC_MASTER", "SYNC_MASTER+SYNC_FLUSH"]
    assert list(doc["summary"]) == names
    for name in names:
        assert set(doc["summary"][name]) == {"pub_msgs_s", "sync_msgs_s", "p50_us", "p99_us"}
    assert all(str(r.get("errors", "0")) == "0" and "msgs_s" in r for r in doc["runs"]), doc["runs"]
    catch_up = doc["catch_up"]
    assert catch_up["backlog_bytes"] >= 64 * 1024 * 1024
    assert catch_up["held_s"] > 0 and catch_up["dispatched_s"] >= catch_up["held_s"]
