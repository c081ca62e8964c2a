"""`make bench`'s quick mode still works: OrbitMQ standalone (both flush modes) under mqload.

Runs bench/run_bench.py --quick against OrbitMQ only (peers may be absent in CI) and checks that
it printed the comparison table and wrote its JSON, the end-to-end workloads' latencies in it. A
smoke test of the benchmark's plumbing: no figure is compared with a goal (the machine is shared;
figures are reported, never tested), only present and positive where they must be.
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
QUICK_TIMEOUT_S = 55  # the quick mode's promise: under a minute


@pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC}) to build bench/mqload")
def test_quick_bench_prints_table_and_writes_json(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_bench.py"), "--quick",
         "--systems", "orbitmq-async,orbitmq-sync", "--json", str(out_json)],
        capture_output=True, text=True, timeout=QUICK_TIMEOUT_S, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "OrbitMQ vs peers" in proc.stdout
    assert "publish, 4 producers" in proc.stdout and "targets (docs/performance.md)" in proc.stdout
    doc = json.loads(out_json.read_text())
    assert doc["meta"]["quick"] is True
    assert doc["systems"] == ["orbitmq-async", "orbitmq-sync"]
    workloads = {(r["system"], r["workload"]) for r in doc["runs"] if "msgs_s" in r}
    for system in doc["systems"]:
        for workload in ("pub p1", "sub", "pub p4", "batch64", "sync p1"):
            assert (system, workload) in workloads, doc["runs"]
    assert all(str(r.get("errors", "0")) == "0" for r in doc["runs"]), doc["runs"]
    assert {t["target"] for t in doc["targets"]} >= {"consume / Redis XREADGROUP"}
    # the page cache measured around the batch runs, and the batch target's goal taken from it
    around = doc["disk"]["page_cache_at_batch64_mb_s"]
    assert set(around) == {"before_mb_s", "after_mb_s"} and min(around.values()) > 0, around
    page = doc["disk"]["page_cache_at_batch64_1k_msgs_s"]
    assert page == round(max(around.values()) * 1e6 / 1024)
    batch = next(t for t in doc["targets"] if t["target"].startswith("batch 64"))
    assert f"goal {min(500_000, 0.7 * page):,.0f} msgs/s" in batch["note"], batch
    assert "page cache around the batch runs:" in proc.stdout
    # The end-to-end workloads ran against orbitmq-async (not orbitmq-sync: not in E2E_SYSTEMS).
    e2e = {(r["system"], r["workload"]): r for r in doc["runs"] if r["workload"].startswith("e2e")}
    assert set(e2e) == {("orbitmq-async", w) for w in ("e2e 1k", "e2e max", "e2e 50%")}, e2e
    for rec in e2e.values():
        assert rec["rc"] == 0 and rec["mode"] == "e2e", rec
        assert int(rec["e2e_n"]) > 0 and int(rec["e2e_dup"]) == 0, rec
        for key in ("e2e_p50_us", "e2e_p99_us", "e2e_p999_us"):
            assert float(rec[key]) > 0, (key, rec)
    assert e2e[("orbitmq-async", "e2e 1k")]["rate"] == "1000"
    # The half-load run's rate is half of what the e2e max run carried (deliveries a second).
    carried = float(e2e[("orbitmq-async", "e2e max")]["e2e_msgs_s"])
    assert carried > 1000, e2e
    assert int(e2e[("orbitmq-async", "e2e 50%")]["rate"]) == int(carried * 0.5)
    assert "end to end (delivery to a waiting consumer - send, one clock; us):" in proc.stdout
    half = next(t for t in doc["targets"] if t["target"].startswith("e2e at 50%"))
    assert half["measured"] is not None and half["measured"] > 0, half
    # What bounds it, measured in the same run: where the slowest deliveries spent their time
    # and how busy the machine was.
    assert "before the store" in half["note"] and "the machine's CPUs" in half["note"], half
    assert 0 < e2e[("orbitmq-async", "e2e 50%")]["machine_busy_pct"] <= 100, e2e


def test_batch_goal_follows_the_page_cache_measured_around_the_batch_runs() -> None:
    """The batch target's goal is min(500k, 0.7x the page cache's rate around the batch runs);
    the rate at the start of the sitting counts only when those were not measured."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import report
    finally:
        sys.path.remove(str(ROOT / "bench"))
    runs = {("orbitmq-async", "batch64"): {"msgs_s": "300000", "errors": "0"}}

    def batch(disk: dict[str, object]) -> dict[str, object]:
        return next(t for t in report.targets(runs, disk) if t["target"].startswith("batch 64"))

    start_only = batch({"page_cache_1k_msgs_s": 3_000_000})
    assert start_only["measured"] == 0.6 and not start_only["met"], start_only
    around = batch({"page_cache_1k_msgs_s": 3_000_000, "page_cache_at_batch64_1k_msgs_s": 400_000})
    assert around["measured"] == round(300_000 / 280_000, 3) and around["met"], around
    assert "goal 280,000 msgs/s" in str(around["note"])


def test_e2e_targets_are_ratios_to_nats_and_the_half_load_p99() -> None:
    """At 1,000 msgs/s OrbitMQ's p50 and p99 over NATS JetStream's of the same sitting; at 50%
    load OrbitMQ's own p99 in ms; a target whose runs are missing is n/a, not met or failed."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import report
    finally:
        sys.path.remove(str(ROOT / "bench"))

    def e2e(rate: int, p50: int, p99: int) -> dict[str, str]:
        return {"rate": str(rate), "e2e_n": "1000", "e2e_lost": "0", "e2e_p50_us": str(p50),
                "e2e_p99_us": str(p99), "e2e_p999_us": str(p99 * 2), "e2e_max_us": str(p99 * 3),
                "behind_max_us": "100"}

    runs = {("orbitmq-async", "e2e 1k"): e2e(1000, 300, 3000),
            ("nats-js", "e2e 1k"): e2e(1000, 200, 1000),
            ("orbitmq-async", "e2e 50%"): e2e(60000, 900, 4000) | {
                "e2e_tail_in_us": "3000", "e2e_tail_out_us": "1000", "machine_busy_pct": 91,
                "server_cpu_pct": 100, "client_cpu_pct": 80}}
    p50, p99, half = report.e2e_targets(runs)
    assert (p50["measured"], p50["met"], p50["goal"]) == (1.5, False, 1.2), p50
    assert (p99["measured"], p99["met"], p99["goal"]) == (3.0, False, 2.0), p99
    assert (half["measured"], half["met"], half["unit"]) == (4.0, True, "ms"), half
    assert "at 60,000 msgs/s" in half["note"]
    assert ("the slowest 1% spent 3.0 ms (median) before the store, 1.0 ms after it; the "
            "machine's CPUs 91% busy (broker 100%, load tool 80% of one CPU)") in half["note"], half
    assert [t["met"] for t in report.e2e_targets({})] == [None, None, None]


def test_one_at_a_time_targets_are_issue_41s() -> None:
    """ASYNC_FLUSH's lone-send p50 at most NATS's synchronous publish and 1.2x Redis everysec's,
    SYNC_FLUSH's at most 1.1x Redis fsync-always's."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import report
    finally:
        sys.path.remove(str(ROOT / "bench"))

    def lone(p50: int) -> dict[str, str]:
        return {"msgs_s": "1000", "p50_us": str(p50), "p99_us": str(p50 * 2), "errors": "0"}

    runs = {("orbitmq-async", "sync p1"): lone(110), ("nats-js", "sync p1"): lone(100),
            ("redis-everysec", "sync p1"): lone(100), ("orbitmq-sync", "sync p1"): lone(330),
            ("redis-always", "sync p1"): lone(300)}
    got = {t["target"]: (t["measured"], t["goal"], t["met"]) for t in report.targets(runs, {})}
    assert got["orbitmq-async one-at-a-time p50 / NATS synchronous publish p50"] == (1.1, 1.0, False)
    assert got["orbitmq-async one-at-a-time p50 / Redis everysec p50"] == (1.1, 1.2, True)
    assert got["orbitmq-sync one-at-a-time p50 / Redis fsync-always p50"] == (1.1, 1.1, True)
