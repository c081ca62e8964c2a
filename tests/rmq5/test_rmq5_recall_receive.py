"""The official RocketMQ 5 Python client: recalling timer messages, and receives that do not wait
needlessly.

Recall (``producer.recall_message(topic, handle)``, RocketMQ 5.3): a recalled timer message is
never delivered (checked with a marker message due after it: once the marker is received, the
recalled one would have been too); recalling a delivered one fails with RocketMQ's answer.

Receives: a SimpleConsumer names one queue per receive, and the broker hands out what any queue
of the topic holds, at once, instead of waiting out the long poll on the named, empty queue; a
PushConsumer sends no invisible duration (rocketmq-clients#1198), gets the broker's default, and
its unacked messages come back once it is gone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rmq5_support import Cluster, DriverFailed, Rmq5Driver, unique, wait_until

import orbitmq

pytestmark = pytest.mark.rmq5

RECEIVE_ROUNDS_MAX = 40
INVISIBLE_DEFAULT_MS = 3000  # pop_invisible_time_default_ms of this module's broker
AWAIT_S = 20  # a long poll the receives below must not wait out
PROMPT_S = 8.0  # what "at once" means here, with room for a loaded machine


@pytest.fixture(scope="module")
def cluster(rmq5_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    found = Cluster(tmp_path_factory.mktemp("rmq5-recall"), "--recall-message-enable", "true",
                    "--pop-invisible-time-default-ms", str(INVISIBLE_DEFAULT_MS),
                    "--client-channel-expire-ms", "1000")
    try:
        yield found
    finally:
        found.stop()


def receive_until(driver: Rmq5Driver, cid: str, body: str) -> list[dict[str, Any]]:
    """Receive (and ack) until a message with ``body`` came; everything received."""
    got: list[dict[str, Any]] = []
    for _ in range(RECEIVE_ROUNDS_MAX):
        for m in driver.call("receive", id=cid, max=32, invisible_s=30)["messages"]:
            got.append(m)
            driver.call("ack", id=cid, handle=m["handle"])
        if any(m["body"] == body for m in got):
            return got
    raise AssertionError(f"{body!r} not received: {got}")


def test_a_recalled_timer_message_is_never_delivered(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Recall"), "DELAY")
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("RecallG"), topic=topic,
                await_s=1)
    due_s = int(time.time()) + 3
    sent = driver.call("send", id="p", topic=topic, body="recalled", delivery_s=due_s)
    assert sent["recall_handle"]
    answer = driver.call("recall", id="p", topic=topic, handle=sent["recall_handle"])
    assert answer["message_id"] == sent["message_id"]
    driver.call("send", id="p", topic=topic, body="marker", delivery_s=due_s + 1)
    got = receive_until(driver, "c", "marker")
    assert [m["body"] for m in got] == ["marker"]
    assert driver.call("receive", id="c", max=32, invisible_s=30)["messages"] == []


def test_recalling_a_delivered_message_fails_with_rocketmqs_code(cluster: Cluster,
                                                                 driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("RecallLate"), "DELAY")
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("RecallLateG"),
                topic=topic, await_s=1)
    sent = driver.call("send", id="p", topic=topic, body="soon", delivery_s=int(time.time()) + 2)
    receive_until(driver, "c", "soon")
    with pytest.raises(DriverFailed) as refused:
        driver.call("recall", id="p", topic=topic, handle=sent["recall_handle"])
    # RocketMQ's broker answers ILLEGAL_OPERATION, which its proxy passes on as
    # INTERNAL_SERVER_ERROR (50001) with the broker's remark.
    assert "recall failed, timestamp invalid" in str(refused.value)
    assert "50001" in str(refused.value)


def test_a_recall_survives_a_kill_9(rmq5_ready: None, driver: Rmq5Driver, tmp_path: Path) -> None:
    own = Cluster(tmp_path / "store", "--recall-message-enable", "true")
    try:
        topic = own.topic(unique("RecallKill"), "DELAY")
        driver.call("producer", id="p", endpoint=own.endpoint, topics=[topic])
        due_s = int(time.time()) + 5
        sent = driver.call("send", id="p", topic=topic, body="recalled", delivery_s=due_s)
        driver.call("recall", id="p", topic=topic, handle=sent["recall_handle"])
        driver.call("close", id="p")
        own.stop(kill=True)  # the answer was the last thing: no orderly stop
        own.start()
        driver.call("producer", id="p2", endpoint=own.endpoint, topics=[topic])
        driver.call("send", id="p2", topic=topic, body="marker", delivery_s=due_s + 1)
        driver.call("simple", id="c", endpoint=own.endpoint, group=unique("RecallKillG"),
                    topic=topic, await_s=1)
        got = receive_until(driver, "c", "marker")
        assert [m["body"] for m in got] == ["marker"]
    finally:
        own.stop()


def receive_into(driver: Rmq5Driver, answers: list[dict[str, Any]]) -> None:
    answers.append(driver.call("receive", id="c", max=32, invisible_s=30, timeout=AWAIT_S + 30))


def test_a_receive_takes_from_any_queue_without_waiting_out_its_long_poll(
        cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("AnyQueue"), queues=8)
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("AnyQueueG"), topic=topic,
                await_s=AWAIT_S)
    with orbitmq.Producer(unique("AnyQueueP"), cluster.namesrv) as producer:
        [queue7] = [q for q in producer.fetch_publish_queues(topic) if q.queue_id == 7]
        # The client names the queues in turn: over three receives at least two name another
        # queue than 7, where every message goes.
        for i in range(3):
            answers: list[dict[str, Any]] = []
            started = time.monotonic()
            receiver = threading.Thread(target=receive_into, args=(driver, answers))
            receiver.start()
            time.sleep(1.0)  # the receive is (most likely) waiting at the broker by now
            producer.send(orbitmq.Message(topic, f"m{i}".encode()), lambda qs, m, a: queue7)
            receiver.join(AWAIT_S + 40)
            took = time.monotonic() - started
            [answer] = answers
            assert [m["body"] for m in answer["messages"]] == [f"m{i}"]
            assert took < PROMPT_S, f"receive {i} took {took:.1f} s (long poll {AWAIT_S} s)"
            driver.call("ack", id="c", handle=answer["messages"][0]["handle"])


def test_a_push_consumers_unacked_messages_come_back_after_the_default_invisible_time(
        cluster: Cluster, driver: Rmq5Driver, tmp_path: Path) -> None:
    topic = cluster.topic(unique("PushBack"))
    group = unique("PushBackG")
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    sent = driver.call("send", id="p", topic=topic, body="unacked")
    doomed = Rmq5Driver(tmp_path / "doomed-home")
    try:
        doomed.call("push", id="c1", endpoint=cluster.endpoint, group=group, topic=topic, hang=True)
        wait_until("the first consumer got the message",
                   lambda: doomed.call("consumed", id="c1")["consumed"])
    finally:
        doomed.kill()  # gone without an ack, its listener still busy
    # The message was received with the broker's default invisible time (the client named
    # none) and is renewed only while its consumer lives: it comes back to the next one.
    driver.call("push", id="c2", endpoint=cluster.endpoint, group=group, topic=topic)
    seen = wait_until("the message delivered again",
                      lambda: driver.call("consumed", id="c2")["consumed"],
                      timeout=30 + INVISIBLE_DEFAULT_MS / 1000)
    assert [(m["id"], m["attempt"]) for m in seen] == [(sent["message_id"], 2)]
