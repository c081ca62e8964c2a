"""Priority messages end to end: a name server and a broker in process, the SDK over TCP, the
gRPC endpoint called with the generated stubs (what a 5.x client sends), the CLI as a child.

A PRIORITY topic stores priority ``p`` in queue ``min(p, queues - 1)`` whoever sends it; a POP
receive takes the highest queue first, a redelivered message included; the 4.x push consumer
consumes a cached backlog highest priority first, and a failed message comes back from the
retry topic with its priority. Priorities out of 0..9, and priority messages for topics of
another type, are refused with a code and a remark that say so.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

import orbitmq
from orbitmq.assembly import grpc_endpoint
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import BrokerError, ClientError
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message, PropertyKey
from orbitmq.testing import EmbeddedCluster

WAIT_S = 30.0
META = (("x-mq-client-id", "priority-test@1"),)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, message_delay_level="1s 1s 1s 1s")
    with EmbeddedCluster(tmp_path_factory.mktemp("priority"), store=store) as c:
        yield c


@pytest.fixture(scope="module")
def stub(cluster: EmbeddedCluster) -> Iterator[Any]:
    endpoint = grpc_endpoint(cluster.brokers[0])
    assert endpoint is not None
    with grpc.insecure_channel(f"127.0.0.1:{endpoint.port}") as channel:
        yield spb_grpc.MessagingServiceStub(channel)


def create(cluster: EmbeddedCluster, topic: str, kind: str | None = "PRIORITY", queues: int = 4) -> str:
    with orbitmq.Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues,
                           attributes=f"+message.type={kind}" if kind else None)
    return topic


def wire(topic: str, body: bytes, mid: str, priority: int | None = None,
         message_type: int | None = None) -> pb.Message:
    sp = pb.SystemProperties(message_id=mid)
    if priority is not None:
        sp.priority = priority
    sp.message_type = message_type if message_type is not None else (
        pb.PRIORITY if priority is not None else pb.NORMAL)
    return pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)


def send(stub: Any, *messages: pb.Message) -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)), metadata=META,
                            timeout=30)


def receive(stub: Any, topic: str, group: str, batch: int = 32, invisible_s: int = 30) -> list[pb.Message]:
    req = spb.ReceiveMessageRequest(
        group=pb.Resource(name=group), message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        batch_size=batch, invisible_duration=duration_pb2.Duration(seconds=invisible_s),
        long_polling_timeout=duration_pb2.Duration(seconds=3))
    return [r.message for r in stub.ReceiveMessage(req, metadata=META, timeout=30)
            if r.HasField("message")]


def wait_dispatched(cluster: EmbeddedCluster, topic: str, total: int) -> None:
    """Until the topic's queues hold ``total`` messages: a send is answered once durable, and
    its queue entry follows (dispatch); a receive sees only dispatched messages."""
    deadline = time.monotonic() + WAIT_S
    with orbitmq.Admin(cluster.namesrv) as admin:
        while sum(q.max_offset for q in admin.topic_status(topic)) < total:
            assert time.monotonic() < deadline, admin.topic_status(topic)
            time.sleep(0.05)


def ack(stub: Any, topic: str, group: str, messages: list[pb.Message]) -> None:
    if not messages:
        return
    r = stub.AckMessage(spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name=topic),
        entries=[spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                     receipt_handle=m.system_properties.receipt_handle)
                 for m in messages]), metadata=META, timeout=30)
    assert r.status.code == pb.OK, r


# -- gRPC: types, range, placement, POP order ------------------------------------------------------
def test_route_offers_priority_and_normal_and_refusals_name_the_rule(cluster: EmbeddedCluster,
                                                                      stub: Any) -> None:
    topic = create(cluster, "PrioRouteT")
    plain = create(cluster, "PrioPlainT", kind=None)
    mixed = create(cluster, "PrioMixedT", kind="MIXED")
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=META,
                            timeout=30)
    assert [list(q.accept_message_types) for q in route.message_queues] == [[pb.PRIORITY, pb.NORMAL]] * 4
    cases = [
        (wire(topic, b"x", "01A1", priority=10), pb.BAD_REQUEST, "out of range 0..9"),
        (wire(topic, b"x", "01A2", message_type=pb.PRIORITY), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
         "priority: False"),
        (wire(topic, b"x", "01A3", priority=1, message_type=pb.NORMAL),
         pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "priority: True"),
        (wire(plain, b"x", "01A4", priority=1), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "PRIORITY"),
        (wire(mixed, b"x", "01A5", priority=1), pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "PRIORITY"),
    ]
    for msg, code, why in cases:
        r = send(stub, msg)
        assert r.status.code == code and why in r.status.message, (msg, r)


def test_priority_picks_the_queue_and_comes_back_on_receive(cluster: EmbeddedCluster, stub: Any) -> None:
    topic = create(cluster, "PrioPlaceT", queues=4)
    msgs = [wire(topic, f"p{p}".encode(), f"01B{p}", priority=p) for p in range(10)]
    msgs.append(wire(topic, b"none", "01BF"))  # NORMAL on a PRIORITY topic: priority 0
    r = send(stub, *msgs)
    assert r.status.code == pb.OK, r
    wait_dispatched(cluster, topic, len(msgs))
    got = receive(stub, topic, "PrioPlaceG")
    seen = {m.body: (m.system_properties.queue_id, m.system_properties.priority,
                     m.system_properties.message_type) for m in got}
    for p in range(10):
        assert seen[f"p{p}".encode()] == (min(p, 3), p, pb.PRIORITY)
    assert seen[b"none"][0] == 0 and seen[b"none"][2] == pb.NORMAL
    # Highest queue first: queue 3's (priorities 3..9) before queue 2's, ... before queue 0's.
    queues = [m.system_properties.queue_id for m in got]
    assert queues == sorted(queues, reverse=True)
    ack(stub, topic, "PrioPlaceG", got)


def test_a_high_priority_message_overtakes_a_backlog_and_keeps_its_place_when_retried(
        cluster: EmbeddedCluster, stub: Any) -> None:
    topic, group = create(cluster, "PrioBacklogT", queues=10), "PrioBacklogG"
    for start in range(0, 2000, 500):  # a backlog of low priorities
        r = send(stub, *[wire(topic, b"low", f"01C{start + i:05d}", priority=i % 3)
                         for i in range(500)])
        assert r.status.code == pb.OK
    assert send(stub, wire(topic, b"HIGH", "01CFFFFF", priority=9)).status.code == pb.OK
    wait_dispatched(cluster, topic, 2001)
    first = receive(stub, topic, group, batch=32, invisible_s=1)
    assert first[0].body == b"HIGH" and first[0].system_properties.delivery_attempt == 1
    ack(stub, topic, group, first[1:])  # the high one is not acked: it comes back
    deadline = time.monotonic() + WAIT_S
    while True:
        batch = receive(stub, topic, group, batch=32, invisible_s=30)
        if any(m.body == b"HIGH" for m in batch):
            break
        ack(stub, topic, group, batch)
        assert time.monotonic() < deadline, "the retried high-priority message did not come back"
    # Visible again, it comes before the rest of the low backlog, as a retry (attempt 2).
    assert batch[0].body == b"HIGH" and batch[0].system_properties.delivery_attempt == 2
    assert batch[0].system_properties.priority == 9
    assert all(m.system_properties.priority <= 2 for m in batch[1:])
    ack(stub, topic, group, batch)


def test_messages_waiting_their_turn_come_back_when_the_topic_is_no_longer_priority(
        cluster: EmbeddedCluster, stub: Any) -> None:
    topic, group = create(cluster, "PrioRetypeT", queues=4), "PrioRetypeG"
    assert send(stub, *[wire(topic, f"m{i}".encode(), f"01D{i}", priority=2)
                        for i in range(3)]).status.code == pb.OK
    wait_dispatched(cluster, topic, 3)
    assert len(receive(stub, topic, group, batch=3, invisible_s=1)) == 3  # not acked
    deadline = time.monotonic() + WAIT_S
    while not (first := receive(stub, topic, group, batch=1, invisible_s=30)):
        assert time.monotonic() < deadline
    assert first[0].system_properties.delivery_attempt == 2  # two more wait in queue 2's line
    ack(stub, topic, group, first)
    with orbitmq.Admin(cluster.namesrv) as admin:
        admin.update_topic(topic, attributes="-message.type")
    rest: list[pb.Message] = []
    while len(rest) < 2:
        rest += receive(stub, topic, group, batch=32, invisible_s=30)
        assert time.monotonic() < deadline, rest
    assert sorted(m.body for m in rest + first) == [b"m0", b"m1", b"m2"]
    assert all(m.system_properties.delivery_attempt == 2 for m in rest)
    ack(stub, topic, group, rest)


# -- remoting: the SDK producer, the broker's checks, the push consumer --------------------------
def test_sdk_sends_land_in_their_priority_queue(cluster: EmbeddedCluster) -> None:
    topic = create(cluster, "PrioSdkT", queues=4)
    with orbitmq.Producer("prio-sdk-producer", namesrv=cluster.namesrv) as producer:
        for p in range(10):
            result = producer.send(Message(topic, b"x", priority=p))
            assert result.queue.queue_id == min(p, 3), (p, result)
        assert producer.send(Message(topic, b"plain")).queue.queue_id == 0  # priority 0
        # The broker checks the property itself (a client that does not check, or a resend).
        with pytest.raises(BrokerError, match="out of range 0..9") as info:
            producer.send(Message.with_system_properties(
                topic, b"x", properties={PropertyKey.PRIORITY: "12"}))
        assert info.value.code == ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(BrokerError, match="must share one priority"):
            producer.send_batch([Message.with_system_properties(
                topic, b"x", properties={PropertyKey.PRIORITY: str(p)}) for p in (1, 2)])
        with pytest.raises(ClientError, match="must share one priority"):
            producer.send_batch([Message(topic, b"x", priority=1), Message(topic, b"y", priority=2)])
        batch = producer.send_batch([Message(topic, b"x", priority=2), Message(topic, b"y", priority=2)])
        assert batch.queue.queue_id == 2
        plain = create(cluster, "PrioSdkPlainT", kind=None)
        with pytest.raises(BrokerError, match="not of message.type PRIORITY"):
            producer.send(Message(plain, b"x", priority=1))
        with pytest.raises(ClientError, match="priority must be an integer 0..9"):
            producer.send(dataclasses.replace(Message(topic, b"x"), priority=10))


class Seen:
    def __init__(self) -> None:
        self.order: list[tuple[bytes, int | None, int, str]] = []
        self.cond = threading.Condition()

    def add(self, msg: Any) -> None:
        with self.cond:
            self.order.append((bytes(msg.body), msg.priority, msg.reconsume_times, msg.topic))
            self.cond.notify_all()

    def wait_for(self, pred: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        with self.cond:
            while not pred(self.order):
                left = deadline - time.monotonic()
                assert left > 0, f"{what}: {self.order[-20:]}"
                self.cond.wait(left)


def test_push_consumer_takes_higher_priorities_first_and_retries_keep_them(
        cluster: EmbeddedCluster) -> None:
    topic, group = create(cluster, "PrioPushT", queues=4), "prio-push-group"
    with orbitmq.Producer("prio-push-producer", namesrv=cluster.namesrv) as producer:
        for _ in range(6):
            producer.send_batch([Message(topic, b"low", priority=0) for _ in range(50)])
        producer.send(Message(topic, b"HIGH", priority=9))
    wait_dispatched(cluster, topic, 301)
    seen = Seen()
    gate = threading.Event()
    failed_once: set[bytes] = set()
    c = orbitmq.PushConsumer(group, namesrv=cluster.namesrv, consume_from="first",
                             consume_thread_nums=1, persist_consumer_offset_interval_ms=200)

    @c.subscribe(topic)
    def on_messages(messages: list[Any], context: Any) -> orbitmq.ConsumeResult:
        gate.wait(WAIT_S)  # the first call holds the worker until the backlog is cached
        for m in messages:
            seen.add(m)
        if any(m.body == b"HIGH" and m.body not in failed_once for m in messages):
            failed_once.add(b"HIGH")
            return orbitmq.ConsumeResult.RECONSUME_LATER
        return orbitmq.ConsumeResult.SUCCESS

    c.start()
    try:
        deadline = time.monotonic() + WAIT_S  # its one worker waits on the gate meanwhile
        while c.running_info()["statusTable"]["pulledTotal"] < 301:
            assert time.monotonic() < deadline, c.running_info()["statusTable"]
            time.sleep(0.05)
        gate.set()
        seen.wait_for(lambda order: any(b == b"HIGH" for b, *_ in order), "no HIGH delivery")
        first_high = next(i for i, (b, *_) in enumerate(seen.order) if b == b"HIGH")
        assert first_high <= 2, seen.order[:5]
        # Failed once, it comes back through the retry topic with its priority.
        seen.wait_for(lambda order: sum(b == b"HIGH" for b, *_ in order) == 2, "no retry of HIGH")
        retried = [entry for entry in seen.order if entry[0] == b"HIGH"][1]
        assert retried[1] == 9 and retried[2] == 1 and retried[3] == topic
    finally:
        gate.set()
        c.shutdown()


# -- CLI ------------------------------------------------------------------------------------------
def cli(*args: str, namesrv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "orbitmq.cli.main", *args], capture_output=True,
                          timeout=60, env={**os.environ, "ORBITMQ_NAMESRV_ADDR": namesrv})


def test_cli_creates_a_priority_topic_and_sends_with_a_checked_priority(cluster: EmbeddedCluster) -> None:
    made = cli("topic", "create", "--topic", "PrioCliT", "--read-queue-nums", "10",
               "--write-queue-nums", "10", "--attributes", "+message.type=PRIORITY",
               namesrv=cluster.namesrv)
    assert made.returncode == 0, made.stderr
    sent = cli("send", "--topic", "PrioCliT", "--priority", "7", "hello", namesrv=cluster.namesrv)
    assert sent.returncode == 0 and b":7 offset=" in sent.stdout, (sent.stdout, sent.stderr)
    for bad in ("10", "-1", "x"):
        refused = cli("send", "--topic", "PrioCliT", "--priority", bad, "hello",
                      namesrv=cluster.namesrv)
        lines = [line for line in refused.stderr.decode().splitlines() if line.strip()]
        assert refused.returncode == 2 and len(lines) == 1, (bad, refused.stderr)
        assert lines[0].startswith("Error: invalid value for --priority") and "0..9" in lines[0]
