"""What the operations admin calls return, and the parsing of the brokers' answers.

Each parser reads the JSON body a RocketMQ broker (or OrbitMQ's) sends for that request, by
RocketMQ's field names; a body of the wrong shape raises RemoteProtocolError naming the field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orbitmq.client.admin.models import QueueConsumeStatus, _int, _obj, _queue, _queue_entries
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.bodies import MessageQueue

__all__ = [
    "ClusterBroker",
    "Connection",
    "StatsItem",
    "BrokerStatsData",
    "GroupTopicStats",
    "BrokerConsumeStats",
    "QueueTimeSpan",
    "ConsumeQueueEntry",
    "ConsumeQueueView",
    "parse_kv_table",
    "parse_broker_stats",
    "parse_broker_consume_stats",
    "parse_connections",
    "parse_group_list",
    "parse_time_spans",
    "parse_consume_queue",
    "first_rate",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterBroker:
    """One broker address of a cluster, as the name servers list it (id 0: the master)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str


@dataclasses.dataclass(frozen=True, slots=True)
class Connection:
    """One client connection of a group (Java's Connection)."""

    client_id: str
    client_addr: str = ""
    language: str = ""
    version: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class StatsItem:
    """A counter over a window (Java's BrokerStatsItem): its growth, rate per second and
    average per request."""

    sum: int
    tps: float
    avgpt: float


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerStatsData:
    """VIEW_BROKER_STATS_DATA's answer: one counter over the last minute, hour and day."""

    minute: StatsItem
    hour: StatsItem
    day: StatsItem

    def last_24h_sum(self) -> int:
        """RocketMQ's ``statsAll`` figure: the day's sum, else the hour's, else the minute's."""
        return self.day.sum or self.hour.sum or self.minute.sum


@dataclasses.dataclass(frozen=True, slots=True)
class GroupTopicStats:
    """One group on one topic (Java's ConsumeStats): its queues and consume rate."""

    group: str
    topic: str
    consume_tps: float
    queues: tuple[QueueConsumeStatus, ...]

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerConsumeStats:
    """GET_BROKER_CONSUME_STATS's answer (Java's ConsumeStatsList)."""

    broker_addr: str
    total_diff: int
    total_inflight_diff: int
    stats: tuple[GroupTopicStats, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueTimeSpan:
    """QUERY_CONSUME_TIME_SPAN's entry: store times (ms) of a queue's oldest, newest and last
    consumed message, and how long the next unconsumed one has waited (ms, 0: none)."""

    queue: MessageQueue
    min_timestamp: int
    max_timestamp: int
    consume_timestamp: int
    delay_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeQueueEntry:
    """One consume queue entry: where the message lies in the commit log, its size and the
    hash code of its tag."""

    index: int
    physic_offset: int
    physic_size: int
    tags_code: int


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeQueueView:
    """QUERY_CONSUME_QUEUE's answer for one queue."""

    queue: MessageQueue
    min_index: int
    max_index: int
    entries: tuple[ConsumeQueueEntry, ...]
    subscription: dict[str, Any] | None = None
    filter_data: str | None = None
    remark: str | None = None


def first_rate(text: str | None) -> float:
    """The first of a runtime-info rate triple (``"12.50 10.00 8.30"``: last 10 s); 0 when
    absent or empty."""
    head = (text or "").split()
    try:
        return float(head[0]) if head else 0.0
    except ValueError:
        return 0.0


def parse_kv_table(body: bytes | memoryview | str) -> dict[str, str]:
    """Java's KVTable (``{"table": {name: text}}``: GET_BROKER_RUNTIME_INFO's answer)."""
    table = _obj(body, "runtime info").get("table")
    if not isinstance(table, dict):
        raise RemoteProtocolError("runtime info: no table object")
    return {str(k): str(v) for k, v in table.items()}


def _item(data: dict[str, Any], name: str) -> StatsItem:
    entry = data.get(name) or {}
    if not isinstance(entry, dict):
        raise RemoteProtocolError(f"broker stats: {name} is not an object")
    try:
        return StatsItem(_int(entry, "sum"), float(entry.get("tps", 0.0)),
                         float(entry.get("avgpt", 0.0)))
    except (TypeError, ValueError):
        raise RemoteProtocolError(f"broker stats: {name} holds a value that is not a number") \
            from None


def parse_broker_stats(body: bytes | memoryview | str) -> BrokerStatsData:
    """Java's BrokerStatsData (``statsMinute``, ``statsHour``, ``statsDay``)."""
    data = _obj(body, "broker stats")
    return BrokerStatsData(_item(data, "statsMinute"), _item(data, "statsHour"),
                           _item(data, "statsDay"))


def _consume_stats(group: str, entry: Any) -> GroupTopicStats:
    if not isinstance(entry, dict):
        raise RemoteProtocolError("consume stats: entry is not an object")
    queues = tuple(sorted((QueueConsumeStatus(mq, _int(e, "brokerOffset"),
                                              _int(e, "consumerOffset", default=-1),
                                              _int(e, "lastTimestamp"))
                           for mq, e in _queue_entries(entry.get("offsetTable"), "consume stats")),
                          key=lambda q: q.queue))
    topic = queues[0].queue.topic if queues else ""
    return GroupTopicStats(group, topic, float(entry.get("consumeTps") or 0.0), queues)


def parse_broker_consume_stats(body: bytes | memoryview | str) -> BrokerConsumeStats:
    """Java's ConsumeStatsList (``consumeStatsList``: ``[{group: [ConsumeStats]}]``)."""
    data = _obj(body, "broker consume stats")
    stats: list[GroupTopicStats] = []
    for mapping in data.get("consumeStatsList") or []:
        if not isinstance(mapping, dict):
            raise RemoteProtocolError("broker consume stats: list entry is not an object")
        for group, entries in mapping.items():
            stats.extend(_consume_stats(str(group), e) for e in entries or [])
    return BrokerConsumeStats(str(data.get("brokerAddr") or ""), _int(data, "totalDiff"),
                              _int(data, "totalInflightDiff"), tuple(stats))


def parse_connections(body: bytes | memoryview | str) -> list[Connection]:
    """The ``connectionSet`` of Java's ProducerConnection (or ConsumerConnection)."""
    out = []
    for c in _obj(body, "connections").get("connectionSet") or []:
        if isinstance(c, dict) and c.get("clientId"):
            out.append(Connection(str(c["clientId"]), str(c.get("clientAddr", "")),
                                  str(c.get("language", "")), _int(c, "version")))
    return sorted(out, key=lambda c: (c.client_id, c.client_addr))


def parse_group_list(body: bytes | memoryview | str) -> list[str]:
    """Java's GroupList (``{"groupList": [...]}``)."""
    groups = _obj(body, "group list").get("groupList") or []
    return sorted(str(g) for g in groups)


def parse_time_spans(body: bytes | memoryview | str) -> list[QueueTimeSpan]:
    """Java's QueryConsumeTimeSpanBody (``consumeTimeSpanSet``)."""
    out = []
    for e in _obj(body, "time spans").get("consumeTimeSpanSet") or []:
        if not isinstance(e, dict):
            raise RemoteProtocolError("time spans: entry is not an object")
        out.append(QueueTimeSpan(_queue(e.get("messageQueue"), "time spans"),
                                 _int(e, "minTimeStamp"), _int(e, "maxTimeStamp"),
                                 _int(e, "consumeTimeStamp"), _int(e, "delayTime")))
    return sorted(out, key=lambda s: s.queue)


def parse_consume_queue(queue: MessageQueue, index: int, body: bytes | memoryview | str,
                        remark: str | None = None) -> ConsumeQueueView:
    """Java's QueryConsumeQueueResponseBody; entries numbered from ``index`` (or the queue's
    first index when ``index`` is below it)."""
    data = _obj(body, "consume queue")
    low = _int(data, "minQueueIndex")
    start = max(index, low)
    entries = []
    for i, e in enumerate(data.get("queueData") or []):
        if not isinstance(e, dict):
            raise RemoteProtocolError("consume queue: entry is not an object")
        entries.append(ConsumeQueueEntry(start + i, _int(e, "physicOffset"),
                                         _int(e, "physicSize"), _int(e, "tagsCode")))
    sub = data.get("subscriptionData")
    return ConsumeQueueView(queue, low, _int(data, "maxQueueIndex"), tuple(entries),
                            sub if isinstance(sub, dict) else None,
                            str(data["filterData"]) if data.get("filterData") else None, remark)
