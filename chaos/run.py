"""``make chaos``: real servers, a seeded schedule of faults, one checker (docs/chaos.md).

    CHAOS_MINUTES=3 CHAOS_SEED=1234 .venv/bin/python chaos/run.py [--clusters standalone,...]

``CHAOS_MINUTES`` (default 3) is the time of faults, shared by the clusters; ``CHAOS_SEED``
(default: a fresh one, printed) fixes every cluster's schedule, so a run is replayed from the
seed it printed. Exits 1 when a promise was broken or a cluster failed, 0 otherwise (a cluster
this machine cannot run is skipped, saying why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from orbitmq.testing.chaos.clusters import CLUSTER_KINDS
from orbitmq.testing.chaos.harness import Clients, find_clients, fresh_seed, run
from orbitmq.testing.chaos.schedule import FaultKind

MINUTES_DEFAULT = 3.0
REPO = Path(__file__).resolve().parents[1]
COMPAT_VENV = Path(os.environ.get("COMPAT_VENV") or REPO / ".venv-compat")
RMQ5_VENV = Path(os.environ.get("RMQ5_VENV") or REPO / ".venv-rmq5")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float,
                        default=float(os.environ.get("CHAOS_MINUTES", MINUTES_DEFAULT)),
                        help="minutes of faults, all clusters together (env CHAOS_MINUTES)")
    env_seed = os.environ.get("CHAOS_SEED")
    parser.add_argument("--seed", type=int, default=int(env_seed) if env_seed else None,
                        help="the run's seed (env CHAOS_SEED; default: a fresh one)")
    parser.add_argument("--clusters", default=",".join(CLUSTER_KINDS),
                        help=f"comma-separated, of {', '.join(CLUSTER_KINDS)}")
    parser.add_argument("--faults", default=None,
                        help="comma-separated fault kinds to draw from (e.g. one-way,bridge,skew;"
                             " default: every kind each cluster offers)")
    parser.add_argument("--root", type=Path, default=None,
                        help="where the stores go (default: a temporary directory, removed)")
    parser.add_argument("--sdk-only", action="store_true",
                        help="no writers through the official C++ (.venv-compat) and 5.x gRPC "
                             "(.venv-rmq5) clients, even when installed")
    parser.add_argument("--report", type=Path, default=None,
                        help="also write the results (one row per cluster) as JSON here")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else fresh_seed()
    kinds = [k.strip() for k in args.clusters.split(",") if k.strip()]
    for kind in kinds:
        if kind not in CLUSTER_KINDS:
            parser.error(f"unknown cluster {kind!r} (one of {', '.join(CLUSTER_KINDS)})")
    faults = [f.strip() for f in args.faults.split(",") if f.strip()] if args.faults else None
    known = {k.value for k in FaultKind}
    for fault in faults or []:
        if fault not in known:
            parser.error(f"unknown fault kind {fault!r} (one of {', '.join(sorted(known))})")
    clients = Clients() if args.sdk_only else find_clients(
        COMPAT_VENV, RMQ5_VENV, out=lambda s: print(s, flush=True))
    with tempfile.TemporaryDirectory(prefix="orbitmq-chaos-") as tmp:
        root = args.root or Path(tmp)
        reports = run(kinds, seed, args.minutes, root, out=lambda s: print(s, flush=True),
                      clients=clients, faults=faults)
    if args.report is not None:
        rows = [{**r.summary(), "schedule": [f.text() for f in r.schedule], "steps": r.steps,
                 "error": r.error, **r.details()} for r in reports]
        args.report.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
