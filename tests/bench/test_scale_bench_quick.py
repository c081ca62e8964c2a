"""`make bench`'s scale section still works: bench/scale_bench.py --quick.

Real processes (a standalone broker killed -9 and restarted, a name server with two broker sets'
registrations); checks that every section came out in the table and the JSON. A smoke test of
the plumbing: no figure is asserted (the machine is shared; figures are reported, never tested).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUICK_TIMEOUT_S = 120  # the quick mode takes well under a minute on an idle box


def test_quick_scale_bench_prints_every_section_and_writes_json(tmp_path: Path) -> None:
    out_json = tmp_path / "scale.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale_bench.py"), "--quick", "--json",
         str(out_json), "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    for line in ("OrbitMQ metadata at scale", "restart after kill -9 with 500 topics",
                 "broker RSS per 1,000 queues", "name server, 10,000 topics on 2 broker sets"):
        assert line in proc.stdout, proc.stdout
    doc = json.loads(out_json.read_text())
    assert doc["meta"]["quick"] is True and doc["meta"]["sizes"] == [100, 500]
    assert [w["n"] for w in doc["create"]["windows"]] == [100, 500]
    assert doc["create"]["windows"][0]["ratio_to_first"] == 1.0
    assert all(w["mean_ms"] > 0 for w in doc["create"]["windows"])
    restart = doc["restart"]
    assert restart["topics"] == 500 and 0 < restart["ready_s"] <= restart["send_and_pull_s"]
    assert set(doc["queues"]) == {"default", "compact"}  # both consume queue store types
    for store_type, queues in doc["queues"].items():
        assert queues["store_type"] == store_type and queues["queues"] == 800
        assert {"VmRSS", "RssAnon", "RssFile"} <= set(queues["idle_per_1k_mb"])
    namesrv = doc["namesrv"]
    assert namesrv["topics"] == 10_000 and namesrv["broker_sets"] == 2
    assert namesrv["rss_mb"]["after"]["VmRSS"] > 0
    assert namesrv["whole_registration_bytes"] > 1000 * namesrv["one_topic_registration_bytes"]


def test_windows_end_at_each_size_and_compare_with_the_first() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import scale_bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    timings = [1.0] * 100 + [3.0] * 900
    rows = scale_bench.windows(timings, [100, 1000])
    assert [r["window"] for r in rows] == ["51-100", "951-1000"]
    assert rows[1]["mean_ms"] == 3.0 and rows[1]["ratio_to_first"] == 3.0
    assert rows[1]["median_ratio_to_first"] == 3.0
