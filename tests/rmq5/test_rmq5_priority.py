"""Priority messages with the official RocketMQ 5 Python client (5.1.2) against `orbitmq
standalone`: a PRIORITY topic's route accepts the client's PRIORITY type, priorities land in
queue ``min(priority, queues - 1)``, and a high-priority message sent behind a backlog of
10,000 low-priority ones comes within a SimpleConsumer's first two receive batches (of 32, as
the client's examples receive), and again first when it was not acked in time (a retry keeps
its priority).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from rmq5_support import Cluster, DriverFailed, Rmq5Driver, unique, wait_until

import orbitmq

pytestmark = pytest.mark.rmq5

BACKLOG = 10_000
BATCH = 32
PRIORITY_TYPE = 6  # apache.rocketmq.v2.MessageType.PRIORITY


def receive(driver: Rmq5Driver, cid: str, invisible_s: int) -> list[dict[str, Any]]:
    return list(driver.call("receive", id=cid, max=BATCH, invisible_s=invisible_s)["messages"])


def dispatched(cluster: Cluster, topic: str, total: int) -> None:
    """Until the topic's queues hold ``total`` messages (read with OrbitMQ's SDK): a send is
    answered once durable and its queue entry follows; a receive sees dispatched messages."""
    with orbitmq.Admin(namesrv=cluster.namesrv) as admin:
        wait_until(f"{total} messages in {topic}'s queues",
                   lambda: sum(q.max_offset for q in admin.topic_status(topic)) >= total, every=0.05)


def test_high_priority_overtakes_a_backlog_of_ten_thousand(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("Prio"), "PRIORITY", queues=10)
    group = cluster.group(unique("PrioG"))
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    started = time.monotonic()
    for priority in (0, 1):  # the backlog: low priorities only
        done = driver.call("send_many", timeout=300, id="p", topic=topic, body="low",
                           priority=priority, count=BACKLOG // 2)
        assert done["sent"] == BACKLOG // 2
    high = driver.call("send", id="p", topic=topic, body="HIGH", priority=9)
    dispatched(cluster, topic, BACKLOG + 1)
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=group, topic=topic, await_s=2)
    batches = [receive(driver, "c", invisible_s=2) for _ in range(2)]
    got = [m for batch in batches for m in batch]
    highs = [m for m in got if m["body"] == "HIGH"]
    assert len(highs) == 1, [len(b) for b in batches]
    assert highs[0]["id"] == high["message_id"] and highs[0]["priority"] == 9
    assert highs[0]["type"] == PRIORITY_TYPE and highs[0]["attempt"] == 1
    for m in got:
        if m["body"] != "HIGH":
            driver.call("ack", id="c", handle=m["handle"])
    # Not acked, it is visible again after 2 s: a retry, still ahead of the 9,900-odd low ones.
    deadline = time.monotonic() + 30
    while True:
        batch = receive(driver, "c", invisible_s=30)
        again = [m for m in batch if m["body"] == "HIGH"]
        if again:
            break
        for m in batch:
            driver.call("ack", id="c", handle=m["handle"])
        assert time.monotonic() < deadline, "the unacked high-priority message did not come back"
    assert batch[0]["body"] == "HIGH" and again[0]["attempt"] == 2 and again[0]["priority"] == 9
    assert time.monotonic() - started < 300


def test_priorities_pick_queues_and_bad_ones_are_refused(cluster: Cluster, driver: Rmq5Driver) -> None:
    topic = cluster.topic(unique("PrioQ"), "PRIORITY", queues=4)
    normal = cluster.topic(unique("PrioNormal"))
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic, normal])
    for p in (0, 2, 3, 9):
        driver.call("send", id="p", topic=topic, body=f"p{p}", priority=p)
    driver.call("send", id="p", topic=topic, body="plain")  # no priority: NORMAL, priority 0
    dispatched(cluster, topic, 5)
    driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("PrioQG"), topic=topic,
                await_s=2)
    got: list[dict[str, Any]] = []
    for _ in range(10):
        got += receive(driver, "c", invisible_s=30)
        if len(got) >= 5:
            break
    # Highest queue first; one queue (3 holds 3..9) in the order it was written.
    assert [m["body"] for m in got] == ["p3", "p9", "p2", "p0", "plain"], got
    assert {m["body"]: m["priority"] for m in got if m["body"] != "plain"} == \
        {"p0": 0, "p2": 2, "p3": 3, "p9": 9}
    # The client checks the route's accepted types: a NORMAL topic does not take priorities.
    with pytest.raises(DriverFailed, match="queue accept message types"):
        driver.call("send", id="p", topic=normal, body="x", priority=1)
    # 10 is out of RocketMQ 5.4's 0..9: the broker refuses it, naming the range.
    with pytest.raises(DriverFailed, match="out of range 0..9"):
        driver.call("send", id="p", topic=topic, body="x", priority=10)


def test_push_consumer_takes_the_high_priority_message_early(cluster: Cluster, driver: Rmq5Driver) -> None:
    """The 5.x PushConsumer receives through the same POP path: with a backlog waiting, the
    high-priority message is among the first it consumes (its first receive batch)."""
    topic = cluster.topic(unique("PrioPush"), "PRIORITY", queues=10)
    group = cluster.group(unique("PrioPushG"))
    driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[topic])
    driver.call("send_many", timeout=300, id="p", topic=topic, body="low", priority=0, count=2000)
    driver.call("send", id="p", topic=topic, body="HIGH", priority=9)
    dispatched(cluster, topic, 2001)
    driver.call("push", id="c", endpoint=cluster.endpoint, group=group, topic=topic)
    deadline = time.monotonic() + 60
    while True:
        seen = driver.call("consumed", id="c")["consumed"]
        if any(m["body"] == "HIGH" for m in seen):
            break
        assert time.monotonic() < deadline, f"HIGH not consumed; {len(seen)} others were"
        time.sleep(0.1)
    position = next(i for i, m in enumerate(seen) if m["body"] == "HIGH")
    assert position < BATCH, position
    driver.call("close", id="c")
