"""Retries end to end with OrbitMQ's PushConsumer on a real name server and broker.

Levels "1s 1s 1s 2s": the first retry waits level 3 (1 s), the second level 4 (2 s), so the gaps
between deliveries tell that the broker used level 3 + reconsume times. A listener that always
fails parks the message in %DLQ% after the group's retry_max_times, and ``orbitmq dlq resend``
brings it back, to that group only (another group of the same topic does not get it again).
``orbitmq group status`` names the client holding each queue.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import orbitmq
from orbitmq.cli.main import cli
from orbitmq.config import TEST_MIN_STORE
from orbitmq.testing import EmbeddedCluster

LEVELS = "1s 1s 1s 2s"
WAIT_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, message_delay_level=LEVELS)
    with EmbeddedCluster(tmp_path_factory.mktemp("push-retry"), store=store) as c:
        yield c


class Deliveries:
    """What a listener saw: (monotonic time, body, reconsume times, topic) per message."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, bytes, int, str]] = []
        self._cond = threading.Condition()

    def record(self, msg: Any) -> None:
        with self._cond:
            self.seen.append((time.monotonic(), bytes(msg.body), msg.reconsume_times, msg.topic))
            self._cond.notify_all()

    def wait(self, body: bytes, count: int, timeout: float = WAIT_S) -> list[tuple[float, int, str]]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [(t, r, topic) for t, b, r, topic in self.seen if b == body]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                assert left > 0, f"{body!r} seen {len(found)} times, expected {count}: {self.seen}"
                self._cond.wait(left)


def consumer(cluster: EmbeddedCluster, group: str, topic: str, deliveries: Deliveries,
             fail: Any) -> orbitmq.PushConsumer:
    with orbitmq.Admin(cluster.namesrv) as admin:  # the topic exists before its consumer starts
        if topic not in admin.list_topics():
            admin.create_topic(topic, read_queue_nums=4, write_queue_nums=4)
    c = orbitmq.PushConsumer(group, namesrv=cluster.namesrv, consume_from="first",
                             persist_consumer_offset_interval_ms=200)

    @c.subscribe(topic)
    def on_messages(messages: list[Any], context: Any) -> orbitmq.ConsumeResult:
        for msg in messages:
            deliveries.record(msg)
        if any(fail(m) for m in messages):
            return orbitmq.ConsumeResult.RECONSUME_LATER
        return orbitmq.ConsumeResult.SUCCESS

    c.start()
    return c


def send(cluster: EmbeddedCluster, topic: str, body: bytes) -> Any:
    with orbitmq.Producer("push-retry-producer", namesrv=cluster.namesrv) as producer:
        return producer.send(orbitmq.Message(topic, body, tags="t", keys=["key-1"]))


def cli_run(cluster: EmbeddedCluster, *args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--namesrv", cluster.namesrv])
    assert result.exit_code == 0, (args, result.output, result.exception)
    return result.output


def test_fails_twice_then_succeeds_with_gaps_of_the_levels(cluster: EmbeddedCluster) -> None:
    topic, group = "PushRetryTopic", "push-retry-group"
    deliveries = Deliveries()
    c = consumer(cluster, group, topic, deliveries, lambda m: m.reconsume_times < 2)
    try:
        sent = send(cluster, topic, b"flaky")
        seen = deliveries.wait(b"flaky", 3)
        assert [r for _, r, _ in seen] == [0, 1, 2]
        assert {t for _, _, t in seen} == {topic}  # retries show their original topic
        gaps = [seen[1][0] - seen[0][0], seen[2][0] - seen[1][0]]
        assert 1.0 <= gaps[0] < 1.0 + 1.5, gaps  # level 3
        assert 2.0 <= gaps[1] < 2.0 + 1.5, gaps  # level 4
        # group status names the client holding each of the topic's queues.
        deadline = time.monotonic() + WAIT_S
        while True:
            status = json.loads(cli_run(cluster, "group", "status", "--group", group,
                                        "--topic", topic, "--format", "json"))
            queues = [q for q in status["queues"] if q["topic"] == topic]
            if queues and all(q["client"] == c.client_id for q in queues):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert sent.queue.queue_id in {q["queue_id"] for q in queues}
        text = cli_run(cluster, "group", "status", "--group", group, "--topic", topic)
        assert text.splitlines()[0].split()[-1] == "CLIENT" and c.client_id in text
    finally:
        c.shutdown()
    assert len(deliveries.wait(b"flaky", 3)) == 3  # success ends it: no fourth delivery


def test_always_failing_goes_to_the_dlq_and_resend_brings_it_back(cluster: EmbeddedCluster) -> None:
    topic, group = "PushDlqTopic", "push-dlq-group"
    cli_run(cluster, "group", "update", "--group", group, "--retry-max-times", "2")
    failing = threading.Event()
    failing.set()
    deliveries = Deliveries()
    c = consumer(cluster, group, topic, deliveries, lambda m: failing.is_set())
    try:
        sent = send(cluster, topic, b"doomed")
        seen = deliveries.wait(b"doomed", 3)
        with orbitmq.Admin(cluster.namesrv) as admin:
            deadline = time.monotonic() + WAIT_S
            while not (dead := admin.dead_letters(group)):
                assert time.monotonic() < deadline, "no dead letter"
                time.sleep(0.1)
        assert [m.msg_id for m in dead] == [sent.msg_id]
        assert dead[0].reconsume_times == 3 and len(deliveries.wait(b"doomed", 3)) == 3
        assert [r for _, r, _ in seen[:3]] == [0, 1, 2]

        failing.clear()
        out = cli_run(cluster, "dlq", "resend", "--group", group, "--msg-id", sent.msg_id)
        assert f"resent {sent.msg_id} to %RETRY%{group} (original topic {topic})" in out
        back = deliveries.wait(b"doomed", 4)[3]
        assert back[1] == 0 and back[2] == topic
    finally:
        c.shutdown()


def test_a_resent_dead_letter_goes_back_to_its_own_group_only(cluster: EmbeddedCluster) -> None:
    """Issue 36: a resend used to go to the original topic, so every other group of that topic
    processed the message a second time."""
    topic, group_a, group_b = "PushTwoGroupsTopic", "two-groups-a", "two-groups-b"
    cli_run(cluster, "group", "update", "--group", group_a, "--retry-max-times", "0")
    failing = threading.Event()
    failing.set()
    seen_a, seen_b = Deliveries(), Deliveries()
    a = consumer(cluster, group_a, topic, seen_a, lambda m: failing.is_set())
    b = consumer(cluster, group_b, topic, seen_b, lambda m: False)
    try:
        sent = send(cluster, topic, b"for both")
        seen_b.wait(b"for both", 1)
        with orbitmq.Admin(cluster.namesrv) as admin:
            deadline = time.monotonic() + WAIT_S
            while not admin.dead_letters(group_a):  # no retry for A: a dead letter at once
                assert time.monotonic() < deadline, "no dead letter"
                time.sleep(0.1)
            failing.clear()
            topic_ends = {s.queue: s.max_offset for s in admin.topic_status(topic)}
            [item] = admin.resend_dead_letters(group_a, msg_id=sent.msg_id)
            assert item.topic == f"%RETRY%{group_a}" and item.result is not None
            back = seen_a.wait(b"for both", 2)[1]
            assert back[1] == 0 and back[2] == topic  # retries reset, under its original topic
            # B gets messages from the topic and from its own retry topic only: neither has
            # anything new, and B saw the message once.
            assert {s.queue: s.max_offset for s in admin.topic_status(topic)} == topic_ends
            assert all(s.max_offset == 0 for s in admin.topic_status(f"%RETRY%{group_b}"))
            assert [body for _, body, _, _ in seen_b.seen] == [b"for both"]
    finally:
        a.shutdown()
        b.shutdown()
