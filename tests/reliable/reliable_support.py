"""Helpers of the orbitmq.reliable tests: bounded waits, topics, reading a topic back whole."""

from __future__ import annotations

import time
from collections.abc import Callable

from orbitmq import Admin, BrokerError, MessageExt, PullConsumer, PullStatus
from orbitmq.testing import EmbeddedCluster


def wait_until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def create_topic(namesrv: str, topic: str, queues: int = 4) -> None:
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)

        def routed() -> bool:
            try:
                return len(admin.topic_route(topic).queue_datas) > 0
            except BrokerError:  # the broker has not registered it with the name server yet
                return False

        wait_until(routed, 10, f"route of {topic}")


def read_topic(cluster: EmbeddedCluster, topic: str) -> list[MessageExt]:
    """Every message stored in ``topic``, queue by queue, each queue in offset order."""
    found: list[MessageExt] = []
    with PullConsumer("reliable-test-reader", namesrv=cluster.namesrv) as puller:
        for mq in puller.fetch_queues(topic):
            offset = 0
            while True:
                res = puller.pull(mq, offset=offset, max_nums=32)
                if res.status is not PullStatus.FOUND:
                    break
                found.extend(res.messages)
                offset = res.next_begin_offset
    return found


def outbox_ids(messages: list[MessageExt]) -> list[int]:
    return [int(m.properties["ORBITMQ_OUTBOX_ID"]) for m in messages]
