"""bench/trace_bench.py's quick mode still works: both sides publish, the trace side's records
are all sent, and the JSON holds the ratio. Figures are reported, never compared with the goal
here (the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_quick_trace_bench_writes_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "trace_bench.py"), "--quick",
                           "--n", "500", "--json", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "trace on / off:" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["trace_off"]["msgs_s"] > 0 and doc["trace_on"]["msgs_s"] > 0
    assert doc["ratio_on_off"] > 0
    trace = doc["trace_on"]["trace"]
    assert trace["sent_records"] == trace["appended"] == 501 and trace["lost"] == 0
