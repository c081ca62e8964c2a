"""The controller cluster (three etcd members, three SYNC_MASTER brokers, network namespaces)
under the network and clock faults alone: one-way cuts, bridges, an etcd member cut off from
the others (minority/majority) and a broker's clock stepped or drifting (libfaketime), from a
fixed seed, every history judged by the checker. About 80 s (the cluster's start, 40 s of
faults, the drain): behind ``--run-slow`` as the other long runs. Needs root (namespaces), etcd;
without libfaketime the clock faults are left out (the run's notes say so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.testing.chaos.harness import run
from orbitmq.testing.clock import clock_problem
from orbitmq.testing.etcd import etcd_binary
from orbitmq.testing.netns import netns_problem

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(etcd_binary() is None,
                       reason="etcd is not installed (Debian: apt-get install etcd-server)"),
    pytest.mark.skipif(netns_problem() is not None, reason=str(netns_problem())),
]

SEED = 10
MINUTES = 40 / 60  # 40 s of faults
FAULTS = ["one-way", "bridge", "isolate", "skew"]


def test_network_and_clock_faults_keep_the_sync_master_promise(tmp_path: Path) -> None:
    [report] = run(["controller"], SEED, MINUTES, tmp_path, faults=FAULTS)
    assert report.skipped is None, report.skipped
    assert report.error is None, f"seed {SEED}: {report.error}"
    assert report.verdict is not None
    kinds = {f.kind.value for f in report.schedule}
    assert {"one-way", "bridge"} <= kinds, kinds  # the seed still draws both network faults
    if clock_problem() is None:
        assert "skew" in kinds, kinds
    assert len(report.steps) == len(report.schedule)
    assert report.verdict.acknowledged > 0
    assert report.verdict.ok, report.verdict.text()
