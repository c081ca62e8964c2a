"""Orderly PushConsumers against a real broker: per-queue order across a killed member, local
suspend-and-retry that never skips, and the dead letter queue after the retry limit."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from push_support import ChildConsumer, assignments_partition, wait_until

from orbitmq import (
    Admin,
    ConsumeContext,
    ConsumeResult,
    Message,
    Producer,
    PushConsumer,
    select_by_hash,
)
from orbitmq.config import TEST_MIN_STORE
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster

KEYS, STEPS = 20, 200
FAST = {"rebalance_interval_ms": 2000, "persist_consumer_offset_interval_ms": 1000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * 1024 * 1024)
    with EmbeddedCluster(tmp_path_factory.mktemp("orderly"), store=store) as c:
        yield c


def create_topic(cluster: EmbeddedCluster, topic: str, queues: int) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        wait_until(lambda: topic in admin.list_topics(), 10, f"route of {topic}")


def send_steps(namesrv: str, topic: str) -> None:
    """Step 0 of every key, then step 1 of every key, ...; a key always goes to one queue."""
    with Producer("orderly-producer", namesrv=namesrv) as producer:
        for step in range(STEPS):
            for k in range(KEYS):
                key = f"key{k}"
                producer.send(Message(topic, f"{key}:{step}".encode(), keys=key),
                              selector=select_by_hash, arg=key)


def test_every_key_is_consumed_in_order_across_a_killed_member(cluster: EmbeddedCluster,
                                                                tmp_path: Path) -> None:
    topic, group = "orderly-kill", "orderly-kill-group"
    create_topic(cluster, topic, 4)
    options = ["--orderly", "--sleep-ms", "1", "--option", "rebalance_interval_ms=2000",
               "--option", "persist_consumer_offset_interval_ms=1000"]
    children = [ChildConsumer(cluster.namesrv, group, topic, tmp_path / f"o{i}.log", *options)
                for i in range(3)]
    producer = threading.Thread(target=send_steps, args=(cluster.namesrv, topic), daemon=True)
    try:
        for child in children:
            child.wait_ready()
        wait_until(lambda: assignments_partition(children, 4), 30, "locked three-way assignment")
        producer.start()
        victim = children[0]
        wait_until(lambda: len(victim.consumed()) >= STEPS, 60, "the victim consuming")
        victim.kill()  # SIGKILL mid-run: no unlock, no offset commit
        survivors = children[1:]
        wait_until(lambda: assignments_partition(survivors, 4), 30, "survivors taking over")
        producer.join(120)

        def all_seen() -> bool:
            return len({e.body for c in children for e in c.consumed()}) == KEYS * STEPS

        wait_until(all_seen, 60, "every step of every key")
    finally:
        for child in children:
            child.stop()
    events = sorted((e for c in children for e in c.consumed()), key=lambda e: e.time_ns)
    first_seen: dict[str, list[int]] = collections.defaultdict(list)
    per_process: dict[tuple[int, str], list[int]] = collections.defaultdict(list)
    seen: set[str] = set()
    for e in events:
        key, step = e.body.split(":")
        per_process[(e.pid, key)].append(int(step))
        if e.body not in seen:
            seen.add(e.body)
            first_seen[key].append(int(step))
    for k in range(KEYS):
        assert first_seen[f"key{k}"] == list(range(STEPS)), f"key{k} out of order or skipped"
    for (pid, key), steps in per_process.items():  # one member never goes back within a key
        assert steps == sorted(set(steps)), f"process {pid} consumed {key} out of order"
    repeats = len(events) - len(seen)
    print(f"events={len(events)} repeats={repeats} victim={len(victim.consumed())}")


def test_suspend_consumes_the_same_message_again_then_moves_on(cluster: EmbeddedCluster) -> None:
    topic, group = "orderly-suspend", "orderly-suspend-group"
    create_topic(cluster, topic, 1)
    lock = threading.Lock()
    calls: list[tuple[str, float, int]] = []

    def listener(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        assert len(messages) == 1 and context.orderly
        body = messages[0].body.decode()
        with lock:
            calls.append((body, time.monotonic(), messages[0].reconsume_times))
            tries = sum(1 for b, _, _ in calls if b == body)
        if body == "m1" and tries <= 2:
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if body == "m2" and tries == 1:
            raise RuntimeError("a raising orderly listener suspends too")
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=cluster.namesrv, orderly=True,
                            suspend_current_queue_time_ms=200, **FAST)
    consumer.subscribe(topic, "*", listener)
    with consumer, Producer("suspend-producer", namesrv=cluster.namesrv) as producer:
        wait_until(lambda: consumer.assigned_queues(topic), 20, "the queue locked")
        for i in range(5):
            producer.send(Message(topic, f"m{i}".encode()))
        wait_until(lambda: len(calls) >= 8, 20, "every message consumed")
    assert [b for b, _, _ in calls] == ["m0", "m1", "m1", "m1", "m2", "m2", "m3", "m4"]
    assert [r for b, _, r in calls if b == "m1"] == [0, 1, 2]  # reconsume times count locally
    m1 = [t for b, t, _ in calls if b == "m1"]
    assert all(b - a >= 0.18 for a, b in zip(m1, m1[1:], strict=False))


def test_past_the_retry_limit_an_orderly_message_goes_to_the_dead_letter_queue(
        cluster: EmbeddedCluster) -> None:
    topic, group = "orderly-dlq", "orderly-dlq-group"
    create_topic(cluster, topic, 1)
    seen: list[str] = []

    def listener(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        seen.extend(m.body.decode() for m in messages)
        if messages[0].body == b"poison":
            return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=cluster.namesrv, orderly=True, max_reconsume_times=2,
                            suspend_current_queue_time_ms=100, **FAST)
    consumer.subscribe(topic, "*", listener)
    with consumer, Producer("orderly-dlq-producer", namesrv=cluster.namesrv) as producer:
        wait_until(lambda: consumer.assigned_queues(topic), 20, "the queue locked")
        producer.send(Message(topic, b"poison"))
        producer.send(Message(topic, b"after"))
        wait_until(lambda: "after" in seen, 20, "the queue moving on")
        with Admin(cluster.namesrv) as admin:
            dead = admin.dead_letters(group)
    assert seen == ["poison", "poison", "poison", "after"]  # 1 + max_reconsume_times
    assert [m.body for m in dead] == [b"poison"]
