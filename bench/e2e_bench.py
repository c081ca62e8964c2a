"""End-to-end benchmark: OrbitMQ standalone under mqbench's RocketMQ-protocol load, with baselines.

Every figure comes with a ratio against a baseline measured in the same run on the same machine:
- ``sink``: OrbitMQ's own transport answering sends without a broker or store (bench/ack_sink.py),
  the ceiling of the Python network layer on this box;
- ASYNC_FLUSH vs SYNC_FLUSH of the same broker.

Usage: python bench/e2e_bench.py [--quick] [--json bench/results/e2e.json]
Needs ../shared/bench/mqbench (or $MQBENCH). Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MQBENCH = os.environ.get("MQBENCH", str(ROOT.parent / "shared" / "bench" / "mqbench"))
RESULT = re.compile(r"^RESULT (.*)$", re.M)


def start(args: list[str], ready: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    found: dict[str, str] = {}
    deadline = time.monotonic() + 30
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = re.search(r"orbitmq (\w+) ready on (\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
            if ready in found:
                return proc, found
    proc.kill()
    raise SystemExit(f"{' '.join(args)} did not become ready")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def mqbench(addr: str, *args: str) -> dict[str, str]:
    out = subprocess.run([MQBENCH, "-sys", "rocketmq", "-addr", addr, *args],
                         capture_output=True, text=True, timeout=120)
    m = RESULT.search(out.stdout)
    if not m:
        raise SystemExit(f"mqbench failed: {out.stdout[-500:]} {out.stderr[-500:]}")
    return dict(kv.split("=", 1) for kv in m.group(1).split() if "=" in kv)


def workloads(n: int, n_sync: int) -> list[tuple[str, list[str]]]:
    return [
        ("sync send, 1 producer", ["-n", str(n_sync), "-p", "1", "-w", "1", "-maxsec", "20"]),
        ("sync send, 8 producers", ["-n", str(n_sync * 2), "-p", "8", "-w", "1", "-maxsec", "20"]),
        ("pipelined send, 1 producer w1000", ["-n", str(n), "-p", "1", "-w", "1000", "-maxsec", "30"]),
        ("batch send 32, w32", ["-n", str(n), "-p", "1", "-batch", "32", "-w", "32", "-maxsec", "30"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small counts, finishes in about a minute")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "e2e.json"))
    opts = ap.parse_args()
    n, n_sync = (20_000, 2_000) if opts.quick else (200_000, 20_000)
    if not os.access(MQBENCH, os.X_OK):
        raise SystemExit(f"mqbench not found at {MQBENCH} (set MQBENCH)")
    results: list[dict[str, object]] = []
    sink, addrs = start([sys.executable, str(ROOT / "bench" / "ack_sink.py"), "0"], "sink")
    try:
        for name, args in workloads(n, n_sync):
            results.append({"system": "sink", "workload": name, **mqbench(addrs["sink"], "-q", "sink", *args)})
    finally:
        stop(sink)
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH"):
        with tempfile.TemporaryDirectory(prefix="orbitmq-bench-") as store:
            proc, addrs = start([sys.executable, "-m", "orbitmq.cli.main", "standalone", "--namesrv-port", "0",
                                 "--broker-port", "0", "--store", store, "--flush-disk-type", flush], "broker")
            try:
                for i, (name, args) in enumerate(workloads(n, n_sync)):
                    res = mqbench(addrs["broker"], "-q", f"bench-{i}", *args)
                    results.append({"system": f"orbitmq {flush}", "workload": name, **res})
                res = mqbench(addrs["broker"], "-q", "bench-2", "-mode", "sub", "-n", str(n), "-maxsec", "30")
                results.append({"system": f"orbitmq {flush}", "workload": "consume (pull 32)", **res})
            finally:
                stop(proc)
    report(results)
    Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.json).write_text(json.dumps(results, indent=1))
    print(f"\nresults written to {opts.json}")


def report(results: list[dict[str, object]]) -> None:
    sink = {r["workload"]: float(str(r["msgs_s"])) for r in results if r["system"] == "sink"}
    print(f"{'system':<22} {'workload':<34} {'msgs/s':>10} {'p50 us':>8} {'p99 us':>8} {'vs sink':>8} {'errors':>6}")
    for r in results:
        rate = float(str(r["msgs_s"]))
        base = sink.get(str(r["workload"]))
        ratio = f"{rate / base:.2f}" if base and r["system"] != "sink" else "-"
        print(f"{r['system']:<22} {r['workload']:<34} {rate:>10,.0f} {r['p50_us']:>8} {r['p99_us']:>8} "
              f"{ratio:>8} {r.get('errors', '0'):>6}")


if __name__ == "__main__":
    main()
