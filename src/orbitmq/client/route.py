"""Pure route logic: which queues a producer may write and a consumer may read, and which queue the
next send goes to.

Kept free of I/O so the choices that matter for correctness (round robin, avoiding the broker that
just failed, the queue order hashing relies on) are unit-tested without servers.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Collection

from orbitmq.protocol.bodies import MessageQueue, Perm, QueueData, TopicRouteData

__all__ = [
    "MASTER_ID",
    "TopicPublishInfo",
    "publish_info_from_route",
    "subscribe_queues_from_route",
    "broker_addr_table",
    "derive_route_from_default",
]

MASTER_ID = 0


@dataclasses.dataclass(eq=False)
class TopicPublishInfo:
    """A topic's write queues and the producer's round-robin position over them.

    Attributes:
        topic: the topic.
        queues: write queues ordered by broker name, then queue id (RocketMQ's order).
        route: the route they were built from (a new route means a new TopicPublishInfo).
        from_default: True while the topic has no route of its own and rides on TBW102's
            (the broker creates the topic with the first message).
    """

    topic: str
    queues: list[MessageQueue]
    route: TopicRouteData
    from_default: bool = False
    # Start anywhere so that many producers starting together do not all hit queue 0 first.
    _index: int = dataclasses.field(default_factory=lambda: random.randrange(1 << 16))

    @property
    def ok(self) -> bool:
        """Whether there is any queue to send to."""
        return bool(self.queues)

    def _next(self) -> MessageQueue:
        self._index = (self._index + 1) & 0x7FFFFFFF
        return self.queues[self._index % len(self.queues)]

    def select_queue(self, avoid: str | Collection[str] | None = None) -> MessageQueue:
        """The next queue round robin, skipping queues of the brokers in ``avoid`` while another
        broker has one (RocketMQ's retry policy: a retry goes to a broker that did not just fail;
        and a broker that recently could not be reached is left alone for a while).

        Raises:
            IndexError: there are no queues (check ``ok`` first).
        """
        if not self.queues:
            raise IndexError(f"topic {self.topic!r} has no write queue")
        if avoid:
            avoided = {avoid} if isinstance(avoid, str) else avoid
            for _ in range(len(self.queues)):
                mq = self._next()
                if mq.broker_name not in avoided:
                    return mq
        return self._next()


def _writable(qd: QueueData) -> bool:
    return bool(qd.perm & Perm.WRITE)


def _readable(qd: QueueData) -> bool:
    return bool(qd.perm & Perm.READ)


def broker_addr_table(route: TopicRouteData) -> dict[str, dict[int, str]]:
    """Broker name -> (broker id -> address) of one route."""
    return {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas}


def _parse_order_conf(conf: str) -> list[tuple[str, int]]:
    """``"broker-a:4;broker-b:4"`` (an ordered topic's fixed layout) as (broker, queue count)."""
    pairs = []
    for item in conf.split(";"):
        name, _, nums = item.strip().rpartition(":")
        if name and nums.strip().isdigit():
            pairs.append((name, int(nums)))
    return pairs


def publish_info_from_route(
    topic: str, route: TopicRouteData, *, from_default: bool = False
) -> TopicPublishInfo:
    """The write queues of ``route``: brokers whose master is known and whose queues are
    writable, ordered by broker name, then queue id."""
    addrs = broker_addr_table(route)
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for name, nums in _parse_order_conf(route.order_topic_conf):
            queues.extend(MessageQueue(topic, name, i) for i in range(nums))
    else:
        for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
            if not _writable(qd) or MASTER_ID not in addrs.get(qd.broker_name, {}):
                continue
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(topic, queues, route, from_default)


def subscribe_queues_from_route(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    """The read queues of ``route``, ordered by broker name, then queue id."""
    queues: list[MessageQueue] = []
    for qd in sorted(route.queue_datas, key=lambda q: q.broker_name):
        if _readable(qd):
            queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.read_queue_nums))
    return queues


def derive_route_from_default(default_route: TopicRouteData, queue_nums_max: int) -> TopicRouteData:
    """The route a new topic gets from TBW102's: same brokers, at most ``queue_nums_max`` queues
    each (the producer's ``default_topic_queue_nums``), as RocketMQ's producer does."""
    return TopicRouteData(
        queue_datas=[
            QueueData(
                qd.broker_name,
                min(qd.read_queue_nums, queue_nums_max),
                min(qd.write_queue_nums, queue_nums_max),
                qd.perm,
                qd.topic_sys_flag,
            )
            for qd in default_route.queue_datas
        ],
        broker_datas=list(default_route.broker_datas),
    )
