"""A bit flipped in a slave's commit log segment, under the running broker's mapping
(docs/replication.md, "Corruption"): over real sockets, no pull from the slave ever carries the
damaged message, the slave says so (its log line, ``orbitmq_store_corrupt_messages_total``),
takes the rest again from its master and then serves the master's bytes."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from replication_support import (
    Namesrv,
    caught_up,
    commit_log_bytes,
    connected,
    master_config,
    slave_config,
    wait_for,
)
from test_broker_support import BrokerHarness

from orbitmq.config import MetricsExporterType
from orbitmq.protocol.codes import ResponseCode
from orbitmq.testing.corrupt import damage_segment

TOPIC = "CorruptTopic"
SEGMENT = 64 * 1024
COUNT = 150  # ~1.2 KiB each: a few segments


@pytest.fixture
def ns() -> Iterator[Namesrv]:
    server = Namesrv()
    yield server
    server.close()


def _metric(h: BrokerHarness, role: str) -> float:
    exporter = h.broker.observability.exporter
    assert exporter is not None
    with urllib.request.urlopen(f"http://{exporter.address}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("orbitmq_store_corrupt_messages_total{") and f'role="{role}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no orbitmq_store_corrupt_messages_total sample for " + role)


@pytest.mark.parametrize("kind", ["body", "header"])
def test_a_flipped_byte_in_a_slaves_segment_is_never_served_and_is_repaired(
        tmp_path: Path, ns: Namesrv, kind: str) -> None:
    store = {"mapped_file_size_commitlog": SEGMENT}
    master = BrokerHarness(master_config(tmp_path, ns, store=store))
    slave = BrokerHarness(slave_config(tmp_path, ns, store=store,
                                       metrics_exporter_type=MetricsExporterType.PROM,
                                       metrics_prom_exporter_port=0))
    try:
        wait_for(lambda: connected(master), "the slave connects to its master")
        bodies = [f"{i:04d}".encode() * 300 for i in range(COUNT)]
        for body in bodies:
            r = master.send(TOPIC, body)
            assert r.code == ResponseCode.SUCCESS, (r.code, r.remark)
        wait_for(lambda: caught_up(master, slave), "the slave holds the master's log")
        files = slave.broker.store.commit_log.mfq.files
        assert len(files) >= 3
        assert _metric(slave, "slave") == 0
        damage = damage_segment(files[len(files) // 2].path, kind)
        # Every pull's body is decoded with its CRC checked (pull_all): a corrupt message served
        # would fail the test here. The slave may answer before or after its repair.
        served = [m.body for m in slave.pull_all(TOPIC, 0)]
        assert served == bodies[:len(served)] and len(served) >= damage.queue_offset
        assert _metric(slave, "slave") == 1
        wait_for(lambda: caught_up(master, slave), "the slave repaired from its master")
        assert commit_log_bytes(slave) == commit_log_bytes(master)
        assert [m.body for m in slave.pull_all(TOPIC, 0)] == bodies
        assert _metric(slave, "slave") == 1
    finally:
        slave.close()
        master.close()
