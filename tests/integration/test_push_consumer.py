"""PushConsumer against a real name server and broker (in-process, on 127.0.0.1 ephemeral ports),
with consumers in this process or in child processes that are killed with SIGKILL."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
from push_support import ChildConsumer, assignments_partition, wait_until

from orbitmq import (
    Admin,
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AsyncPushConsumer,
    ConsumeFrom,
    ConsumeResult,
    Message,
    MessageModel,
    Producer,
    PullConsumer,
    PushConsumer,
)
from orbitmq.config import TEST_MIN_STORE
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster
from orbitmq.transport.loop import run

FAST = {"rebalance_interval_ms": 2000, "persist_consumer_offset_interval_ms": 1000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * 1024 * 1024,
                                message_delay_level="1s 1s 1s 1s 1s 1s")
    with EmbeddedCluster(tmp_path_factory.mktemp("push"), store=store) as c:
        yield c


def create_topic(cluster: EmbeddedCluster, topic: str, queues: int) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: topic in admin.list_topics(), 10, f"route of {topic}")


def produce(cluster: EmbeddedCluster, topic: str, count: int, start: int = 0, batch: int = 50,
            size: int = 0) -> None:
    pad = b"." * size
    with Producer("push-test-producer", namesrv=cluster.namesrv) as producer:
        for first in range(start, start + count, batch):
            last = min(first + batch, start + count)
            producer.send_batch([Message(topic, f"m{i}".encode() + pad) for i in range(first, last)])


class Recorder:
    """A listener that records what it consumed (thread-safe)."""

    def __init__(self, answer: Callable[[MessageExt], ConsumeResult] | None = None) -> None:
        self.lock = threading.Lock()
        self.seen: list[MessageExt] = []
        self.answer = answer

    def __call__(self, messages: list[MessageExt], context: object) -> ConsumeResult:
        with self.lock:
            self.seen.extend(messages)
        result = ConsumeResult.SUCCESS
        for msg in messages:
            if self.answer is not None and self.answer(msg) is not ConsumeResult.SUCCESS:
                result = ConsumeResult.RECONSUME_LATER
        return result

    def bodies(self) -> list[str]:
        with self.lock:
            return [m.body.decode() for m in self.seen]


# ---------------------------------------------------------------------------- assignments
STRATEGIES = {
    "averagely": lambda i: AllocateAveragely(),
    "by-circle": lambda i: AllocateAveragelyByCircle(),
    "by-config": lambda i: AllocateByConfig(
        [MessageQueue("assign-by-config", "broker-a", q) for q in ((0, 1, 2), (3, 4, 5), (6, 7))[i]]),
    "by-machine-room": lambda i: AllocateByMachineRoom(["broker-a"]),
    "consistent-hash": lambda i: AllocateConsistentHash(),
}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_three_consumers_share_eight_queues(cluster: EmbeddedCluster, name: str) -> None:
    topic, group = f"assign-{name}", f"assign-{name}-group"
    create_topic(cluster, topic, 8)
    consumers = [PushConsumer(group, namesrv=cluster.namesrv,
                              rebalance_strategy=STRATEGIES[name](i), **FAST) for i in range(3)]
    try:
        for c in consumers:
            c.subscribe(topic, "*", Recorder())
            c.start()

        def partitioned() -> bool:
            shares = [set(c.assigned_queues(topic)) for c in consumers]
            every = [mq for s in shares for mq in s]
            return len(every) == len(set(every)) == 8

        wait_until(partitioned, 20, f"disjoint covering assignments with {name}")
        with Admin(cluster.namesrv) as admin:  # GET_CONSUMER_RUNNING_INFO through the broker
            holders = admin.queue_holders(group)
        expected = {mq: c.client_id for c in consumers for mq in c.assigned_queues()}
        assert {mq: cid for mq, cid in holders.items() if mq.topic == topic} == {
            mq: cid for mq, cid in expected.items() if mq.topic == topic}
        info = consumers[0].running_info()
        assert info["properties"]["allocateStrategy"] == consumers[0].async_client.strategy.name
        assert {e["messageQueue"]["topic"] for e in info["mqTable"]} <= {topic, f"%RETRY%{group}"}
    finally:
        for c in consumers:
            c.shutdown()


# ---------------------------------------------------------------------------- a consumer killed
def test_killed_consumer_queues_move_and_every_message_is_consumed(
        cluster: EmbeddedCluster, tmp_path: Path) -> None:
    topic, group, total = "kill-topic", "kill-group", 20_000
    create_topic(cluster, topic, 8)
    span, batch = 200, 32
    options = ["--option", "rebalance_interval_ms=2000", "--option", "persist_consumer_offset_interval_ms=1000",
               "--option", "pull_threshold_for_queue=100", "--option", f"pull_batch_size={batch}",
               "--option", f"consume_concurrently_max_span={span}", "--sleep-ms", "0.2"]
    children = [ChildConsumer(cluster.namesrv, group, topic, tmp_path / f"c{i}.log", *options)
                for i in range(3)]
    try:
        for child in children:
            child.wait_ready()
        wait_until(lambda: assignments_partition(children, 8), 30, "three-way assignment")
        victim, survivors = children[0], children[1:]
        produce(cluster, topic, 6_000)
        wait_until(lambda: len(victim.consumed()) >= 600, 30, "the victim consuming")
        victim.kill()  # SIGKILL: no unregister, no offset commit
        produce(cluster, topic, total - 6_000, start=6_000)
        wait_until(lambda: assignments_partition(survivors, 8), 30, "survivors taking over")

        def all_consumed() -> bool:
            return len({e.body for c in children for e in c.consumed()}) >= total

        wait_until(all_consumed, 60, "every message consumed")
        events = [e for c in children for e in c.consumed()]
        bodies = collections.Counter(e.body for e in events)
        assert set(bodies) == {f"m{i}" for i in range(total)}
        duplicates = sum(n - 1 for n in bodies.values())
        # What may come twice is what was in flight at a hand-over: per queue that changed owner,
        # at most the offsets between the last committed one and the highest pulled (the span
        # threshold plus one pull batch). At most all 8 queues change owner.
        bound = 8 * (span + batch + 1)
        print(f"consumed={len(events)} unique={len(bodies)} duplicates={duplicates} bound={bound}")
        assert duplicates <= bound
        by_queue = collections.defaultdict(list)
        for e in events:
            by_queue[e.queue_id].append(e.offset)
        for offsets in by_queue.values():  # nothing skipped inside any queue either
            assert sorted(set(offsets)) == list(range(max(offsets) + 1))
    finally:
        for child in children:
            child.stop()


# ---------------------------------------------------------------------------- broadcasting
def test_broadcasting_consumers_each_get_every_message(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    topic, group, total = "bcast-topic", "bcast-group", 400
    create_topic(cluster, topic, 4)
    produce(cluster, topic, total)
    recorders = [Recorder(), Recorder()]
    consumers = [PushConsumer(group, namesrv=cluster.namesrv, message_model=MessageModel.BROADCASTING,
                              consume_from=ConsumeFrom.FIRST, offset_store_dir=str(tmp_path),
                              instance_name=f"node{i}", **FAST) for i in range(2)]
    for c, r in zip(consumers, recorders, strict=True):
        c.subscribe(topic, "*", r)
        c.start()
    try:
        for r in recorders:
            wait_until(lambda r=r: len(set(r.bodies())) == total, 20, "every message, twice")
            assert sorted(set(r.bodies())) == sorted(f"m{i}" for i in range(total))
            assert all(not mq.topic.startswith("%RETRY%") for c in consumers for mq in c.assigned_queues())
    finally:
        for c in consumers:
            c.shutdown()
    for i in range(2):
        data = orjson.loads((tmp_path / f"node{i}" / group / "offsets.json").read_bytes())
        assert data["group"] == group
        assert sum(row["offset"] for row in data["offsetTable"]) == total
    # Restarted, a broadcasting member resumes from its file, whatever consume_from says.
    again = Recorder()
    consumer = PushConsumer(group, namesrv=cluster.namesrv, message_model="BROADCASTING",
                            consume_from=ConsumeFrom.FIRST, offset_store_dir=str(tmp_path),
                            instance_name="node0", **FAST)
    consumer.subscribe(topic, "*", again)
    with consumer:
        produce(cluster, topic, 10, start=total)
        wait_until(lambda: len(again.bodies()) >= 10, 20, "the new messages")
        assert sorted(again.bodies()) == sorted(f"m{i}" for i in range(total, total + 10))


# ---------------------------------------------------------------------------- consume_from
def test_consume_from_applies_only_without_a_stored_offset(cluster: EmbeddedCluster, tmp_path: Path) -> None:
    topic = "from-topic"
    create_topic(cluster, topic, 2)
    produce(cluster, topic, 40, batch=10)  # 20 per queue
    # A group that committed offsets resumes there even when told to start from the first one.
    with PullConsumer("from-committed", namesrv=cluster.namesrv) as puller:
        for mq in puller.fetch_queues(topic):
            puller.update_offset(mq, 15)
        puller.persist_offsets()
    resumed = Recorder()
    consumer = PushConsumer("from-committed", namesrv=cluster.namesrv, consume_from=ConsumeFrom.FIRST, **FAST)
    consumer.subscribe(topic, "*", resumed)
    with consumer:
        def caught_up() -> bool:  # everything pulled is consumed: the offsets are at the end
            table = consumer.running_info()["mqTable"]
            done = [e["processQueueInfo"]["commitOffset"] for e in table
                    if e["messageQueue"]["topic"] == topic]
            return done == [20, 20]

        wait_until(caught_up, 20, "the uncommitted messages")
        assert sorted((m.queue_id, m.queue_offset) for m in resumed.seen) == [
            (q, o) for q in range(2) for o in range(15, 20)]
    # A member with no stored offset applies consume_from: LAST skips what is already there,
    # TIMESTAMP starts at the first message stored at or after the time.
    marker = int(time.time() * 1000) + 1
    time.sleep(0.05)
    last, since = Recorder(), Recorder()
    consumers = []
    for name, rec, start in (("last", last, ConsumeFrom.LAST), ("since", since, ConsumeFrom.TIMESTAMP)):
        c = PushConsumer("from-fresh", namesrv=cluster.namesrv, message_model=MessageModel.BROADCASTING,
                         consume_from=start, consume_timestamp=marker, offset_store_dir=str(tmp_path),
                         instance_name=name, **FAST)
        c.subscribe(topic, "*", rec)
        consumers.append(c.start())
    try:
        # A queue is listed once its start offset is known: the messages sent next come after it.
        wait_until(lambda: all(len(c.assigned_queues(topic)) == 2 for c in consumers), 20, "queues")
        produce(cluster, topic, 6, start=100)
        new = sorted(f"m{i}" for i in range(100, 106))
        for rec in (last, since):
            wait_until(lambda rec=rec: len(rec.seen) >= 6, 20, "the new messages")
            assert sorted(rec.bodies()) == new
    finally:
        for c in consumers:
            c.shutdown()


def test_a_new_group_consuming_from_last_reads_the_history_of_its_queues(
        cluster: EmbeddedCluster) -> None:
    """What README says of ConsumeFrom.LAST (RocketMQ's rule): the broker answers a new group's
    offset query with 0 on a queue that still holds its first message, so LAST applies only to
    queues whose oldest messages are gone, and a new group reads everything else from the start."""
    topic = "from-last-history"
    create_topic(cluster, topic, 2)
    produce(cluster, topic, 10, batch=5)
    history = Recorder()
    consumer = PushConsumer("from-last-new", namesrv=cluster.namesrv,
                            consume_from=ConsumeFrom.LAST, **FAST)
    consumer.subscribe(topic, "*", history)
    with consumer:
        wait_until(lambda: len(history.seen) >= 10, 20, "the messages stored before the start")
    assert sorted(history.bodies()) == sorted(f"m{i}" for i in range(10))


# ---------------------------------------------------------------------------- retries
def test_a_failed_message_comes_back_after_its_delay_level(cluster: EmbeddedCluster) -> None:
    topic, group = "retry-topic", "retry-group"
    create_topic(cluster, topic, 2)
    arrivals: dict[str, list[float]] = collections.defaultdict(list)
    lock = threading.Lock()

    topics: set[str] = set()

    def fail_twice(messages: list[MessageExt], context: object) -> ConsumeResult:
        with lock:
            for m in messages:
                arrivals[m.body.decode()].append(time.monotonic())
                topics.add(m.topic)
            failing = [m for m in messages if m.body == b"bad" and len(arrivals["bad"]) <= 2]
        if failing:
            raise RuntimeError("not yet")  # raising == RECONSUME_LATER
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=cluster.namesrv, **FAST)
    consumer.subscribe(topic, "*", fail_twice)
    with consumer, Producer("retry-producer", namesrv=cluster.namesrv) as producer:
        wait_until(lambda: len(consumer.assigned_queues()) == 3, 20, "queues incl. the retry queue")
        producer.send(Message(topic, b"bad"))
        producer.send(Message(topic, b"good"))
        wait_until(lambda: len(arrivals["bad"]) >= 3, 30, "two retries")
    assert topics == {topic}  # retried messages show their topic, not %RETRY%group
    assert len(arrivals["good"]) == 1
    times = arrivals["bad"]
    assert len(times) == 3
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert all(0.9 <= g < 8 for g in gaps), gaps  # the 1 s delay levels of this broker


def test_a_message_that_always_fails_ends_in_the_dead_letter_queue(cluster: EmbeddedCluster) -> None:
    topic, group = "dlq-topic", "dlq-group"
    create_topic(cluster, topic, 1)
    rec = Recorder(lambda m: ConsumeResult.RECONSUME_LATER)
    consumer = PushConsumer(group, namesrv=cluster.namesrv, max_reconsume_times=1, **FAST)
    consumer.subscribe(topic, "*", rec)
    with consumer, Producer("dlq-producer", namesrv=cluster.namesrv) as producer:
        wait_until(lambda: len(consumer.assigned_queues()) == 2, 20, "queues")
        producer.send(Message(topic, b"poison", keys="poison-1"))
        wait_until(lambda: len(rec.seen) >= 2, 30, "one retry")
        with Admin(cluster.namesrv) as admin:
            wait_until(lambda: admin.dead_letters(group), 20, "the dead letter")
            dead = admin.dead_letters(group)
    assert [m.body for m in dead] == [b"poison"]
    assert len(rec.seen) == 2  # first delivery + max_reconsume_times retries


def test_a_delayed_message_arrives_after_its_level(cluster: EmbeddedCluster) -> None:
    topic, group = "delay-topic", "delay-group"
    create_topic(cluster, topic, 1)
    rec = Recorder()
    consumer = PushConsumer(group, namesrv=cluster.namesrv, **FAST)
    consumer.subscribe(topic, "*", rec)
    with consumer, Producer("delay-producer", namesrv=cluster.namesrv) as producer:
        wait_until(lambda: len(consumer.assigned_queues()) == 2, 20, "queues")
        sent = time.monotonic()
        producer.send(Message(topic, b"later", delay_level=1))  # level 1 = 1 s on this broker
        producer.send(Message(topic, b"now"))
        wait_until(lambda: len(rec.seen) >= 2, 20, "both messages")
        waited = time.monotonic() - sent
    assert rec.bodies() == ["now", "later"]
    assert 0.9 <= waited < 8


def test_async_push_consumer_with_a_coroutine_listener(cluster: EmbeddedCluster) -> None:
    topic, group, total = "async-topic", "async-group", 300
    create_topic(cluster, topic, 4)
    produce(cluster, topic, total, batch=25)

    async def scenario() -> list[str]:
        got: list[str] = []
        done = asyncio.Event()

        consumer = AsyncPushConsumer(group, cluster.namesrv, consume_message_batch_max_size=8,
                                     **FAST)

        @consumer.subscribe(topic, "*")
        async def on_messages(messages: list[MessageExt], context: object) -> ConsumeResult:
            await asyncio.sleep(0)  # runs on the consumer's loop: may await freely
            got.extend(m.body.decode() for m in messages)
            if len(set(got)) >= total:
                done.set()
            return ConsumeResult.SUCCESS

        async with consumer, asyncio.timeout(30):
            await done.wait()
        return got

    assert sorted(set(run(scenario()))) == sorted(f"m{i}" for i in range(total))
