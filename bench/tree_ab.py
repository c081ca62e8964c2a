"""This tree's broker against another tree's, side by side in one sitting: "no worse than the
tree before" measured as a ratio, not as two sittings' figures.

    .venv/bin/python bench/tree_ab.py --base ../orbitmq-before --flush SYNC_FLUSH -n 1000000

Both brokers (``orbitmq standalone``, fresh stores) run at once, started with each tree's own
``.venv/bin/python``; mqload then loads them in turn (which goes first alternates), ``--reps``
times each, a new topic a run: one producer publishing (``pub``), and with ``--consume`` a
consumer reading what that run wrote (``sub``). Prints every run and the medians' ratio (this
tree / base); raw results go to bench/results/tree-ab-<time>.json. The base tree needs its venv
(``make install`` there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import systems

ROOT = Path(__file__).resolve().parent.parent
RUN_MAX_S = 120  # one mqload run at most


def _mqload(tool: str, addr: str, topic: str, mode: str, n: int) -> dict[str, str]:
    args = [tool, "-sys", "rocketmq", "-n", str(n), "-maxsec", str(RUN_MAX_S),
            "-addr", addr, "-q", topic]
    args += ["-mode", "sub"] if mode == "sub" else ["-p", "1", "-w", "1000"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=RUN_MAX_S + 30).stdout
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT")), "")
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the other tree (its .venv/bin/python runs)")
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    parser.add_argument("-n", type=int, default=1_000_000, help="messages a run")
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--consume", action="store_true", help="also read each run's messages")
    parser.add_argument("--json", default=None)
    a = parser.parse_args()
    base_python = Path(a.base).resolve() / ".venv" / "bin" / "python"
    if not base_python.exists():
        raise SystemExit(f"{base_python} is missing: run `make install` in {a.base}")
    tool = systems.mqload()
    stores = tempfile.mkdtemp(prefix="orbitmq-tree-ab-")
    trees = {"base": systems.orbitmq(a.flush, stores, python=str(base_python)),
             "this": systems.orbitmq(a.flush, stores)}
    runs: list[dict[str, object]] = []
    try:
        for rep in range(a.reps):
            # Which tree goes first alternates: the one loaded second ran faster (base against
            # itself, 6 runs of 200,000: 1.16x publishing), its page cache and CPUs warmer.
            order = list(trees.items())
            for name, system in order if rep % 2 == 0 else reversed(order):
                addr = system.addrs["broker"]
                topic = f"tree-ab-{name}-{rep}"
                for mode in ("pub", "sub") if a.consume else ("pub",):
                    r = _mqload(tool, addr, topic, mode, a.n)
                    runs.append({"tree": name, "rep": rep, "mode": mode, **r})
                    print(f"{name:4} {rep} {mode}  {int(r.get('msgs_s', 0)):>10,} msgs/s  "
                          f"p50 {r.get('p50_us', '-')} us", flush=True)
    finally:
        for system in trees.values():
            system.stop()
    ratios = {}
    for mode in ("pub", "sub") if a.consume else ("pub",):
        med = {t: statistics.median(float(str(r.get("msgs_s", 0))) for r in runs
                                    if r["tree"] == t and r["mode"] == mode) for t in trees}
        ratios[mode] = round(med["this"] / med["base"], 3) if med["base"] else None
        print(f"{a.flush} {mode}: this tree / base (medians of {a.reps}) {ratios[mode]}")
    out = Path(a.json or ROOT / "bench" / "results" /
               f"tree-ab-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"base": str(Path(a.base).resolve()), "flush": a.flush, "n": a.n,
                               "runs": runs, "ratios": ratios}, indent=1))
    print(f"results written to {out}")


if __name__ == "__main__":
    sys.exit(main())
