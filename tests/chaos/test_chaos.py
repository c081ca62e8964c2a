"""The chaos harness (docs/chaos.md, ``make chaos``) inside the test suite: real servers under a
seeded schedule of faults, every history judged by the checker (orbitmq.testing.chaos).

``make test`` runs 18 s of faults on each of a standalone server (SYNC_FLUSH) and a SYNC_MASTER
set with seed 4, the SDK's writers joined by the C++ client's (.venv-compat) and, on the
standalone server and the set's master, the 5.x gRPC client's (.venv-rmq5) when their venvs are
there (two kill -9 and a pause of the standalone; the slave's newest segment cut mid-message
while it is down, a bit flipped in it while it runs, and a kill -9 of the master). ``--run-slow`` runs every cluster, controller mode with etcd and its
partitions included, for ``CHAOS_MINUTES`` (default 5) with ``CHAOS_SEED`` or a fresh seed.
Each run prints its seed, its schedule and its verdicts (``pytest -s`` shows them): the
total-queue checker's, the POP lease checker's (the 5.x SimpleConsumer reading the standalone
server and the set's master), the replicas' final logs compared (the SYNC_MASTER set) and the
failover timeline.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orbitmq.testing.chaos.clusters import CLUSTER_KINDS
from orbitmq.testing.chaos.harness import Clients, ClusterReport, find_clients, fresh_seed, run

REPO = Path(__file__).resolve().parents[2]
SHORT_SEED = 4
SHORT_MINUTES = 0.6  # 18 s of faults per cluster: about 50 s with the starts and the drains
SLOW_MINUTES_DEFAULT = 5.0


def _clients() -> Clients:
    """The official clients write beside the SDK when their venvs are there (make install
    makes them); a missing one is said and left out."""
    return find_clients(Path(os.environ.get("COMPAT_VENV") or REPO / ".venv-compat"),
                        Path(os.environ.get("RMQ5_VENV") or REPO / ".venv-rmq5"))


def _assert_held(reports: list[ClusterReport]) -> None:
    for r in reports:
        if r.skipped:
            continue
        assert r.error is None, f"{r.cluster}, seed {r.seed}: {r.error}"
        assert r.verdict is not None
        assert r.steps and len(r.steps) == len(r.schedule), (r.cluster, r.steps)
        assert r.verdict.acknowledged > 0 and r.verdict.reads >= r.verdict.acknowledged
        assert r.verdict.ok, f"{r.cluster}, seed {r.seed}:\n{r.verdict.text()}"
        # the failover timeline: every step with its times, the write gaps measured
        assert r.timeline is not None and len(r.timeline.spans) == len(r.schedule)
        assert r.timeline.longest_gap is not None
        if r.leases is not None:  # the POP reader (the 5.x SimpleConsumer) ran
            assert r.leases.ok, f"{r.cluster}, seed {r.seed}:\n{r.leases.text()}"
            assert r.leases.deliveries > 0 and r.leases.lost == []
        if r.replicas is not None:  # every replica's final log against the master's
            assert r.replicas.replica_divergent == 0, r.replicas.text()
        assert r.ok


def test_a_short_seeded_chaos_run_keeps_every_promise(tmp_path: Path) -> None:
    clients = _clients()
    reports = run(["standalone", "master-slave"], SHORT_SEED, SHORT_MINUTES, tmp_path,
                  clients=clients)
    kinds = {(r.cluster, f.kind.value, f.target) for r in reports for f in r.schedule}
    assert ("standalone", "kill -9", "standalone") in kinds  # the seed still breaks what it did
    assert ("master-slave", "kill -9", "master") in kinds
    assert ("master-slave", "bitflip", "slave") in kinds
    assert ("master-slave", "truncate", "slave-stopped") in kinds
    _assert_held(reports)
    by_kind = {r.cluster: r for r in reports}
    pair = by_kind["master-slave"].replicas
    assert pair is not None and set(pair.replicas) == {"broker 0", "broker 1"}
    assert pair.replicas["broker 1"] > 0  # the slave's log was read, not just found empty
    if clients.rmq5 is not None:  # a POP reader on each (both keep a gRPC endpoint)
        for r in reports:
            assert r.leases is not None, r.cluster
            assert r.leases.redelivered > 0  # the leases left to run out came back


@pytest.mark.slow
def test_a_long_chaos_run_of_every_cluster_keeps_every_promise(tmp_path: Path) -> None:
    seed = int(os.environ.get("CHAOS_SEED") or fresh_seed())
    minutes = float(os.environ.get("CHAOS_MINUTES") or SLOW_MINUTES_DEFAULT)
    _assert_held(run(list(CLUSTER_KINDS), seed, minutes, tmp_path, clients=_clients()))
