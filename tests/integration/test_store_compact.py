"""A broker with ``store_type = compact`` (docs/store.md): a real ``orbitmq standalone`` whose
small queues are read and written with pread/pwrite and whose queues switch to mapped files past
``compact_queue_bytes_max`` (200 bytes here: 10 entries). Sends and pulls, a long-polling pull
woken by a send, a SQL92 filter, POP through the 5.x gRPC front (receive and ack), then kill -9
and a restart: every acknowledged message is read back at the queue offset its answer named,
on queues that stayed compact and on queues that went mapped; then a restart under the default
store type reads the same files. And a master and its slave, both compact."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from replication_support import (
    Namesrv,
    caught_up,
    connected,
    master_config,
    restart_on_same_ports,
    slave_config,
    wait_for,
)
from test_broker_support import BrokerHarness

from orbitmq import Admin, Message, MessageSelector, Producer, PullConsumer, PullStatus
from orbitmq.config import StoreType
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.testing import standalone_process
from orbitmq.testing.process import ServerProcess

COMPACT = ("--store-type", "compact", "--compact-queue-bytes-max", "200",
           "--flush-disk-type", "SYNC_FLUSH", "--enable-property-filter", "true")
META = (("x-mq-client-id", "compact-test@1"),)
TOPIC = "CompactT"
QUEUES = 4
# Messages per queue: queue 0 stays compact (3), queue 1 ends exactly at the bound (10), the
# others pass it and go mapped (11, 40).
PER_QUEUE = (3, 10, 11, 40)


def _start(store: Path, *flags: str) -> tuple[ServerProcess, dict[str, str]]:
    proc = standalone_process(str(store), *flags)
    return proc, proc.wait_ready("namesrv", "broker", "grpc")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[Path, ServerProcess, dict[str, str]]]:
    store = tmp_path / "store"
    proc, addresses = _start(store, *COMPACT)
    try:
        yield store, proc, addresses
    finally:
        proc.kill()


def _to_queue(queue_id: int) -> Any:
    def select(queues: Any, msg: Message, arg: Any) -> MessageQueue:
        return next(q for q in queues if q.queue_id == queue_id)

    return select


def _read_all(namesrv: str, topic: str, queue_id: int, count: int) -> list[bytes]:
    with PullConsumer("compact-reader", namesrv) as consumer:
        mq = next(q for q in consumer.fetch_queues(topic) if q.queue_id == queue_id)
        got: list[bytes] = []
        offset = 0
        while len(got) < count:
            res = consumer.pull(mq, offset, 32)
            assert res.status is PullStatus.FOUND, (queue_id, offset, res.status)
            got.extend(m.body for m in res.messages)
            offset = res.next_begin_offset
        return got


def test_a_compact_broker_serves_every_read_and_keeps_acknowledged_messages(
        broker: tuple[Path, ServerProcess, dict[str, str]]) -> None:
    store, proc, addresses = broker
    namesrv = addresses["namesrv"]
    with Admin(namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        admin.create_topic("CompactSql", read_queue_nums=1, write_queue_nums=1)
        admin.create_topic("CompactPop", read_queue_nums=1, write_queue_nums=1)
    acked: dict[bytes, tuple[int, int]] = {}
    with Producer("compact-producer", namesrv) as producer:
        for queue_id, count in enumerate(PER_QUEUE):
            for i in range(count):
                body = f"q{queue_id}-{i}".encode()
                sent = producer.send(Message(TOPIC, body), _to_queue(queue_id))
                acked[body] = (sent.queue.queue_id, sent.queue_offset)
        for i in range(12):
            producer.send(Message("CompactSql", f"s{i}".encode(), properties={"a": str(i)}))
    for queue_id, count in enumerate(PER_QUEUE):
        assert _read_all(namesrv, TOPIC, queue_id, count) == [
            f"q{queue_id}-{i}".encode() for i in range(count)]

    # A long-polling pull at the end of a compact queue, woken by a send.
    with PullConsumer("compact-poller", namesrv) as consumer, \
            Producer("compact-late", namesrv) as producer:
        mq = next(q for q in consumer.fetch_queues(TOPIC) if q.queue_id == 0)
        answer: list[Any] = []
        held = threading.Thread(target=lambda: answer.append(
            consumer.pull(mq, PER_QUEUE[0], 32, suspend=20.0)))
        started = time.monotonic()
        held.start()
        time.sleep(0.5)
        sent = producer.send(Message(TOPIC, b"late"), _to_queue(0))
        acked[b"late"] = (0, sent.queue_offset)
        held.join(30)
        assert answer and [m.body for m in answer[0].messages] == [b"late"]
        assert time.monotonic() - started < 15  # the arrival woke it, not the suspend's end

        # SQL92 filter over a compact queue (the property a, evaluated per message).
        sql = next(iter(consumer.fetch_queues("CompactSql")))
        res = consumer.pull(sql, 0, 32, MessageSelector.by_sql("a >= 9"))
        assert sorted(m.body for m in res.messages) == [b"s10", b"s11", b"s9"]

    # POP (the 5.x front): receive from a compact queue, then ack.
    with grpc.insecure_channel(addresses["grpc"]) as channel:
        stub = spb_grpc.MessagingServiceStub(channel)
        msg = pb.Message(topic=pb.Resource(name="CompactPop"), body=b"popped",
                         system_properties=pb.SystemProperties(message_id="01C0FFEE",
                                                               message_type=pb.NORMAL))
        assert stub.SendMessage(spb.SendMessageRequest(messages=[msg]), metadata=META,
                                timeout=10).status.code == pb.OK
        req = spb.ReceiveMessageRequest(
            group=pb.Resource(name="CompactPopG"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="CompactPop")), batch_size=8,
            invisible_duration=duration_pb2.Duration(seconds=30),
            long_polling_timeout=duration_pb2.Duration(seconds=5))
        got = [r.message for r in stub.ReceiveMessage(req, metadata=META, timeout=20)
               if r.HasField("message")]
        assert [m.body for m in got] == [b"popped"]
        ack = stub.AckMessage(spb.AckMessageRequest(
            group=pb.Resource(name="CompactPopG"), topic=pb.Resource(name="CompactPop"),
            entries=[spb.AckMessageEntry(message_id="01C0FFEE",
                                         receipt_handle=got[0].system_properties.receipt_handle)]),
            metadata=META, timeout=10)
        assert ack.status.code == pb.OK

    maps = Path(f"/proc/{proc.proc.pid}/maps").read_text()
    assert f"consumequeue/{TOPIC}/0/" not in maps  # compact: read and written, never mapped
    assert f"consumequeue/{TOPIC}/3/" in maps  # past the bound: mapped like a default queue
    proc.kill()  # kill -9: SYNC_FLUSH answered every send after its fsync
    proc, addresses = _start(store, *COMPACT)
    try:
        namesrv = addresses["namesrv"]
        counts = [PER_QUEUE[0] + 1, *PER_QUEUE[1:]]
        for queue_id, count in enumerate(counts):
            bodies = _read_all(namesrv, TOPIC, queue_id, count)
            for offset, body in enumerate(bodies):
                assert acked[body] == (queue_id, offset)
        assert set(acked) == {b for q, c in enumerate(counts)
                              for b in _read_all(namesrv, TOPIC, q, c)}
        with Producer("compact-after", namesrv) as producer:  # appends go on at the right offset
            assert producer.send(Message(TOPIC, b"after"), _to_queue(0)).queue_offset == counts[0]
    finally:
        proc.stop()
    # The same files under the default store type (mapped access).
    proc, addresses = _start(store, "--store-type", "default")
    try:
        assert _read_all(addresses["namesrv"], TOPIC, 3, PER_QUEUE[3]) == [
            f"q3-{i}".encode() for i in range(PER_QUEUE[3])]
        assert _read_all(addresses["namesrv"], TOPIC, 0, counts[0] + 1)[-1] == b"after"
    finally:
        proc.stop()


def test_a_slave_with_compact_queues_serves_what_its_master_stored(tmp_path: Path) -> None:
    """Replication: a slave dispatches the master's bytes into its own queues as the master
    does, here compact ones (queue 0 stays compact, queue 1 goes mapped past 10 entries), and
    a compact slave restarted on its store still serves them."""
    compact = {"store_type": StoreType.COMPACT, "compact_queue_bytes_max": 200}
    ns = Namesrv()
    master = BrokerHarness(master_config(tmp_path, ns, store=compact))
    slave = BrokerHarness(slave_config(tmp_path, ns, store=compact))
    try:
        wait_for(lambda: connected(master), "the slave connects to its master")
        for queue_id, count in ((0, 3), (1, 25)):
            for i in range(count):
                assert master.send("Replicated", b"r%d-%d" % (queue_id, i),
                                   queue_id=queue_id).code == ResponseCode.SUCCESS
        wait_for(lambda: caught_up(master, slave), "the slave holds the master's bytes")
        for h in (master, slave):
            for queue_id, count in ((0, 3), (1, 25)):
                got = [m.body for m in h.pull_all("Replicated", queue_id)]
                assert got == [b"r%d-%d" % (queue_id, i) for i in range(count)]
        table = slave.broker.store.consume_queue_table
        assert [table[("Replicated", q)].mapped is None for q in (0, 1)] == [True, False]  # type: ignore[union-attr]
        slave = restart_on_same_ports(slave)
        assert [m.body for m in slave.pull_all("Replicated", 0)] == [b"r0-%d" % i for i in range(3)]
    finally:
        slave.close()
        master.close()
        ns.close()
