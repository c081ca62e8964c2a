"""A bit flipped in the master's own commit log after its message was acknowledged (a member
elected with a copy damaged on its disk), controller mode, real processes and etcd: the master
never serves the damaged message; it meets it in a checked read, steps down, cuts its log there,
and the member elected next (whose copy is intact) serves every acknowledged message, bodies
intact; the old master follows it and holds the intact bytes again."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_failover_kill import read_all

from orbitmq import Message, Producer, SendStatus
from orbitmq.errors import OrbitMQError
from orbitmq.testing.corrupt import damage_segment, last_segment
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet, wait_for

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

TOPIC = "CorruptMaster"
MESSAGES = 200


def _send(namesrv: str, run: str) -> dict[str, bytes]:
    """MESSAGES sends, each answered SEND_OK: message id -> body."""
    acked: dict[str, bytes] = {}
    with Producer(f"corrupt-master-{run}", namesrv=namesrv, send_timeout=5.0) as producer:
        for n in range(MESSAGES):
            body = f"corrupt-master {run} {n} ".encode() * 20
            result = producer.send(Message(TOPIC, body))
            assert result.status is SendStatus.OK, result
            acked[result.msg_id] = body
    return acked


def test_a_master_with_a_damaged_message_hands_the_set_to_a_member_with_a_copy(
        tmp_path: Path) -> None:
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints) as brokers:
        first = brokers.wait_master(in_sync=3)
        acked = _send(brokers.namesrv, "first")
        store = tmp_path / f"{brokers.name}-{first.member}"
        segment = last_segment(store)
        assert segment is not None
        damage = damage_segment(segment, "body")  # under the running master's mapping
        assert damage.topic == TOPIC, damage

        stored: dict[str, bytes] = {}

        def all_read() -> bool:
            try:  # the damaged message is never served: a body read is the acknowledged one
                got = read_all(brokers.namesrv, TOPIC, "corrupt-master-reader")
            except OrbitMQError:  # between masters
                return False
            for msg_id, body in got.items():
                assert acked.get(msg_id, body) == body, f"{msg_id} served damaged"
            stored.update(got)
            return all(m in stored for m in acked)
        wait_for(all_read, "every acknowledged message read back intact", 60)
        second = brokers.wait_master(epoch_above=first.epoch, timeout=30)
        assert second.member != first.member
        output = brokers.brokers[first.member].output()
        assert f"steps down: its commit log is corrupt at offset {damage.offset}" in output, \
            output[-3000:]
        assert "role=master" in output  # counted and logged as the master's

        def repaired() -> bool:  # the old master follows and holds the intact bytes again
            with open(damage.path, "rb") as f, open(
                    tmp_path / f"{brokers.name}-{second.member}" / "commitlog"
                    / Path(damage.path).name, "rb") as g:
                base = int(Path(damage.path).name)
                f.seek(damage.offset - base)
                g.seek(damage.offset - base)
                return f.read(512) == g.read(512)
        wait_for(repaired, "the old master's copy repaired from the new master", 60)


def test_a_master_learns_of_its_damaged_copy_from_a_slave_catching_up(tmp_path: Path) -> None:
    """No consumer reads the damaged message: a slave that was down asks for it, and refuses
    the frame that holds it. The master checks the first frame of every connection (the
    slave's retry), steps down, and the slave catches up from the member elected next."""
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints) as brokers:
        first = brokers.wait_master(in_sync=3)
        behind = next(m for m in brokers.brokers if m != first.member)
        brokers.kill(behind)
        brokers.wait_master(epoch_above=first.epoch - 1, in_sync=1)
        acked = _send(brokers.namesrv, "second")
        segment = last_segment(tmp_path / f"{brokers.name}-{first.member}")
        assert segment is not None
        damage = damage_segment(segment, "body")
        assert damage.topic == TOPIC, damage
        brokers.start_member(behind)
        second = brokers.wait_master(epoch_above=first.epoch, timeout=60)
        assert second.member not in (first.member, behind)
        output = brokers.brokers[first.member].output()
        assert f"steps down: its commit log is corrupt at offset {damage.offset}" in output, \
            output[-3000:]
        brokers.wait_master(epoch_above=second.epoch - 1, in_sync=3, timeout=60)
        stored = read_all(brokers.namesrv, TOPIC, "corrupt-master-reader-2")
        assert all(stored.get(m) == body for m, body in acked.items())
