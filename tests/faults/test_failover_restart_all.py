"""Every member of a controller-mode set restarted at once (a rack's power cycle, an upgrade of
all members), real processes: the member elected afterwards keeps its log, and every message
answered SEND_OK before the restart is read back, body intact. Each member's epoch list is on
disk (epochs.json); a member that forgot it would take its log for one that predates controller
mode and cut it to the history's first offset: to 0, every acknowledged message gone."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_failover_kill import read_all

from orbitmq import Message, Producer, SendStatus
from orbitmq.errors import OrbitMQError
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet, wait_for

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

TOPIC = "RestartAll"
MESSAGES = 300


def _send(namesrv: str, first: int, count: int) -> dict[str, bytes]:
    acked: dict[str, bytes] = {}
    with Producer("restart-all-p", namesrv=namesrv, send_timeout=5.0) as producer:
        for n in range(first, first + count):
            body = f"restart-all {n}".encode() * 8
            result = producer.send(Message(TOPIC, body))
            assert result.status is SendStatus.OK, result
            acked[result.msg_id] = body
    return acked


def test_a_set_restarted_whole_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints) as brokers:
        first = brokers.wait_master(in_sync=3)
        acked = _send(brokers.namesrv, 0, MESSAGES)
        # A second epoch first, so that the history has more than one entry.
        brokers.kill(first.member)
        second = brokers.wait_master(epoch_above=first.epoch, in_sync=2)
        brokers.start_member(first.member)
        brokers.wait_master(epoch_above=second.epoch - 1, in_sync=3)
        acked |= _send(brokers.namesrv, MESSAGES, MESSAGES)
        for member in list(brokers.brokers):
            brokers.kill(member)
        for member in list(brokers.brokers):
            brokers.start_member(member)
        third = brokers.wait_master(epoch_above=second.epoch, in_sync=1, timeout=60)
        # Reads stop below what the whole in-sync set holds: the members catch up first.
        stored: dict[str, bytes] = {}

        def all_read() -> bool:
            try:
                stored.update(read_all(brokers.namesrv, TOPIC, "restart-all-reader"))
            except OrbitMQError:  # no route yet: the new master registers within a second
                return False
            return all(m in stored for m in acked)
        try:
            wait_for(all_read, "every acknowledged message read back", 60)
        except AssertionError:
            lines = [f"member {m}: {line}" for m, proc in brokers.brokers.items()
                     for line in proc.output().splitlines() if "failover:" in line]
            missing = sum(1 for m in acked if m not in stored)
            raise AssertionError(
                f"{missing} of {len(acked)} acknowledged messages lost after the restart (master "
                f"member {third.member}, epoch {third.epoch}):\n" + "\n".join(lines[-20:])) from None
        assert all(stored[m] == body for m, body in acked.items())
