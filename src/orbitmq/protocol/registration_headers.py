"""Headers of incremental registration: one topic registered with the name servers at
a time, and the periodic data version check before a whole table is sent.

REGISTER_TOPIC_IN_NAMESRV (217) and QUERY_DATA_VERSION (322) are RocketMQ's codes with RocketMQ's
field names; the fields RocketMQ lacks are optional, so that either side may be RocketMQ's.
"""

from __future__ import annotations

import dataclasses

from orbitmq.protocol._lenient import U64
from orbitmq.protocol.headers import Header

__all__ = [
    "RegisterTopicRequestHeader",
    "TopicRegistrationResponseHeader",
    "QueryDataVersionRequestHeader",
    "QueryDataVersionResponseHeader",
]


@dataclasses.dataclass(slots=True)
class RegisterTopicRequestHeader(Header):
    """REGISTER_TOPIC_IN_NAMESRV (217, RocketMQ 5's ``registerSingleTopicAll``): one topic's
    queues, body a TopicRouteData whose ``queueDatas`` name the brokers.

    RocketMQ sends ``topic`` alone. An OrbitMQ broker adds its identity (the queue data must
    then be its own) and, on the last request of a round of topic changes, the move of its
    data version from ``baseVersion*`` (what the name server holds from it) to ``version*``:
    a name server that holds the base takes the new version, so the next periodic
    QUERY_DATA_VERSION finds it current and no whole table is sent. A name server that missed
    a change holds another version and gets the whole table at the next round. RocketMQ's
    name server ignores the extra fields (and then gets the whole table, as RocketMQ brokers do).
    """

    topic: str
    cluster_name: str | None = None
    broker_name: str | None = None
    broker_addr: str | None = None
    broker_id: U64 | None = None
    base_version_timestamp: U64 | None = None
    base_version_counter: U64 | None = None
    version_timestamp: U64 | None = None
    version_counter: U64 | None = None


@dataclasses.dataclass(slots=True)
class TopicRegistrationResponseHeader(Header):
    """Answer of REGISTER_TOPIC_IN_NAMESRV / DELETE_TOPIC_IN_NAMESRV from an OrbitMQ name
    server: ``versionAccepted`` when the request carried a version move (false: the name
    server does not hold the base, the broker sends its whole table next)."""

    version_accepted: bool | None = None


@dataclasses.dataclass(slots=True)
class QueryDataVersionRequestHeader(Header):
    """QUERY_DATA_VERSION (322): body the broker's DataVersion (JSON)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: U64


@dataclasses.dataclass(slots=True)
class QueryDataVersionResponseHeader(Header):
    """``changed``: the name server holds another version (or none) for this broker address."""

    changed: bool
