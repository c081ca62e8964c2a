"""Helpers of the Spark tests: topics with known messages, and reading a topic back with the SDK
(not with Spark), so that what a Spark job wrote is checked by an independent consumer."""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable

from orbitmq import Admin, Message, Producer, PullConsumer
from orbitmq.protocol.message import MessageExt

_topic_ids = itertools.count()


def new_topic(namesrv: str, prefix: str, queues: int = 4) -> str:
    topic = f"{prefix}{next(_topic_ids)}"
    with Admin(namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
    return topic


@dataclasses.dataclass(frozen=True)
class Sent:
    """A produced message and where the broker put it."""

    body: bytes
    key: str
    tag: str
    queue_id: int
    queue_offset: int
    msg_id: str


def produce(namesrv: str, topic: str, count: int, *, start: int = 0, batch: int = 250,
            body: Callable[[int], bytes] | None = None) -> list[Sent]:
    """``count`` messages (body ``m-<i>``, key ``k<i>``, tag ``t<i%3>``) in batches."""
    make = body or (lambda i: f"m-{i}".encode())
    sent: list[Sent] = []
    with Producer("spark-test-producer", namesrv) as producer:
        for lo in range(start, start + count, batch):
            ids = range(lo, min(lo + batch, start + count))
            msgs = [Message(topic, make(i), tags=f"t{i % 3}", keys=[f"k{i}"]) for i in ids]
            r = producer.send_batch(msgs)
            for j, (i, msg_id) in enumerate(zip(ids, r.msg_id.split(","), strict=True)):
                sent.append(Sent(make(i), f"k{i}", f"t{i % 3}", r.queue.queue_id,
                                 r.queue_offset + j, msg_id))
    return sent


def consume_all(namesrv: str, topic: str, *, expect: int | None = None,
                timeout_s: float = 30.0) -> list[MessageExt]:
    """Every message of ``topic`` (pulled with the SDK); with ``expect``, waits (bounded) until at
    least that many are there, then settles for a moment to catch any extra ones."""
    deadline = time.monotonic() + timeout_s
    with PullConsumer("spark-test-checker", namesrv) as consumer:
        while True:
            found = []
            for mq in consumer.fetch_queues(topic):
                offset = 0
                while True:
                    r = consumer.pull(mq, offset, 1024)
                    found.extend(r.messages)
                    if r.next_begin_offset <= offset or r.status.name == "NO_NEW_MSG":
                        break
                    offset = r.next_begin_offset
            if expect is None or len(found) >= expect or time.monotonic() > deadline:
                return found
            time.sleep(0.3)


def queue_bounds(namesrv: str, topic: str) -> dict[int, tuple[int, int]]:
    with Admin(namesrv) as admin:
        return {s.queue.queue_id: (s.min_offset, s.max_offset) for s in admin.topic_status(topic)}
