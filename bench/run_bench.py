"""`make bench`: OrbitMQ next to Redis streams, NATS JetStream and RabbitMQ, one mqload run each.

    .venv/bin/python bench/run_bench.py [--quick] [--systems a,b,...] [--json PATH]
                                        [--e2e-seconds S]

Starts OrbitMQ standalone twice (ASYNC_FLUSH and SYNC_FLUSH), OrbitMQ's bare-transport sink, and
every installed peer (`make bench-peers` installs them), then runs the same workloads of the
project's load tool, mqload (bench/mqload/, C, built on first use by bench/mqload/build.sh),
against all of them: workload by workload, the systems taking turns (the order rotates), so that a
change in the machine's load hits every system alike. OrbitMQ with authentication and
authorization on (``orbitmq-auth-on``) and the same build with both off (``orbitmq-auth-off``)
take their turns too, the publish load signed on the first (mqload ``-ak``/``-sk``), as does
``orbitmq-auth-on-stateful`` (both on, the stateful authentication strategy),
with ``orbitmq-auth-off-signing`` (the second's broker, the load signed all the same) to tell what
signing costs the load tool from what checking costs the broker. Last, the end-to-end workloads
(mqload ``-mode e2e``: a consumer already waiting and a producer at a fixed rate in one process,
each message's delivery time minus its send time) for the systems in :data:`E2E_SYSTEMS`: at
1,000 msgs/s (``e2e 1k``), as fast as the producer's window lets it (``e2e max``: the rate the
whole pipe carries, producer and consumer at once), and at half the rate that system's ``e2e
max`` run carried in this sitting (``e2e 50%``). Prints one table of msgs/s (p50/p99 for the
one-at-a-time sends and the end-to-end runs), OrbitMQ's ratio to each peer and the targets
(docs/performance.md), and writes the results as JSON under bench/results/. Figures are meaningful only as ratios within one run: the machine is
shared and its speed varies by tens of percent. ``--quick`` (small counts, no idle wait) finishes
in well under a minute against OrbitMQ alone; tests/bench/test_bench_quick.py runs it in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402  (bench/ is not a package)
import systems as sysmod  # noqa: E402

RESULTS = sysmod.ROOT / "bench" / "results"
ALL = ["orbitmq-async", "orbitmq-async-prom", "orbitmq-sync", "orbitmq-sink", "orbitmq-auth-on",
       "orbitmq-auth-on-stateful", "orbitmq-auth-off", "redis-everysec", "redis-always", "nats-js", "rabbit-quorum",
       "rabbit-classic"]
# The end-to-end workloads' systems: OrbitMQ and the peers acknowledging alike (before fsync);
# mqload has no e2e mode for RabbitMQ.
E2E_SYSTEMS = frozenset({"orbitmq-async", "redis-everysec", "nats-js"})
E2E_KINDS = {"rocketmq", "redis", "nats"}
E2E_1K_RATE = 1_000
E2E_MAX_RATE = 10_000_000  # mqload's -rate bound: the producer's window of 1,000 sets the pace
E2E_MAX_SENDS_PER_S = 400_000  # the ``e2e max`` run's count a second of sending (mqload's arrays)
E2E_HALF = 0.5  # of the system's own ``e2e max`` rate in this sitting
E2E_SLACK_S = 15  # -maxsec past the planned sending time, for a producer that falls behind


def workloads(quick: bool) -> list[tuple[str, list[str], set[str] | None]]:
    """(name, mqload flags, kinds it applies to or None for all). ``sub`` reads what ``pub p1``
    wrote, so it comes right after it."""
    n, n_batch, n_sync = (5_000, 12_800, 400) if quick else (200_000, 640_000, 20_000)
    sec, sync_sec = ("10", "5") if quick else ("40", "15")
    # ``-rate``, ``-n`` and ``-maxsec`` of the e2e runs: e2e_flags, once the rate is known.
    return [
        ("pub p1", ["-n", str(n), "-p", "1", "-w", "1000", "-maxsec", sec], None),
        ("sub", ["-mode", "sub", "-n", str(n), "-maxsec", sec], None),
        ("pub p4", ["-n", str(n), "-p", "4", "-w", "1000", "-maxsec", sec], None),
        ("batch64", ["-n", str(n_batch), "-p", "1", "-batch", "64", "-w", "16", "-maxsec", sec],
         {"rocketmq"}),
        ("sync p1", ["-n", str(n_sync), "-p", "1", "-w", "1", "-maxsec", sync_sec], None),
        ("e2e 1k", ["-mode", "e2e"], E2E_KINDS),
        ("e2e max", ["-mode", "e2e"], E2E_KINDS),
        ("e2e 50%", ["-mode", "e2e"], E2E_KINDS),
    ]


def e2e_seconds(workload: str, quick: bool, override: int | None = None) -> int:
    """How long an e2e workload sends (``override``: --e2e-seconds): long enough for a p99.9 of
    1,000s of deliveries."""
    if override is not None:
        return override
    if workload == "e2e 1k":
        return 2 if quick else 20
    if workload == "e2e max":
        return 1 if quick else 5
    return 1 if quick else 8


def e2e_flags(workload: str, system: str, results: list[dict[str, Any]], quick: bool,
              seconds: int | None = None) -> list[str] | str:
    """mqload's rate, count and time bound for an e2e workload against ``system``; or why it
    cannot run (``e2e 50%`` needs the system's ``e2e max`` rate of this sitting)."""
    secs = e2e_seconds(workload, quick, seconds)
    if workload == "e2e 1k":
        rate = E2E_1K_RATE
    elif workload == "e2e max":
        # Sending stops at -maxsec; what is still on its way has mqload's drain time to arrive.
        return ["-rate", str(E2E_MAX_RATE), "-n", str(E2E_MAX_SENDS_PER_S * secs),
                "-maxsec", str(secs)]
    else:
        top = next((r for r in results if r["system"] == system and r["workload"] == "e2e max"
                    and float(r.get("e2e_msgs_s", 0)) > 0), None)
        if top is None:
            return "no e2e max rate of this system in this sitting to take half of"
        rate = max(1, int(float(top["e2e_msgs_s"]) * E2E_HALF))
    return ["-rate", str(rate), "-n", str(rate * secs), "-maxsec", str(secs + E2E_SLACK_S)]


# ----------------------------------------------------------------------------------- measuring
def _ticks(pid: int | None) -> int:
    if pid is None:
        return 0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) ticks of all the machine's CPUs so far (/proc/stat), for its busy share
    during a run: what a latency tail under load waits on when it is near 100%."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _rss_mb(pid: int | None) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MB (0 when unknown)."""
    if pid is None:
        return 0.0, 0.0
    values = {"VmRSS:": 0.0, "VmHWM:": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key = line.split(" ", 1)[0].split("\t", 1)[0]
            if key in values:
                values[key] = int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return values["VmRSS:"], values["VmHWM:"]


def load_run(system: sysmod.System, workload: str, flags: list[str], run_id: int) -> dict[str, Any]:
    """One mqload run with the server's CPU and memory; never raises for a failed run."""
    extra = system.prepare(workload, run_id)
    cmd = [sysmod.mqload(), "-sys", system.kind, *flags, *extra]
    hz = os.sysconf("SC_CLK_TCK")
    t0, s0, m0 = time.monotonic(), _ticks(system.pid), _cpu_ticks()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        text, rc = out.stdout + out.stderr, out.returncode
    except subprocess.TimeoutExpired:
        text, rc = "timed out", -1
    elapsed = time.monotonic() - t0
    r1, m1 = resource.getrusage(resource.RUSAGE_CHILDREN), _cpu_ticks()
    rss, peak = _rss_mb(system.pid)
    rec: dict[str, Any] = {"system": system.name, "workload": workload, "cmd": " ".join(cmd),
                           "rc": rc, "elapsed_s": round(elapsed, 2),
                           "server_cpu_pct": round((_ticks(system.pid) - s0) / hz / elapsed * 100),
                           "client_cpu_pct": round((r1.ru_utime - r0.ru_utime + r1.ru_stime
                                                    - r0.ru_stime) / elapsed * 100),
                           "machine_busy_pct": round(100 * (m1[0] - m0[0]) / max(1, m1[1] - m0[1])),
                           "server_rss_mb": round(rss, 1), "server_peak_rss_mb": round(peak, 1)}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            rec.update(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    if "msgs_s" not in rec:
        rec["error"] = text.strip()[-600:]
    return rec


def page_cache_rate(path: str, total: int) -> float:
    """MB/s of ``total`` bytes written in 64 KiB writes (no sync timed) into a new file at ``path``.
    The file is left for the caller to remove: removed at once, its pages would go back to the
    free memory that whatever runs next writes into."""
    chunk = os.urandom(64 * 1024)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        t0, written = time.perf_counter(), 0
        while written < total:
            written += os.write(fd, chunk)
        rate = written / (time.perf_counter() - t0) / 1e6
        os.fdatasync(fd)  # not timed: its write-back is not left to run beside what comes next
        return rate
    finally:
        os.close(fd)


def baselines(base: str, quick: bool) -> dict[str, Any]:
    """The disk, measured at the start of the run: page-cache write speed (64 KiB writes, no
    sync) and how many 1 KiB write+fdatasync rounds a second it takes."""
    path = os.path.join(base, "baseline.bin")
    page_cache_mb_s = page_cache_rate(path, (64 if quick else 512) * 1024 * 1024)
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        rounds_us, t0, small = [], time.perf_counter(), os.urandom(1024)
        while time.perf_counter() - t0 < (0.5 if quick else 2.0):
            began = time.perf_counter()
            os.write(fd, small)
            os.fdatasync(fd)
            rounds_us.append((time.perf_counter() - began) * 1e6)
        fdatasync_per_s = len(rounds_us) / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        os.remove(path)
    rounds_us.sort()
    p50, p99 = rounds_us[len(rounds_us) // 2], rounds_us[min(len(rounds_us) - 1, len(rounds_us) * 99 // 100)]
    # The disk's own spread: a sync-bound p99/p50 cannot be below it.
    return {"page_cache_write_mb_s": round(page_cache_mb_s, 1),
            "page_cache_1k_msgs_s": round(page_cache_mb_s * 1e6 / 1024),
            "fdatasync_per_s": round(fdatasync_per_s),
            "fdatasync_p50_us": round(p50), "fdatasync_p99_us": round(p99)}


# ----------------------------------------------------------------------------------- running
def start_systems(wanted: list[str], store_base: str,
                  started: list[sysmod.System]) -> list[str]:
    """Starts what is wanted and installed into ``started`` (filled as they start: a failure
    leaves the caller what to stop); returns notes on what was skipped."""
    notes: list[str] = []
    makers = {"orbitmq-async": lambda: [sysmod.orbitmq("ASYNC_FLUSH", store_base)],
              "orbitmq-async-prom": lambda: [sysmod.orbitmq("ASYNC_FLUSH", store_base, True)],
              "orbitmq-sync": lambda: [sysmod.orbitmq("SYNC_FLUSH", store_base)],
              "orbitmq-sink": lambda: [sysmod.sink()]}
    for name in makers:
        if name in wanted:
            started += makers[name]()
    # Access control on and off: the same build, the same signing load tool.
    for name in ("orbitmq-auth-on", "orbitmq-auth-on-stateful", "orbitmq-auth-off"):
        if name in wanted:
            started += sysmod.orbitmq_auth(name != "orbitmq-auth-off", store_base,
                                           stateful=name == "orbitmq-auth-on-stateful")
    groups = [("redis", [w.split("-", 1)[1] for w in wanted if w.startswith("redis-")]),
              ("nats", ["js"] if "nats-js" in wanted else []),
              ("rabbit", [f"bench-{w.split('-', 1)[1]}" for w in wanted if w.startswith("rabbit-")])]
    for peer, variants in groups:
        if not variants:
            continue
        why = sysmod.peer_unavailable(peer)
        if why:
            notes.append(f"{peer}: {why}")
            continue
        try:
            if peer == "redis":
                started += sysmod.redis(variants)
            elif peer == "nats":
                started.append(sysmod.nats())
            else:
                started += sysmod.rabbit(variants)
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            notes.append(f"{peer}: could not start: {e}")
    return notes


def run_all(started: list[sysmod.System], quick: bool, quiet_max_s: float, base: str,
            e2e_secs: int | None = None) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every workload against every system; and the page cache's write speed measured right
    before and right after the batch workload, each over as many bytes as one of its runs
    writes: on this machine (a VM guest whose freed memory goes back to the host) writing pages
    of memory it has not touched lately runs at a fraction of the speed of the first ones, so the
    rate measured at the start of the sitting says little about the rate at that point."""
    results: list[dict[str, Any]] = []
    around_batch: dict[str, float] = {}
    for turn, (workload, flags, kinds) in enumerate(workloads(quick)):
        order = started[turn % len(started):] + started[:turn % len(started)]
        probes = []
        if workload == "batch64" and any(kinds is None or s.kind in kinds for s in started):
            volume = int(flags[flags.index("-n") + 1]) * 1024
            probes = [os.path.join(base, f"page-cache-{when}.bin") for when in ("before", "after")]
            around_batch["before_mb_s"] = round(page_cache_rate(probes[0], volume), 1)
        for system in order:
            if kinds is not None and system.kind not in kinds:
                continue
            if system.name == "orbitmq-sink" and workload in ("sub", "sync p1"):
                continue  # the sink stores nothing to consume, and its latency is not a broker's
            if system.workloads is not None and workload not in system.workloads:
                continue  # the signed rows publish only
            run_flags = flags
            if workload.startswith("e2e"):
                if system.name not in E2E_SYSTEMS:
                    continue
                extra = e2e_flags(workload, system.name, results, quick, e2e_secs)
                if isinstance(extra, str):
                    results.append({"system": system.name, "workload": workload, "error": extra})
                    continue
                run_flags = flags + extra
            if quiet_max_s > 0:
                subprocess.run([sys.executable, str(sysmod.PEERS / "quiet.py"), str(quiet_max_s),
                                "15"], capture_output=True)
            rec = load_run(system, workload, run_flags, run_id=turn)
            lat = (f"e2e p50/p99/p99.9 {rec.get('e2e_p50_us', '-')}/{rec.get('e2e_p99_us', '-')}/"
                   f"{rec.get('e2e_p999_us', '-')} us" if workload.startswith("e2e")
                   else f"p50 {rec.get('p50_us', '-')} us")
            print(f"  {system.name:<15} {workload:<8} {rec.get('msgs_s', 'FAILED'):>10} msgs/s"
                  f"  {lat}  server cpu {rec['server_cpu_pct']}%", flush=True)
            results.append(rec)
        if probes:
            around_batch["after_mb_s"] = round(page_cache_rate(probes[1], volume), 1)
            for path in probes:
                os.remove(path)
    return results, around_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small counts, no idle wait (< 1 min)")
    ap.add_argument("--systems", default=",".join(ALL), help=f"comma list out of {','.join(ALL)}")
    ap.add_argument("--json", default=None, help="result file (default bench/results/bench-<time>.json)")
    ap.add_argument("--quiet-max", type=float, default=None,
                    help="seconds to wait for an idle box before each run (default 10; quick: 0)")
    ap.add_argument("--e2e-seconds", type=int, default=None,
                    help="sending time of each end-to-end run (default 20 at 1,000 msgs/s and 8 at "
                         "50%%; quick: 2 and 1)")
    opts = ap.parse_args()
    sysmod.mqload()  # built now (or SystemExit), not in the middle of a run
    wanted = [s for s in opts.systems.split(",") if s]
    unknown = [s for s in wanted if s not in ALL]
    if unknown:
        raise SystemExit(f"--systems: unknown {', '.join(unknown)} (known: {', '.join(ALL)})")
    if opts.e2e_seconds is not None and not 1 <= opts.e2e_seconds <= 600:
        raise SystemExit(f"--e2e-seconds {opts.e2e_seconds}: expected 1..600")
    quiet_max = opts.quiet_max if opts.quiet_max is not None else (0.0 if opts.quick else 10.0)
    base = tempfile.mkdtemp(prefix="orbitmq-bench-")
    started: list[sysmod.System] = []
    try:
        disk = baselines(base, opts.quick)
        notes = start_systems(wanted, base, started)
        if not started:
            raise SystemExit("nothing to benchmark: " + "; ".join(notes))
        print(f"systems: {', '.join(s.name for s in started)}" + (f"  ({'; '.join(notes)})" if notes else ""))
        results, around_batch = run_all(started, opts.quick, quiet_max, base, opts.e2e_seconds)
        if around_batch:
            rate = max(around_batch.values())
            disk.update({"page_cache_at_batch64_mb_s": around_batch,
                         "page_cache_at_batch64_1k_msgs_s": round(rate * 1e6 / 1024)})
    finally:
        for system in reversed(started):
            try:
                system.stop()
            except Exception as e:  # keep stopping the others
                print(f"stopping {system.name} failed: {e}", file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)
    doc = report.build(results, disk, started, notes, opts.quick)
    print(report.render(doc))
    path = Path(opts.json) if opts.json else RESULTS / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"\nresults written to {path}")


if __name__ == "__main__":
    main()
