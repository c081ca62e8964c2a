"""Headers of the admin requests RocketMQ's dashboard, exporter and mqadmin send.

Kept apart from :mod:`orbitmq.protocol.headers` (the client data path) and built with the same
mechanism: the wire name is the camelCase field name, the type says how a value is parsed and
which values it may take, a field without a default is required. Field names are those of
RocketMQ's header classes of the same name.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated

from orbitmq.protocol._lenient import I32_MAX, U32, U64, int_range
from orbitmq.protocol.headers import Header

__all__ = [
    "GetProducerConnectionListRequestHeader",
    "ViewBrokerStatsDataRequestHeader",
    "GetConsumeStatsInBrokerHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "CloneGroupOffsetRequestHeader",
    "QueryConsumeQueueRequestHeader",
    "GetBrokerConfigResponseHeader",
    "QUERY_CONSUME_QUEUE_COUNT_MAX",
]

QUERY_CONSUME_QUEUE_COUNT_MAX = 10_000  # entries one QUERY_CONSUME_QUEUE answer may list
EntryCount = Annotated[int, int_range(1, I32_MAX, "a positive int32")]


@dataclasses.dataclass(slots=True)
class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str


@dataclasses.dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(Header):
    """VIEW_BROKER_STATS_DATA (315): ``statsName`` is one of RocketMQ's stats item names
    (TOPIC_PUT_NUMS...), ``statsKey`` its key (a topic, ``topic@group`` or the cluster)."""

    stats_name: str
    stats_key: str


@dataclasses.dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(Header):
    """GET_BROKER_CONSUME_STATS (317): ``isOrder`` keeps orderly topics only."""

    is_order: bool


@dataclasses.dataclass(slots=True)
class QueryConsumeTimeSpanRequestHeader(Header):
    """QUERY_CONSUME_TIME_SPAN (303)."""

    topic: str
    group: str


@dataclasses.dataclass(slots=True)
class CloneGroupOffsetRequestHeader(Header):
    """CLONE_GROUP_OFFSET (314): copy ``srcGroup``'s committed offsets to ``destGroup`` (every
    topic of the source group, or ``topic``); ``offline`` also copies topics the source group no
    longer subscribes to."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False


@dataclasses.dataclass(slots=True)
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321): ``count`` entries of one consume queue from ``index``."""

    topic: str
    queue_id: U32
    index: U64
    count: EntryCount
    consumer_group: str | None = None


@dataclasses.dataclass(slots=True)
class GetBrokerConfigResponseHeader(Header):
    """Answer of GET_BROKER_CONFIG (26): ``version`` is the config's DataVersion as JSON."""

    version: str
