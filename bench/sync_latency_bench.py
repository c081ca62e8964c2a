"""One-at-a-time SYNC_FLUSH sends, side by side: OrbitMQ trees and Redis ``appendfsync always``.

    .venv/bin/python bench/sync_latency_bench.py [--tree NAME=SRC_DIR ...] [--redis] [--nats]
        [--flush SYNC_FLUSH|ASYNC_FLUSH] [--rounds 3] [-n 3000] [--strace] [--workload sync|p4]
        [--warm N] [--fill] [--workload e2e --rate 1000 --secs 8]

Starts one ``orbitmq standalone --flush-disk-type SYNC_FLUSH`` per ``--tree`` (each with its own
``PYTHONPATH``: a baseline copy of ``src/`` next to the working tree) and, with ``--redis``,
redis-server set to ``appendfsync always``, then runs mqload ``-p 1 -w 1`` (one send in flight,
p50/p99) against each in turn, ``--rounds`` times, the order rotating: the machine's load hits
every system alike. Per run it prints the latencies, the server's CPU per message (user + system
ticks of the process, all threads), its busiest thread's CPU over the run's wall time (an event
loop's load) and, with ``--strace``, the server's syscalls per message
(``strace -c -f`` attached for the run: the count, not the time, is the figure to read; strace
slows every syscall). ``--workload p4`` runs ``-p 4 -w 1000`` instead (throughput).
``--flush ASYNC_FLUSH`` starts the brokers that way instead, next to NATS JetStream with
``--nats``: `make bench`'s ASYNC one-at-a-time line. ``--workload e2e`` runs mqload's end-to-end
mode instead (``-mode e2e -rate R`` for ``--secs`` seconds: a message's send to its delivery
to a long-polling consumer already waiting, p50/p99/p99.9), `make bench`'s ``e2e 1k`` line.

Not a test and not part of ``make bench``: the tool of the SYNC_FLUSH latency section of
bench/journal/PROFILE.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_bench  # noqa: E402  (bench/ is not a package)
import systems as sysmod  # noqa: E402

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _ticks(pid: int) -> int:
    return _ticks_of(Path(f"/proc/{pid}/stat"))


def _thread_ticks(pid: int) -> dict[str, int]:
    """User + system ticks of each of the process's threads, by thread id."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = _ticks_of(Path(f"/proc/{pid}/task/{tid}/stat"))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def _ticks_of(stat: Path) -> int:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _written(pid: int) -> int:
    """Bytes the process had the kernel write to disk (``/proc/PID/io`` write_bytes)."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def disk_sync_latency(base: str, rounds: int = 2000) -> str:
    """The disk alone, as Redis's AOF uses it: 1 KiB appended with write + fdatasync, ``rounds``
    times; p50/p99 of one round (the floor of one durable send, and its tail)."""
    path = os.path.join(base, "disk-probe.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    lat: list[float] = []
    try:
        chunk = os.urandom(1024)
        for _ in range(rounds):
            t0 = time.perf_counter()
            os.write(fd, chunk)
            os.fdatasync(fd)
            lat.append((time.perf_counter() - t0) * 1e6)
    finally:
        os.close(fd)
        os.remove(path)
    lat.sort()
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
    return f"disk write+fdatasync 1 KiB: p50={p50:.0f} p99={p99:.0f} us (p99/p50 {p99 / p50:.1f})"


def _orbitmq(name: str, src: str, base: str, flush: str) -> sysmod.System:
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    try:
        system = sysmod.orbitmq(flush, base)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    system.name = name
    return system


def _syscalls(text: str) -> dict[str, int]:
    """``strace -c`` table -> {syscall: calls}."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "").isdigit() and parts[-1] != "total":
            try:
                out[parts[-1]] = int(parts[3])
            except ValueError:
                continue
    return out


def run_one(system: sysmod.System, flags: list[str], strace: bool, run_id: int,
            workload: str = "sync p1") -> dict[str, object]:
    extra = system.prepare(workload, run_id)
    cmd = [sysmod.mqload(), "-sys", system.kind, *flags, *extra]
    tracer = None
    if strace and system.pid is not None:
        out = tempfile.mktemp(prefix="strace-", dir="/tmp")
        tracer = subprocess.Popen(["strace", "-c", "-f", "-o", out, "-p", str(system.pid)],
                                  stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached to every thread before the load starts
    t0 = _ticks(system.pid) if system.pid else 0
    threads0 = _thread_ticks(system.pid) if system.pid else {}
    w0 = _written(system.pid) if system.pid else 0
    wall0 = time.monotonic()
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    wall_s = time.monotonic() - wall0
    cpu_s = ((_ticks(system.pid) - t0) * TICK_S) if system.pid else 0.0
    threads1 = _thread_ticks(system.pid) if system.pid else {}
    busiest = max((threads1[t] - threads0[t] for t in threads1 if t in threads0), default=0)
    written = (_written(system.pid) - w0) if system.pid else 0
    rec: dict[str, object] = {}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            rec.update(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    n = int(rec.get("n", 0) or 0)
    rec["cpu_us_msg"] = round(cpu_s * 1e6 / n, 1) if n else None
    rec["written_kib_msg"] = round(written / 1024 / n, 1) if n else None
    # The busiest thread's share of the run: an event loop near 100% batches whatever comes,
    # and its queue sets the tail (docs/performance.md, "What bounds the p99").
    rec["busiest_thread_pct"] = round(100 * busiest * TICK_S / wall_s)
    if tracer is not None:
        tracer.terminate()
        tracer.wait(10)
        calls = _syscalls(Path(out).read_text())
        os.remove(out)
        rec["syscalls_msg"] = {k: round(v / n, 2) for k, v in sorted(
            calls.items(), key=lambda kv: -kv[1]) if n and v / n >= 0.05}
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=[],
                    help="NAME=SRC_DIR: an OrbitMQ tree (PYTHONPATH) to start; repeatable")
    ap.add_argument("--redis", action="store_true", help="Redis appendfsync always as well")
    ap.add_argument("--nats", action="store_true", help="NATS JetStream as well (the ASYNC peer)")
    ap.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="SYNC_FLUSH",
                    help="the OrbitMQ brokers' flush type")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=3000, help="sends per run")
    ap.add_argument("--maxsec", type=int, default=10)
    ap.add_argument("--strace", action="store_true", help="syscalls per message (strace -c -f)")
    ap.add_argument("--workload", choices=("sync", "p4", "e2e"), default="sync")
    ap.add_argument("--rate", type=int, default=1000, help="e2e: msgs/s")
    ap.add_argument("--secs", type=int, default=8, help="e2e: seconds of sending")
    ap.add_argument("--warm", type=int, default=100_000,
                    help="messages published first (w1000) to each OrbitMQ: `make bench` runs the "
                         "one-at-a-time sends after a million others, and the page cache of a "
                         "written segment behaves unlike a fresh one's (bench/journal/PROFILE.md)")
    ap.add_argument("--fill", action="store_true",
                    help="after --warm, `make bench`'s other publishing runs as well (4 producers, "
                         "200,000; batch 64, 640,000): a broker in the state the sitting's "
                         "one-at-a-time sends find it, 50-70 us slower at p50 than a fresh one")
    opts = ap.parse_args()
    trees = [t.split("=", 1) for t in opts.tree] or [["orbitmq", str(sysmod.ROOT / "src")]]
    base = tempfile.mkdtemp(prefix="orbitmq-synclat-")
    started: list[sysmod.System] = []
    try:
        for name, src in trees:
            started.append(_orbitmq(name, src, base, opts.flush))
        if opts.redis:
            started += sysmod.redis(["always"])
        if opts.nats:
            started.append(sysmod.nats())
        for system in started:
            if opts.warm and system.kind == "rocketmq":
                subprocess.run([sysmod.mqload(), "-sys", "rocketmq", "-n", str(opts.warm), "-p", "1",
                                "-w", "1000", *system.prepare("pub p1", 0)], capture_output=True,
                               timeout=600)
            if opts.fill and system.kind == "rocketmq":
                for workload, flags, _ in run_bench.workloads(quick=False):
                    if workload in ("pub p4", "batch64"):  # what a sitting publishes besides
                        subprocess.run([sysmod.mqload(), "-sys", "rocketmq", *flags,
                                        *system.prepare(workload, 0)], capture_output=True,
                                       timeout=600)
        if opts.workload == "sync":
            flags = ["-n", str(opts.n), "-p", "1", "-w", "1", "-maxsec", str(opts.maxsec)]
        elif opts.workload == "e2e":
            flags = ["-mode", "e2e", "-rate", str(opts.rate), "-n", str(opts.rate * opts.secs),
                     "-maxsec", str(opts.secs + run_bench.E2E_SLACK_S)]
        else:
            flags = ["-n", str(opts.n), "-p", "4", "-w", "1000", "-maxsec", str(opts.maxsec)]
        workload = "e2e 1k" if opts.workload == "e2e" else "sync p1"
        for r in range(opts.rounds):
            order = started[r % len(started):] + started[:r % len(started)]
            print(f"round {r} {disk_sync_latency(base)}", flush=True)
            for system in order:
                rec = run_one(system, flags, opts.strace, r, workload)
                line = (f"round {r} {system.name:<14} n={rec.get('n')} msgs/s={rec.get('msgs_s')}"
                        f" p50={rec.get('p50_us')} p90={rec.get('p90_us')} p99={rec.get('p99_us')}"
                        f" us  server cpu/msg={rec['cpu_us_msg']} us"
                        f"  disk writes/msg={rec['written_kib_msg']} KiB"
                        f"  busiest thread={rec['busiest_thread_pct']}% of the run")
                if opts.workload == "e2e":
                    line += (f"\n    e2e p50={rec.get('e2e_p50_us')} p90={rec.get('e2e_p90_us')}"
                             f" p99={rec.get('e2e_p99_us')} p99.9={rec.get('e2e_p999_us')}"
                             f" max={rec.get('e2e_max_us')} us lost={rec.get('e2e_lost')}"
                             f" behind_max={rec.get('behind_max_us')} us")
                    if "e2e_tail_in_us" in rec:  # the split at the store time (mqload's e2e.c)
                        line += (f"\n    in p50={rec['e2e_in_p50_us']} p99={rec['e2e_in_p99_us']}"
                                 f" out p50={rec['e2e_out_p50_us']} p99={rec['e2e_out_p99_us']}"
                                 f" slowest 1%: in {rec['e2e_tail_in_us']} out "
                                 f"{rec['e2e_tail_out_us']} us")
                if "syscalls_msg" in rec:
                    line += f"\n    syscalls/msg {rec['syscalls_msg']}"
                print(line, flush=True)
    finally:
        for system in started:
            system.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
