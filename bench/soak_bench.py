"""Memory under volume: OrbitMQ standalone stores and serves N messages while its RSS is sampled.

    .venv/bin/python bench/soak_bench.py [--messages 10000000] [--flush ASYNC_FLUSH] [--dir DIR]

mqload publishes N 1 KiB messages in batches of 64 (the fastest way in), then pulls them all
back from offset 0; a sampler reads the broker's /proc status every 0.5 s. The issue's target:
RSS under 300 MB for 10 million messages stored and consumed. Reported: peak RSS, split into
anonymous memory (the Python heap) and file pages (mapped segments), and how both moved over
the run, with the phase rates. Needs about 1.2 KB of disk per message in ``--dir``. Not a test.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import systems as sysmod  # noqa: E402

FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def status_mb(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in FIELDS:
            out[key] = int(rest.split()[0]) / 1024
    return out


class Sampler(threading.Thread):
    """Samples a process's memory until stopped; keeps every sample (bounded by the run)."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval_s = pid, interval_s
        self.samples: list[dict[str, float]] = []
        self._halt = threading.Event()
        self.phase = "start"

    def run(self) -> None:
        t0 = time.monotonic()
        while not self._halt.wait(self.interval_s):
            try:
                self.samples.append({"t": round(time.monotonic() - t0, 1), "phase": self.phase,
                                     **status_mb(self.pid)})  # type: ignore[dict-item]
            except OSError:
                return

    def stop(self) -> None:
        self._halt.set()
        self.join(5)


def mqload(addr: str, args: list[str], timeout_s: float) -> dict[str, str]:
    out = subprocess.run([sysmod.mqload(), "-sys", "rocketmq", "-addr", addr, "-q", "soak", *args],
                         capture_output=True, text=True, timeout=timeout_s)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    raise SystemExit(f"mqload failed: {out.stdout[-500:]} {out.stderr[-500:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000_000)
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    ap.add_argument("--json", default=None)
    opts = ap.parse_args()
    base = tempfile.mkdtemp(prefix="orbitmq-soak-", dir=opts.dir)
    server = sysmod.orbitmq(opts.flush, base)
    assert server.pid is not None
    sampler = Sampler(server.pid)
    sampler.start()
    n, budget = opts.messages, max(600.0, opts.messages / 5_000)
    phases: dict[str, Any] = {}
    try:
        sampler.phase = "publish"
        phases["publish"] = mqload(server.addrs["broker"], ["-n", str(n), "-batch", "64", "-w", "16",
                                                             "-maxsec", str(budget)], budget + 60)
        sampler.phase = "consume"
        phases["consume"] = mqload(server.addrs["broker"], ["-mode", "sub", "-n", str(n),
                                                             "-maxsec", str(budget)], budget + 60)
        sampler.phase = "idle"
        time.sleep(2)
    finally:
        try:
            sampler.stop()
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)
    report(opts, phases, sampler.samples)


def report(opts: argparse.Namespace, phases: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    peak = max(samples, key=lambda s: s.get("VmRSS", 0)) if samples else {}
    print(f"soak: {opts.messages:,} x 1 KiB, {opts.flush}")
    for name, res in phases.items():
        print(f"  {name:<8} {float(res['msgs_s']):>10,.0f} msgs/s  n={res['n']}  errors={res.get('errors', '0')}")
    print(f"  peak RSS {peak.get('VmRSS', 0):,.0f} MB (anon {peak.get('RssAnon', 0):,.0f}, "
          f"file {peak.get('RssFile', 0):,.0f}) at {peak.get('t')} s, phase {peak.get('phase')}; "
          f"target < 300 MB: {'met' if peak.get('VmRSS', 1e9) < 300 else 'NOT met'}")
    for phase in ("publish", "consume"):
        part = [s for s in samples if s["phase"] == phase]
        if part:
            print(f"  {phase:<8} RSS {part[0]['VmRSS']:,.0f} -> {part[-1]['VmRSS']:,.0f} MB, "
                  f"anon {part[0]['RssAnon']:,.0f} -> {part[-1]['RssAnon']:,.0f} MB")
    path = Path(opts.json) if opts.json else (
        sysmod.ROOT / "bench" / "results" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"messages": opts.messages, "flush": opts.flush, "phases": phases,
                                "peak": peak, "samples": samples}, indent=1))
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
