"""bench/e2e_tail.py's plumbing: one quick run, its deliveries split and, where perf may trace the
scheduler, the CPUs' shares by thread. No figure is compared with a goal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CC = os.environ.get("CC", "cc")
TIMEOUT_S = 120


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC}) to build bench/mqload")
def test_a_quick_run_splits_the_deliveries_and_names_the_threads(tmp_path: Path) -> None:
    out = tmp_path / "tail.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e_tail.py"), "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=TIMEOUT_S,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    (run,) = doc["runs"]
    assert run["deliveries"] == 2000 and 0 < run["p50_us"] <= run["p99_us"], run
    assert 0 <= run["late_windows"] <= run["windows"], run
    assert "RESULT" in run["mqload"] and "e2e_lost=0" in run["mqload"], run
    if doc["perf"]:  # the event loop and the load tool both ran; shares are of all CPUs, each
        # moment counted once (perf may lose events on a loaded machine: a few points short)
        shares = run["run_share_pct"]
        assert shares.get("event loop", 0) > 0 and shares.get("mqload", 0) > 0, shares
        assert 80 <= sum(shares.values()) <= 101, shares


@pytest.mark.parametrize(("args", "says"), [
    (["--rate", "0"], "--rate 0: expected 1 to 10000000"),
    (["--late-ms", "-1"], "--late-ms -1.0: expected 0.001 to 60000"),
    (["--runs", "0"], "--runs 0: expected 1 to 100"),
])
def test_out_of_range_options_are_refused_in_one_line(args: list[str], says: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "e2e_tail.py"), *args],
                          capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ROOT)
    assert proc.returncode == 2 and says in proc.stderr.splitlines()[-1], proc.stderr
