"""Replication's cost and speed: a SYNC_MASTER next to a lone SYNC_FLUSH master in one sitting,
and a slave's catch-up rate over a backlog.

    .venv/bin/python bench/ha_bench.py [--quick] [--rounds N] [--backlog-mib M] [--json PATH]

Real processes on 127.0.0.1 (orbitmq.testing.broker_set: one name server, every broker an
``orbitmq broker`` child), loaded by mqload as bench/run_bench.py does (1 KiB messages,
SEND_MESSAGE_V2 straight to the master's address, a message counted when answered SEND_OK):

- systems: ``lone SYNC_FLUSH`` (a master without slaves: SEND_OK after its fdatasync, group
  commit), ``SYNC_MASTER`` (ASYNC_FLUSH; SEND_OK once the slave holds the bytes) and
  ``SYNC_MASTER+SYNC_FLUSH`` (both). Each has its own broker set, all started before the first
  run; every run writes a topic of its own, created beforehand;
- workloads: ``pub p4`` (4 producers, 1,000 sends in flight each: the publish rate) and
  ``sync p1`` (one send at a time: p50/p99 latency). The systems take turns, workload by
  workload, the order rotating, ``--rounds`` times (default 3; quick 1): a change in the
  machine's load hits every system alike. Each cell is the median of its rounds;
- catch-up: the other sets stopped, a lone ASYNC_MASTER is filled with ``--backlog-mib`` of
  commit log (default 1024 MiB; quick 64 MiB) by mqload batch sends, then a slave starts on an
  empty store. Timed from the slave's ready line to the master counting every byte
  acknowledged (the slave holds them), and to the slave's consume queues being dispatched; MB/s
  counts commit log bytes. The master's own fill rate of the same sitting is the baseline.

Prints the table with ratios to the lone SYNC_FLUSH master and writes JSON under bench/results/.
Figures are meaningful only as ratios within one run: the machine is shared. ``--quick`` is a
smoke run (about a minute); tests/bench/test_ha_bench_quick.py runs it. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_bench  # noqa: E402  (bench/ is not a package)
import systems as sysmod  # noqa: E402

from orbitmq import Admin  # noqa: E402
from orbitmq.testing.broker_set import BrokerSetProcesses  # noqa: E402

MiB = 1024 * 1024
SYSTEMS = [  # name, role, slaves, flush type, what SEND_OK means
    ("lone SYNC_FLUSH", "ASYNC_MASTER", 0, "SYNC_FLUSH", "after the master's fdatasync"),
    ("SYNC_MASTER", "SYNC_MASTER", 1, "ASYNC_FLUSH", "once the slave holds the bytes"),
    ("SYNC_MASTER+SYNC_FLUSH", "SYNC_MASTER", 1, "SYNC_FLUSH",
     "after the master's fdatasync and once the slave holds the bytes"),
]
BASELINE = SYSTEMS[0][0]
WAIT_S = 600.0


def workloads(quick: bool) -> list[tuple[str, list[str]]]:
    n, n_sync = (5_000, 400) if quick else (200_000, 20_000)
    sec, sync_sec = ("10", "5") if quick else ("40", "15")
    return [("pub p4", ["-n", str(n), "-p", "4", "-w", "1000", "-maxsec", sec]),
            ("sync p1", ["-n", str(n_sync), "-p", "1", "-w", "1", "-maxsec", sync_sec])]


def _wait(check: Callable[[], Any], what: str, timeout: float = WAIT_S, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(every)
    return value


# ----------------------------------------------------------------------------------- publishing
def start_sets(root: Path) -> tuple[str, list[tuple[sysmod.System, BrokerSetProcesses]]]:
    """Every system's broker set, on one name server; (name server, [(system, set)])."""
    started: list[tuple[sysmod.System, BrokerSetProcesses]] = []
    namesrv: str | None = None
    try:
        for i, (name, role, slaves, flush, acks) in enumerate(SYSTEMS):
            bs = BrokerSetProcesses(root / f"set{i}", role=role, slaves=slaves, name=f"bench-{i}",
                                    broker_flags=["--flush-disk-type", flush], namesrv=namesrv)
            namesrv = bs.namesrv
            started.append((_system(name, bs, acks), bs))
            if slaves:
                bs.wait_slaves_connected()
    except BaseException:
        for _, bs in reversed(started):
            bs.close()
        raise
    assert namesrv is not None
    return namesrv, started


def _system(name: str, bs: BrokerSetProcesses, acks: str) -> sysmod.System:
    addr = bs.addresses[0]

    def prepare(workload: str, run_id: int) -> list[str]:
        topic = f"ha-{workload.replace(' ', '-')}-{run_id}"
        with Admin(bs.namesrv) as admin:  # created beforehand: no creation inside the timing
            admin.create_topic_on_brokers([addr], topic, read_queue_nums=8, write_queue_nums=8)
        return ["-addr", addr, "-q", topic]

    return sysmod.System(name, "rocketmq", bs.master.proc.pid, prepare, lambda: None, acks,
                         {"broker": addr})


def run_publish(namesrv: str, started: list[tuple[sysmod.System, BrokerSetProcesses]],
                quick: bool, rounds: int, quiet_max_s: float) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    systems = [s for s, _ in started]
    turn = 0
    for round_no in range(rounds):
        for workload, flags in workloads(quick):
            order = systems[turn % len(systems):] + systems[:turn % len(systems)]
            for system in order:
                if quiet_max_s > 0:
                    subprocess.run([sys.executable, str(sysmod.PEERS / "quiet.py"),
                                    str(quiet_max_s), "15"], capture_output=True)
                rec = run_bench.load_run(system, workload, flags, run_id=turn * 10 + round_no)
                rec["round"] = round_no
                print(f"  round {round_no + 1} {system.name:<24} {workload:<8} "
                      f"{rec.get('msgs_s', 'FAILED'):>10} msgs/s  p50 {rec.get('p50_us', '-')} us"
                      f"  p99 {rec.get('p99_us', '-')} us  errors {rec.get('errors', '-')}",
                      flush=True)
                results.append(rec)
            turn += 1
    return results


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """System -> the medians of its rounds: rate (pub p4), rate, p50 and p99 (sync p1)."""
    out: dict[str, dict[str, float]] = {}
    for name, *_ in SYSTEMS:
        row: dict[str, float] = {}
        for workload, key, field in (("pub p4", "pub_msgs_s", "msgs_s"),
                                     ("sync p1", "sync_msgs_s", "msgs_s"),
                                     ("sync p1", "p50_us", "p50_us"),
                                     ("sync p1", "p99_us", "p99_us")):
            values = [float(r[field]) for r in results if r["system"] == name
                      and r["workload"] == workload and field in r
                      and str(r.get("errors", "0")) in ("0", "")]
            if values:
                row[key] = statistics.median(values)
        out[name] = row
    return out


# ----------------------------------------------------------------------------------- catch-up
def _runtime(admin: Admin, addr: str) -> dict[str, str]:
    return admin.broker_runtime_info(addr)


def fill(addr: str, admin: Admin, backlog: int) -> tuple[int, float]:
    """mqload batch sends until the commit log holds ``backlog`` bytes; (bytes, seconds)."""
    began = time.monotonic()
    run = 0
    while (end := int(_runtime(admin, addr)["commitLogMaxOffset"])) < backlog:
        per_message = 1024 + 150  # a 1 KiB body stored: header, topic, properties
        n = max(6_400, (backlog - end) // per_message + 64)
        out = subprocess.run([sysmod.mqload(), "-sys", "rocketmq", "-addr", addr, "-q",
                              f"ha-backlog-{run}", "-n", str(n), "-p", "1", "-batch", "64",
                              "-w", "16", "-maxsec", "300"], capture_output=True, text=True,
                             timeout=400)
        if out.returncode != 0:
            raise SystemExit(f"filling the backlog failed: {(out.stdout + out.stderr)[-600:]}")
        run += 1
    return end, time.monotonic() - began


def run_catch_up(root: Path, backlog: int) -> dict[str, Any]:
    """A master filled with ``backlog`` bytes, then an empty slave started; timings."""
    bs = BrokerSetProcesses(root / "catchup", role="ASYNC_MASTER", slaves=0, name="bench-catchup")
    try:
        master = bs.addresses[0]
        with Admin(bs.namesrv, timeout=10.0) as admin:
            end, fill_s = fill(master, admin, backlog)
            _wait(lambda: int(_runtime(admin, master)["dispatchBehindBytes"]) == 0,
                  "the master dispatches its backlog")
            print(f"  backlog: {end / MiB:,.0f} MiB of commit log in {fill_s:.1f} s "
                  f"({end / fill_s / 1e6:,.1f} MB/s into the master)", flush=True)
            t0 = time.monotonic()
            bs.start_broker(1)
            ready_s = time.monotonic() - t0
            t1 = time.monotonic()
            slave = bs.addresses[1]

            def acked() -> bool:
                links = admin.broker_ha_status(master).links
                return bool(links) and links[0].ack_offset >= end

            _wait(acked, "the slave acknowledges the backlog", every=0.02)
            held_s = time.monotonic() - t1
            _wait(lambda: int(_runtime(admin, slave)["dispatchBehindBytes"]) == 0
                  and int(_runtime(admin, slave)["commitLogMaxOffset"]) >= end,
                  "the slave dispatches the backlog", every=0.02)
            dispatched_s = time.monotonic() - t1
    finally:
        bs.close()
    return {"backlog_bytes": end, "fill_s": round(fill_s, 2),
            "fill_mb_s": round(end / fill_s / 1e6, 1), "slave_start_s": round(ready_s, 2),
            "held_s": round(held_s, 2), "held_mb_s": round(end / held_s / 1e6, 1),
            "dispatched_s": round(dispatched_s, 2),
            "dispatched_mb_s": round(end / dispatched_s / 1e6, 1)}


# ----------------------------------------------------------------------------------- report
def render(summary: dict[str, dict[str, float]], catch_up: dict[str, Any], quick: bool,
           rounds: int) -> str:
    base = summary.get(BASELINE, {})

    def ratio(row: dict[str, float], key: str) -> str:
        return f"{row[key] / base[key]:.2f}x" if key in row and base.get(key) else "-"

    def cell(row: dict[str, float], key: str, fmt: str = ",.0f") -> str:
        return format(row[key], fmt) if key in row else "FAILED"

    lines = [f"\nOrbitMQ replication, 1 KiB messages, mqload ({'quick' if quick else 'full'} run, "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}, cpus={os.cpu_count()}, median of {rounds} "
             "round(s); compare ratios only)",
             f"{'system':<24}{'pub p4 msgs/s':>15}{'ratio':>8}{'1-at-a-time msgs/s':>20}"
             f"{'p50 us':>9}{'p99 us':>9}{'p50 ratio':>11}{'p99 ratio':>11}"]
    for name, *_ in SYSTEMS:
        row = summary[name]
        lines.append(f"{name:<24}{cell(row, 'pub_msgs_s'):>15}{ratio(row, 'pub_msgs_s'):>8}"
                     f"{cell(row, 'sync_msgs_s'):>20}{cell(row, 'p50_us'):>9}"
                     f"{cell(row, 'p99_us'):>9}{ratio(row, 'p50_us'):>11}{ratio(row, 'p99_us'):>11}")
    for name, _role, _slaves, _flush, acks in SYSTEMS:
        lines.append(f"  {name}: SEND_OK {acks}")
    c = catch_up
    lines += [f"\nslave catch-up, {c['backlog_bytes'] / MiB:,.0f} MiB backlog (an empty slave "
              f"started next to a master holding it; the slave process took "
              f"{c['slave_start_s']:.1f} s to start):",
              f"  held (acknowledged to the master) after {c['held_s']:.1f} s: "
              f"{c['held_mb_s']:,.1f} MB/s = {c['held_mb_s'] / c['fill_mb_s']:.2f}x the master's "
              f"own fill rate ({c['fill_mb_s']:,.1f} MB/s, batch sends of 64)",
              f"  dispatched (consume queues and index built) after {c['dispatched_s']:.1f} s: "
              f"{c['dispatched_mb_s']:,.1f} MB/s = {c['dispatched_mb_s'] / c['fill_mb_s']:.2f}x"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts, 64 MiB backlog, 1 round")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per workload (default 3)")
    ap.add_argument("--backlog-mib", type=int, default=None, help="catch-up backlog (default 1024)")
    ap.add_argument("--json", default=None, help="result file (default bench/results/ha-<time>.json)")
    ap.add_argument("--quiet-max", type=float, default=None,
                    help="seconds to wait for an idle box before each run (default 10; quick: 0)")
    opts = ap.parse_args()
    sysmod.mqload()  # built now (or SystemExit), not in the middle of a run
    rounds = opts.rounds if opts.rounds is not None else (1 if opts.quick else 3)
    backlog_mib = opts.backlog_mib if opts.backlog_mib is not None else (64 if opts.quick else 1024)
    if rounds < 1 or backlog_mib < 1:
        ap.error("--rounds and --backlog-mib must be at least 1")
    quiet_max = opts.quiet_max if opts.quiet_max is not None else (0.0 if opts.quick else 10.0)
    root = Path(tempfile.mkdtemp(prefix="orbitmq-ha-bench-"))
    try:
        namesrv, started = start_sets(root)
        try:
            print(f"systems: {', '.join(s.name for s, _ in started)} (name server {namesrv})",
                  flush=True)
            results = run_publish(namesrv, started, opts.quick, rounds, quiet_max)
        finally:
            for _, bs in reversed(started):
                bs.close()
        catch_up = run_catch_up(root, backlog_mib * MiB)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    summary = summarize(results)
    print(render(summary, catch_up, opts.quick, rounds))
    doc = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": opts.quick,
                    "rounds": rounds, "cpus": os.cpu_count(),
                    "note": "one interleaved sitting on a shared machine: compare ratios only",
                    "acks": {name: acks for name, *_, acks in SYSTEMS}},
           "runs": results, "summary": summary, "catch_up": catch_up}
    path = (Path(opts.json) if opts.json
            else run_bench.RESULTS / f"ha-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"\nresults written to {path}")


if __name__ == "__main__":
    main()
