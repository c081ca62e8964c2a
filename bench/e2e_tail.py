"""Where the end-to-end tail under load spends its time, and what ran on the CPUs meanwhile.

    .venv/bin/python bench/e2e_tail.py [--rate 46000] [--secs 8] [--warm 300000] [--runs 3]
        [--late-ms 20] [--before-ms 50] [--quick] [--json PATH]

Each run starts a fresh ``orbitmq standalone`` (ASYNC_FLUSH), warms it with ``--warm`` messages
(as ``make bench``'s sittings do), then runs mqload's end-to-end workload at ``--rate`` with
``-dump``: a line a delivery with its send, store and delivery times on one clock
(bench/mqload/e2e.c). Meanwhile, where ``perf`` may record scheduler events (root, or a
permissive ``perf_event_paranoid``), ``perf record -e sched:sched_switch -a -k CLOCK_MONOTONIC``
notes every context switch of every CPU on the same clock.

Per run it prints the delivery p50/p99, and, for the 10 ms windows of send time that hold a
delivery later than ``--late-ms`` (the late windows):

- how their late messages split at the store time: "in" (send to store: the producer's write,
  the broker's read and append) and "out" (store to delivery: dispatch, the held pull's answer,
  the consumer's read), medians;
- which threads had the CPUs in the ``--before-ms`` before each late window and during it, as a
  share of all the CPUs, next to their share over the whole run. The broker's threads are named by their
  kernel names (the store's service threads name themselves, store/service.py; the event loop
  is the process's main thread), the load tool's are ``mqload``, an idle CPU ``idle``.

A thread whose share before the late windows is well above its share over the run is what the
late messages waited on. Results go to bench/results/e2e-tail-<date>.json. Not a test itself:
tests/bench/test_e2e_tail.py runs ``--quick`` once, for its plumbing.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import systems as sysmod

RESULTS = Path(__file__).resolve().parent / "results"
WINDOW_NS = 10_000_000  # late windows are 10 ms of send time
_SWITCH = re.compile(r"\s*\S.*?\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:sched_switch:.*?"
                     r"prev_pid=(\d+) .*next_pid=(\d+)")


def perf_works() -> bool:
    """Whether ``perf record`` may trace scheduler events on every CPU here."""
    if shutil.which("perf") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-a", "-o",
                               f"{tmp}/probe.data", "--", "true"], capture_output=True)
    return done.returncode == 0


def thread_names(pid: int) -> dict[int, str]:
    """The kernel's names of ``pid``'s threads, the main one (the event loop) as ``event loop``."""
    names = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            names[int(tid)] = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
        except OSError:
            continue
    names[pid] = "event loop"
    return names


def switches(data: str) -> list[tuple[float, float, int, int]]:
    """(start s, end s, cpu, tid) of each stretch a thread ran on a CPU, from a perf.data file;
    a CPU's first stretch starts where the record does, its last one ends there."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,cpu,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    stretches: list[tuple[float, float, int, int]] = []
    since: dict[int, tuple[float, int]] = {}  # cpu -> (since when, who) runs there now
    first: dict[int, tuple[float, int]] = {}  # cpu -> (its first switch, who ran before it)
    start = end = None
    for line in out.splitlines():
        m = _SWITCH.match(line)
        if m is None:
            continue
        cpu, at, prev, nxt = int(m.group(2)), float(m.group(3)), int(m.group(4)), int(m.group(5))
        start = at if start is None else min(start, at)
        end = at if end is None else max(end, at)
        if cpu in since:
            stretches.append((since[cpu][0], at, cpu, prev))
        else:
            first[cpu] = (at, prev)
        since[cpu] = (at, nxt)
    for cpu, (at, prev) in first.items():
        stretches.append((start, at, cpu, prev))
    for cpu, (at, nxt) in since.items():
        stretches.append((at, end, cpu, nxt))
    return stretches


def shares(stretches: list[tuple[float, float, int, int]], spans: list[tuple[float, float]],
           label: dict[int, str], cpus: int) -> dict[str, float]:
    """Each label's share (%) of all CPUs over ``spans`` (seconds, not overlapping)."""
    took: collections.Counter[str] = collections.Counter()
    total = sum(hi - lo for lo, hi in spans) * cpus
    spans = sorted(spans)
    ends = [hi for _lo, hi in spans]
    for start, end, _cpu, tid in stretches:
        for lo, hi in spans[bisect.bisect_right(ends, start):]:
            if lo >= end:
                break
            took[label.get(tid, "other")] += min(end, hi) - max(start, lo)
    return {k: round(100 * v / total, 1) for k, v in took.most_common()} if total else {}


def analyse(dump: Path, perf_data: Path | None, names: dict[int, str], late_ms: float,
            before_ms: float) -> dict[str, Any]:
    rows = [[int(v) for v in line.split()] for line in dump.read_text().splitlines()]
    lat = sorted(d - s for _q, s, _st, d in rows)
    worst: dict[int, int] = collections.defaultdict(int)
    for _seq, sent, _stored, delivered in rows:
        worst[sent // WINDOW_NS] = max(worst[sent // WINDOW_NS], delivered - sent)
    late = sorted(w for w, v in worst.items() if v > late_ms * 1e6)
    late_set = set(late)
    late_rows = [r for r in rows if r[1] // WINDOW_NS in late_set and r[3] - r[1] > late_ms * 1e6
                 and r[2] >= 0]
    out: dict[str, Any] = {
        "deliveries": len(rows), "p50_us": round(lat[len(lat) // 2] / 1e3) if lat else None,
        "p99_us": round(lat[int(0.99 * (len(lat) - 1))] / 1e3) if lat else None,
        "windows": len(worst), "late_windows": len(late),
        "late_in_ms": round(statistics.median(r[2] - r[1] for r in late_rows) / 1e6, 1)
        if late_rows else None,
        "late_out_ms": round(statistics.median(r[3] - r[2] for r in late_rows) / 1e6, 1)
        if late_rows else None,
    }
    if perf_data is None:
        return out
    stretches = switches(str(perf_data))
    label = {0: "idle"} | names
    for _s, _e, _c, tid in stretches:
        label.setdefault(tid, "other")
    tool = [tid for tid, name in _tool_threads(perf_data).items() if name == "mqload"]
    label.update(dict.fromkeys(tool, "mqload"))
    first, last = min(r[1] for r in rows) / 1e9, max(r[3] for r in rows) / 1e9
    cpus = os.cpu_count() or 1
    out["run_share_pct"] = shares(stretches, [(first, last)], label, cpus)
    spans, end = [], 0.0
    for w in late:  # the before_ms before each late window, merged where they overlap
        lo, hi = max(w * WINDOW_NS / 1e9 - before_ms / 1e3, end), w * WINDOW_NS / 1e9 + 0.01
        if hi > lo:
            spans.append((lo, hi))
            end = hi
    out["before_late_share_pct"] = shares(stretches, spans, label, cpus)
    return out


def _tool_threads(perf_data: Path) -> dict[int, str]:
    """The tids perf saw under the command name ``mqload``."""
    out = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "comm,tid"],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "mqload":
            found[int(parts[1])] = "mqload"
    return found


def run_once(args: argparse.Namespace, base: str, use_perf: bool, i: int) -> dict[str, Any]:
    system = sysmod.orbitmq("ASYNC_FLUSH", base)
    tmp = Path(tempfile.mkdtemp(prefix="orbitmq-e2e-tail-", dir=base))
    try:
        if args.warm:
            subprocess.run([sysmod.mqload(), "-sys", "rocketmq", "-n", str(args.warm), "-p", "1",
                            "-w", "1000", *system.prepare("pub p1", 0)], capture_output=True,
                           timeout=600, check=True)
        names = thread_names(system.pid) if system.pid else {}
        dump, perf_data = tmp / "deliveries.txt", tmp / "sched.data"
        recorder = subprocess.Popen(
            ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-e", "sched:sched_switch", "-a",
             "-o", str(perf_data), "--", "sleep", str(args.secs + 2)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if use_perf else None
        load = subprocess.run(
            [sysmod.mqload(), "-sys", "rocketmq", "-mode", "e2e", "-rate", str(args.rate), "-n",
             str(args.rate * args.secs), "-maxsec", str(args.secs + 12), "-dump", str(dump),
             *system.prepare("e2e 50%", i)], capture_output=True, text=True, timeout=300)
        if recorder is not None:
            recorder.wait(timeout=60)
        if load.returncode != 0:
            raise SystemExit(f"mqload failed: {(load.stdout + load.stderr).strip()[-400:]}")
        result = analyse(dump, perf_data if use_perf else None, names, args.late_ms,
                         args.before_ms)
        result["mqload"] = load.stdout.strip()
        return result
    finally:
        system.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=46_000, help="msgs/s end to end")
    ap.add_argument("--secs", type=int, default=8, help="sending time of each run")
    ap.add_argument("--warm", type=int, default=300_000, help="messages stored before each run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--late-ms", type=float, default=20.0, help="a delivery this late is late")
    ap.add_argument("--before-ms", type=float, default=50.0,
                    help="how long before each late window its CPUs are looked at")
    ap.add_argument("--quick", action="store_true", help="1 run, 1 s at 2,000 msgs/s, no warm-up")
    ap.add_argument("--json", type=Path, help="where the results go (default bench/results/)")
    args = ap.parse_args()
    for name, value, low, high in (("--rate", args.rate, 1, 10_000_000), ("--secs", args.secs, 1, 3600),
                                   ("--warm", args.warm, 0, 100_000_000), ("--runs", args.runs, 1, 100),
                                   ("--late-ms", args.late_ms, 0.001, 60_000),
                                   ("--before-ms", args.before_ms, 0.0, 60_000)):
        if not low <= value <= high:
            ap.error(f"{name} {value}: expected {low} to {high}")
    if args.quick:
        args.rate, args.secs, args.warm, args.runs, args.late_ms = 2000, 1, 0, 1, 1.0
    use_perf = perf_works()
    if not use_perf:
        print("perf cannot record scheduler events here: the split only", flush=True)
    runs = []
    base = tempfile.mkdtemp(prefix="orbitmq-e2e-tail-")
    try:
        for i in range(args.runs):
            r = run_once(args, base, use_perf, i)
            runs.append(r)
            print(f"run {i}: {r['deliveries']} deliveries at {args.rate} msgs/s, p50 "
                  f"{r['p50_us']} us, p99 {r['p99_us']} us; {r['late_windows']} of "
                  f"{r['windows']} windows of 10 ms hold a delivery over {args.late_ms:g} ms; "
                  f"their late ones: in {r['late_in_ms']} ms, out {r['late_out_ms']} ms "
                  f"(medians)", flush=True)
            if "run_share_pct" in r:
                before = r["before_late_share_pct"]
                print(f"  {'thread':<18} {'run %':>7} {'before late %':>14}")
                for name, share in r["run_share_pct"].items():
                    print(f"  {name:<18} {share:>7} {before.get(name, 0.0):>14}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    RESULTS.mkdir(exist_ok=True)
    out = args.json or RESULTS / f"e2e-tail-{time.strftime('%Y%m%d-%H%M%S')}.json"
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    out.write_text(json.dumps({"args": settings, "perf": use_perf, "cpus": os.cpu_count(),
                               "runs": runs}, indent=1))
    print(f"written {out}")


if __name__ == "__main__":
    sys.exit(main())
