"""The SDK against a real name server and broker on 127.0.0.1 (ephemeral ports, real files).

One name server and one broker serve the whole module from a background loop thread; every test
uses its own topic and group, so they do not see each other's messages.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import os
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from orbitmq.assembly import build_broker
from orbitmq.broker.controller import BrokerController
from orbitmq.client import (
    Admin,
    AsyncProducer,
    AsyncPullConsumer,
    Producer,
    PullConsumer,
    PullStatus,
    SendResult,
    SendStatus,
    select_by_hash,
)
from orbitmq.config import BrokerConfig, NamesrvConfig, StoreConfig
from orbitmq.errors import BrokerError, ClientError, TopicNotFoundError
from orbitmq.namesrv import NameServer
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport.loop import LoopThread, run

MiB = 1024 * 1024


def wait_until(predicate: Callable[[], object], timeout: float = EVENT_WAIT_S,
               what: str = "") -> None:
    """Poll ``predicate`` until it is true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.01)


@dataclasses.dataclass
class Servers:
    loop: LoopThread
    namesrv: NameServer
    broker: BrokerController

    @property
    def ns(self) -> str:
        return self.namesrv.address

    def create_topic(self, topic: str, queues: int = 4) -> None:
        with Admin(self.ns) as admin:
            admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: topic in self.namesrv.routes.topics(), what=f"route of {topic}")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    loop = LoopThread("test-servers")
    namesrv = NameServer(NamesrvConfig(listen_port=0))
    loop.call(namesrv.start())
    store = StoreConfig(store_path=str(tmp_path_factory.mktemp("broker")),
                        mapped_file_size_commitlog=32 * MiB)
    broker = build_broker(BrokerConfig(listen_port=0, grpc_listen_port=0, namesrv_addr=namesrv.address,
                                           store=store))
    loop.call(broker.start())
    try:
        wait_until(lambda: namesrv.routes.cluster_info()[0], what="broker registration")
        yield Servers(loop, namesrv, broker)
    finally:
        loop.call(broker.stop())
        loop.call(namesrv.stop())
        loop.stop()


def pull_all(consumer: PullConsumer, mq: MessageQueue, count: int, expression: str = "*",
             timeout: float = 30.0) -> list[MessageExt]:
    """The first ``count`` messages of ``mq`` matching ``expression``, then checks that no more
    follow. Pulls long-poll, since the broker indexes a stored message a moment after the send
    is acknowledged."""
    out: list[MessageExt] = []
    offset = 0
    deadline = time.monotonic() + timeout
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} messages in {mq}"
        result = consumer.pull(mq, offset, max_nums=512, expression=expression, suspend=1.0)
        out.extend(result.messages)
        offset = result.next_begin_offset
    extra = consumer.pull(mq, offset, expression=expression)
    assert extra.status is not PullStatus.FOUND or not extra.messages, "more than expected"
    return out


# -- sends and pulls ------------------------------------------------------------------------------
def test_send_and_pull_round_trip_keeps_every_field(servers: Servers):
    servers.create_topic("RoundTrip", 1)
    big = os.urandom(100) * 100  # compressible, over compress_over
    sent = [
        Message("RoundTrip", b"small", tags="a", keys=["k1", "k2"], flag=3,
                properties={"color": "blue"}),
        Message("RoundTrip", big, tags="b"),
    ]
    with Producer("rt-producer", servers.ns) as producer:
        results = [producer.send(m) for m in sent]
    assert [r.status for r in results] == [SendStatus.OK, SendStatus.OK]
    assert [r.queue_offset for r in results] == [0, 1]
    with PullConsumer("rt-consumer", servers.ns) as consumer:
        (mq,) = consumer.fetch_queues("RoundTrip")
        got = pull_all(consumer, mq, 2)
    assert [m.body for m in got] == [b"small", big]
    first = got[0]
    assert (first.tags, first.keys, first.flag, first.properties["color"]) == (
        "a", ["k1", "k2"], 3, "blue")
    assert [m.msg_id for m in got] == [r.msg_id for r in results]
    assert [m.offset_msg_id for m in got] == [r.offset_msg_id for r in results]
    assert got[1].sys_flag == 0  # decompressed on the client


def test_tag_expression_filters_on_the_client_too(servers: Servers):
    servers.create_topic("Tagged", 1)
    with Producer("tag-producer", servers.ns) as producer:
        for i, tag in enumerate(["a", "b", "c", "a", None]):
            producer.send(Message("Tagged", f"{i}".encode(), tags=tag))
    with PullConsumer("tag-consumer", servers.ns) as consumer:
        (mq,) = consumer.fetch_queues("Tagged")
        assert [m.body for m in pull_all(consumer, mq, 3, "a || c")] == [b"0", b"2", b"3"]
        assert len(pull_all(consumer, mq, 5, "*")) == 5


def test_batch_lands_contiguously_in_one_queue(servers: Servers):
    servers.create_topic("Batched", 4)
    msgs = [Message("Batched", f"b{i}".encode(), keys=f"key{i}") for i in range(10)]
    with Producer("batch-producer", servers.ns) as producer:
        result = producer.send_batch(msgs)
    ids = result.msg_id.split(",")
    assert len(ids) == 10 and len(set(ids)) == 10
    with PullConsumer("batch-consumer", servers.ns) as consumer:
        got = pull_all(consumer, result.queue, 10)
    assert [m.body for m in got] == [m.body for m in msgs]
    assert [m.queue_offset for m in got] == list(range(result.queue_offset,
                                                        result.queue_offset + 10))
    assert [m.msg_id for m in got] == ids


def test_selector_keeps_one_key_in_one_queue_in_order(servers: Servers):
    servers.create_topic("Orders", 4)
    with Producer("order-producer", servers.ns) as producer:
        results = {key: [producer.send(Message("Orders", f"{key}:{i}".encode()),
                                       selector=select_by_hash, arg=key) for i in range(5)]
                   for key in ("order-1", "order-2", "order-3")}
    with PullConsumer("order-consumer", servers.ns) as consumer:
        for key, sent in results.items():
            assert len({r.queue for r in sent}) == 1
            count = sum(r.queue == sent[0].queue for rs in results.values() for r in rs)
            bodies = [m.body.decode() for m in pull_all(consumer, sent[0].queue, count)]
            mine = [b for b in bodies if b.startswith(f"{key}:")]
            assert mine == [f"{key}:{i}" for i in range(5)]


def test_new_topic_is_created_through_tbw102(servers: Servers):
    with Producer("auto-producer", servers.ns, default_topic_queue_nums=2) as producer:
        result = producer.send(Message("AutoCreated", b"first"))
    assert result.status is SendStatus.OK
    wait_until(lambda: "AutoCreated" in servers.namesrv.routes.topics(), what="auto route")
    with PullConsumer("auto-consumer", servers.ns) as consumer:
        assert len(consumer.fetch_queues("AutoCreated")) == 2
        assert [m.body for m in pull_all(consumer, result.queue, 1)] == [b"first"]


def test_invalid_input_is_refused_before_the_wire(servers: Servers):
    with Producer("bad-producer", servers.ns, max_message_size=1024) as producer:
        for msg in (Message("Bad Topic", b"x"), Message("T", b""), Message("T", b"x" * 1025)):
            with pytest.raises(ClientError):
                producer.send(msg)
    with PullConsumer("bad-consumer", servers.ns) as consumer:
        with pytest.raises(BrokerError) as info:
            consumer.fetch_queues("NoSuchTopic")
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(ClientError):
            consumer.pull(MessageQueue("T", "broker-a", 0), -1)


# -- long polling ---------------------------------------------------------------------------------
def test_missing_topics_and_refused_connections_raise_what_python_code_catches(servers: Servers):
    """A missing topic used to be a bare BrokerError(17); a refused connection was no
    ConnectionError."""
    with PullConsumer("missing-topic", servers.ns) as consumer:
        with pytest.raises(TopicNotFoundError) as missing:
            consumer.fetch_queues("NoSuchTopicAnywhere")
        assert missing.value.code == ResponseCode.TOPIC_NOT_EXIST
    with Admin(servers.ns) as admin, pytest.raises(TopicNotFoundError):
        admin.topic_route("NoSuchTopicAnywhere")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Admin(f"127.0.0.1:{port}", timeout=2.0) as nobody, pytest.raises(ConnectionError):
        nobody.list_topics()


def test_long_poll_answers_soon_after_a_message_arrives(servers: Servers):
    servers.create_topic("LongPoll", 1)
    held = servers.broker.pull.long_poll
    rounds = 7

    async def wake_once(consumer: AsyncPullConsumer, producer: AsyncProducer,
                        mq: MessageQueue, offset: int) -> float:
        """Seconds from the send's acknowledgement to the held pull's answer (may be < 0)."""
        loop = asyncio.get_running_loop()
        before = held.held_count
        pull = asyncio.ensure_future(consumer.pull(mq, offset, suspend=10))
        for _ in range(1000):  # until the broker holds it (bounded)
            if held.held_count > before:
                break
            await asyncio.sleep(0.005)
        await producer.send(Message("LongPoll", b"wake up"))
        acked = loop.time()
        result = await asyncio.wait_for(pull, 5)
        assert [m.queue_offset for m in result.messages] == [offset]
        return loop.time() - acked

    async def scenario() -> tuple[float, list[float]]:
        async with AsyncPullConsumer("lp-consumer", servers.ns) as consumer, \
                AsyncProducer("lp-producer", servers.ns) as producer:
            (mq,) = await consumer.fetch_queues("LongPoll")
            loop = asyncio.get_running_loop()
            started = loop.time()
            empty = await consumer.pull(mq, 0, suspend=0.3)
            waited_empty = loop.time() - started
            assert empty.status is PullStatus.NO_NEW_MSG and not empty.messages
            delays = [await wake_once(consumer, producer, mq, i) for i in range(rounds)]
            return waited_empty, delays

    waited_empty, delays = run(scenario())
    assert 0.25 <= waited_empty < 2.0
    # Typically a few ms; the median keeps one scheduler hiccup of a busy CI box from failing it.
    assert sorted(delays)[rounds // 2] < 0.05, delays
    assert max(delays) < 0.5, delays


# -- offsets --------------------------------------------------------------------------------------
def test_offsets_commit_query_and_queue_bounds(servers: Servers):
    servers.create_topic("Offsets", 2)
    with Producer("off-producer", servers.ns) as producer:
        results = [producer.send(Message("Offsets", f"{i}".encode()),
                                 selector=lambda q, m, a: q[0]) for i in range(5)]
    mq = results[0].queue
    with PullConsumer("off-consumer", servers.ns) as consumer:
        # Never committed, and the queue still holds its first message: the broker says 0
        # (a new group reads from the start, as RocketMQ does); -1 is for QUERY_NOT_FOUND.
        assert consumer.fetch_offset(mq) == 0
        assert (consumer.min_offset(mq), consumer.max_offset(mq)) == (0, 5)
        assert consumer.search_offset(mq, 0) == 0
        assert consumer.search_offset(mq, int(time.time() * 1000) + 60_000) == 5
        assert consumer.earliest_msg_store_time(mq) > 0
        consumer.update_offset(mq, 3)
        assert consumer.fetch_offset(mq, from_store=False) == 3
        consumer.persist_offsets()
        assert consumer.fetch_offset(mq) == 3
        consumer.update_offset(mq, 4)  # committed by shutdown
    with PullConsumer("off-consumer", servers.ns) as again:
        again.fetch_queues("Offsets")
        assert again.fetch_offset(mq) == 4


# -- admin ----------------------------------------------------------------------------------------
def test_admin_topic_lifecycle(servers: Servers):
    with Admin(servers.ns) as admin:
        assert admin.create_topic("AdminTopic", read_queue_nums=3, write_queue_nums=3) == [
            "broker-a"]
        wait_until(lambda: "AdminTopic" in admin.list_topics(), what="topic listed")
        route = admin.topic_route("AdminTopic")
        assert [(q.broker_name, q.write_queue_nums) for q in route.queue_datas] == [
            ("broker-a", 3)]
        assert "DefaultCluster" in admin.cluster_info().cluster_addr_table
        with Producer("admin-producer", servers.ns) as producer:
            sent = producer.send(Message("AdminTopic", b"x", keys="the-key"))
        # The broker indexes a message a moment after acknowledging it.
        wait_until(lambda: sum(s.max_offset for s in admin.topic_status("AdminTopic")) == 1,
                   what="message indexed")
        wait_until(lambda: admin.query_messages("AdminTopic", "the-key"), what="key indexed")
        status = {s.queue: s for s in admin.topic_status("AdminTopic")}
        assert len(status) == 3
        assert status[sent.queue].max_offset == 1 and status[sent.queue].last_update_timestamp > 0
        by_offset_id = admin.view_message(sent.offset_msg_id)
        by_uniq_key = admin.view_message(sent.msg_id, topic="AdminTopic")
        assert by_offset_id.body == by_uniq_key.body == b"x"
        assert [m.msg_id for m in admin.query_messages("AdminTopic", "the-key")] == [sent.msg_id]
        assert admin.query_messages("AdminTopic", "other-key") == []
        with pytest.raises(ClientError):
            admin.view_message(sent.msg_id)  # a UNIQ_KEY needs its topic
        assert admin.delete_topic("AdminTopic") == ["broker-a"]
        assert "AdminTopic" not in admin.list_topics()
        with pytest.raises(BrokerError):
            admin.topic_route("AdminTopic")


def test_admin_group_status_connections_and_reset(servers: Servers):
    servers.create_topic("GroupTopic", 2)
    with Producer("grp-producer", servers.ns) as producer:
        before = int(time.time() * 1000) - 1
        results = [producer.send(Message("GroupTopic", b"x")) for _ in range(6)]
    per_queue = {r.queue: 0 for r in results}
    for r in results:
        per_queue[r.queue] += 1
    with PullConsumer("grp-consumer", servers.ns) as consumer, Admin(servers.ns) as admin:
        queues = consumer.fetch_queues("GroupTopic")
        for mq in queues:
            consumer.update_offset(mq, 1)
        consumer.persist_offsets()
        wait_until(lambda: sum(q.broker_offset for q in admin.group_status(
            "grp-consumer", "GroupTopic").queues) == 6, what="messages indexed")
        status = admin.group_status("grp-consumer", "GroupTopic")
        assert {q.queue: (q.broker_offset, q.consumer_offset) for q in status.queues} == {
            mq: (per_queue.get(mq, 0), 1) for mq in queues}
        assert status.total_lag == 6 - 2
        # The consumer joins the group through its first heartbeat, sent once a route names
        # the broker.
        wait_until(lambda: consumer.client_id in {
            c.client_id for c in admin.consumer_connections("grp-consumer").connections},
            what="consumer connection")
        assert "grp-consumer" in admin.list_groups()
    with Admin(servers.ns) as admin:
        reset = admin.reset_offset("grp-consumer", "GroupTopic", before)
        assert reset == {mq: 0 for mq in queues}
        assert admin.group_status("grp-consumer", "GroupTopic").total_lag == 6


# -- the acceptance load ----------------------------------------------------------------------------
BULK_TOPIC = "Bulk100k"
BULK_PRODUCERS = 4
BULK_PER_PRODUCER = 25_000
BODY_SIZE = 1024


def bulk_body(producer: int, seq: int) -> bytes:
    return f"{producer}:{seq:06d}:".encode().ljust(BODY_SIZE, b".")


def run_bulk_producer(ns: str, p: int) -> list[tuple[SendResult, int]]:
    """Sends this producer's share; each producer exercises another send path: two send one at
    a time, one pipelines send_async with a window of 64, one sends batches of 32."""
    out: list[tuple[SendResult, int]] = []
    seqs = range(BULK_PER_PRODUCER)
    with Producer(f"bulk-producer-{p}", ns) as producer:
        if p < 2:
            out = [(producer.send(Message(BULK_TOPIC, bulk_body(p, i))), i) for i in seqs]
        elif p == 2:
            window: list[tuple[concurrent.futures.Future[SendResult], int]] = []
            for i in seqs:
                window.append((producer.send_async(Message(BULK_TOPIC, bulk_body(p, i))), i))
                if len(window) >= 64:
                    future, seq = window.pop(0)
                    out.append((future.result(timeout=30), seq))
            out.extend((f.result(timeout=30), seq) for f, seq in window)
        else:
            for start in range(0, BULK_PER_PRODUCER, 32):
                chunk = range(start, min(start + 32, BULK_PER_PRODUCER))
                result = producer.send_batch([Message(BULK_TOPIC, bulk_body(p, i)) for i in chunk])
                out.extend((dataclasses.replace(result, queue_offset=result.queue_offset + k,
                                                msg_id=result.msg_id.split(",")[k]), i)
                           for k, i in enumerate(chunk))
    return out


def test_100k_messages_from_4_producers_come_back_complete_and_in_queue_order(servers: Servers):
    servers.create_topic(BULK_TOPIC, 8)
    with concurrent.futures.ThreadPoolExecutor(BULK_PRODUCERS) as pool:
        sent = list(pool.map(lambda p: run_bulk_producer(servers.ns, p), range(BULK_PRODUCERS)))
    expected: dict[tuple[MessageQueue, int], tuple[str, int, int]] = {}
    for p, results in enumerate(sent):
        assert len(results) == BULK_PER_PRODUCER
        for result, seq in results:
            assert result.status is SendStatus.OK
            key = (result.queue, result.queue_offset)
            assert key not in expected, f"two sends reported {key}"
            expected[key] = (result.msg_id, p, seq)
    assert len(expected) == BULK_PRODUCERS * BULK_PER_PRODUCER

    with PullConsumer("bulk-consumer", servers.ns) as consumer:
        queues = consumer.fetch_queues(BULK_TOPIC)
        assert len(queues) == 8
        total = 0
        per_queue = collections.Counter(mq for mq, _offset in expected)
        for mq in queues:
            got = pull_all(consumer, mq, per_queue[mq])
            total += len(got)
            assert [m.queue_offset for m in got] == list(range(len(got))), "gap or reorder"
            last_seq: dict[int, int] = {}
            for m in got:
                msg_id, p, seq = expected[(mq, m.queue_offset)]
                assert m.msg_id == msg_id and m.body == bulk_body(p, seq)
                if p != 2:  # sequential senders: their messages keep their order in each queue
                    assert seq > last_seq.get(p, -1)
                    last_seq[p] = seq
    assert total == BULK_PRODUCERS * BULK_PER_PRODUCER
