"""What the admin client returns, and the parsing of the brokers' admin answers.

RocketMQ's Java broker writes per-queue tables (TopicStatsTable, ConsumeStats) as JSON objects
keyed by a MessageQueue *object*, which is not JSON. The parsers here accept that table as a list
of entries carrying their queue (``{"messageQueue": {...}, ...}`` or the queue fields inline) or as
an object keyed by a queue written as JSON text, so that they read OrbitMQ's broker and stay
lenient about the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.bodies import MessageQueue, loads_lenient

__all__ = [
    "TopicQueueStatus",
    "QueueConsumeStatus",
    "GroupStatus",
    "ConsumerConnection",
    "ConsumerConnectionInfo",
    "parse_topic_stats",
    "parse_consume_stats",
    "parse_consumer_connection",
    "parse_subscription_groups",
    "parse_offset_groups",
]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicQueueStatus:
    """One queue of a topic: offsets of its first and one past its last message, and the store
    time (ms) of the last one (0 when empty)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueConsumeStatus:
    """One queue as a consumer group sees it. ``consumer_offset`` is -1 when never committed."""

    queue: MessageQueue
    broker_offset: int
    consumer_offset: int
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages stored but not yet consumed by the group."""
        return max(0, self.broker_offset - max(self.consumer_offset, 0))


@dataclasses.dataclass(frozen=True, slots=True)
class GroupStatus:
    """A consumer group's progress over its queues."""

    group: str
    queues: list[QueueConsumeStatus]

    @property
    def total_lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """One live client of a consumer group."""

    client_id: str
    client_addr: str = ""
    language: str = ""
    version: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerConnectionInfo:
    """A consumer group's live clients and what it subscribes to (topic -> expression)."""

    group: str
    connections: tuple[ConsumerConnection, ...] = ()
    subscriptions: dict[str, str] = dataclasses.field(default_factory=dict)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""

    def merge(self, other: ConsumerConnectionInfo) -> ConsumerConnectionInfo:
        """Union of two brokers' views of the group."""
        seen = {c.client_id: c for c in (*self.connections, *other.connections)}
        return ConsumerConnectionInfo(
            self.group,
            tuple(sorted(seen.values(), key=lambda c: c.client_id)),
            {**self.subscriptions, **other.subscriptions},
            self.consume_type or other.consume_type,
            self.message_model or other.message_model,
            self.consume_from_where or other.consume_from_where,
        )


# -- parsing --------------------------------------------------------------------------------------
def _obj(body: bytes | memoryview | str, what: str) -> dict[str, Any]:
    data = loads_lenient(bytes(body) if isinstance(body, memoryview) else body)
    if not isinstance(data, dict):
        raise RemoteProtocolError(f"{what}: expected a JSON object")
    return data


def _int(entry: dict[str, Any], *names: str, default: int = 0) -> int:
    for name in names:
        value = entry.get(name)
        if value is not None:
            try:
                return int(value)
            except (TypeError, ValueError):
                raise RemoteProtocolError(f"{name}: expected an integer, got {value!r}") from None
    return default


def _queue(value: Any, what: str) -> MessageQueue:
    if isinstance(value, str):
        value = loads_lenient(value)
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"{what}: expected a message queue, got {value!r}")
    return MessageQueue.from_dict(value)


def _queue_entries(table: Any, what: str) -> Iterator[tuple[MessageQueue, dict[str, Any]]]:
    """(queue, fields) of a per-queue table in any of the shapes the module docstring lists."""
    if isinstance(table, dict):
        for key, entry in table.items():
            if not isinstance(entry, dict):
                raise RemoteProtocolError(f"{what}: entry of {key!r} is not an object")
            yield _queue(key, what), entry
    elif isinstance(table, list):
        for entry in table:
            if not isinstance(entry, dict):
                raise RemoteProtocolError(f"{what}: table entry is not an object")
            mq = next((entry[k] for k in ("messageQueue", "mq", "queue") if k in entry), entry)
            yield _queue(mq, what), entry
    elif table is not None:
        raise RemoteProtocolError(f"{what}: offsetTable is neither an object nor a list")


def parse_topic_stats(body: bytes | memoryview | str) -> list[TopicQueueStatus]:
    """GET_TOPIC_STATS_INFO's answer (TopicStatsTable)."""
    data = _obj(body, "topic stats")
    return [
        TopicQueueStatus(mq, _int(e, "minOffset"), _int(e, "maxOffset"),
                         _int(e, "lastUpdateTimestamp"))
        for mq, e in _queue_entries(data.get("offsetTable"), "topic stats")
    ]


def parse_consume_stats(body: bytes | memoryview | str) -> list[QueueConsumeStatus]:
    """GET_CONSUME_STATS's answer (ConsumeStats)."""
    data = _obj(body, "consume stats")
    return [
        QueueConsumeStatus(mq, _int(e, "brokerOffset"), _int(e, "consumerOffset", default=-1),
                           _int(e, "lastTimestamp"))
        for mq, e in _queue_entries(data.get("offsetTable"), "consume stats")
    ]


def parse_consumer_connection(group: str, body: bytes | memoryview | str) -> ConsumerConnectionInfo:
    """GET_CONSUMER_CONNECTION_LIST's answer (ConsumerConnection)."""
    data = _obj(body, "consumer connection")
    connections = []
    for c in data.get("connectionSet") or []:
        if isinstance(c, dict) and c.get("clientId"):
            connections.append(ConsumerConnection(str(c["clientId"]), str(c.get("clientAddr", "")),
                                                  str(c.get("language", "")),
                                                  _int(c, "version")))
    subscriptions: dict[str, str] = {}
    table = data.get("subscriptionTable") or {}
    if isinstance(table, dict):
        for topic, sub in table.items():
            expr = sub.get("subString", "*") if isinstance(sub, dict) else "*"
            subscriptions[str(topic)] = str(expr)
    return ConsumerConnectionInfo(
        group,
        tuple(sorted(connections, key=lambda c: c.client_id)),
        subscriptions,
        str(data.get("consumeType", "")),
        str(data.get("messageModel", "")),
        str(data.get("consumeFromWhere", "")),
    )


def parse_subscription_groups(body: bytes | memoryview | str) -> list[str]:
    """Group names of GET_ALL_SUBSCRIPTIONGROUP_CONFIG's answer (SubscriptionGroupWrapper)."""
    table = _obj(body, "subscription groups").get("subscriptionGroupTable") or {}
    return sorted(str(name) for name in table) if isinstance(table, dict) else []


def parse_offset_groups(body: bytes | memoryview | str) -> list[str]:
    """Group names of GET_ALL_CONSUMER_OFFSET's answer (``{"offsetTable": {"topic@group": ...}}``)."""
    table = _obj(body, "consumer offsets").get("offsetTable") or {}
    if not isinstance(table, dict):
        return []
    return sorted({str(key).partition("@")[2] for key in table if "@" in str(key)})
