"""Which topics and consumer groups belong to the brokers and tools rather than to applications,
so that ``orbitmq topic list``, ``orbitmq group list`` and the console can leave them out unless
asked (``--all``): a user's topics are otherwise lost among retry, dead letter and system ones.

The names are RocketMQ's (a broker of either kind registers them); nothing here is sent anywhere.
"""

from __future__ import annotations

from collections.abc import Collection

from orbitmq.client.admin.dead_letters import RESEND_GROUP_PREFIX
from orbitmq.protocol import topics
from orbitmq.protocol.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_GROUP_PREFIX,
    SYSTEM_TOPIC_PREFIXES,
    TOOLS_CONSUMER_GROUP,
)

__all__ = [
    "SYSTEM_TOPICS",
    "SYSTEM_GROUPS",
    "topic_kind",
    "is_system_topic",
    "is_system_group",
]

SYSTEM_TOPICS = frozenset({
    topics.DEFAULT_TOPIC, topics.SCHEDULE_TOPIC, topics.TRANS_HALF_TOPIC,
    topics.TRANS_OP_HALF_TOPIC, topics.BENCHMARK_TOPIC, topics.OFFSET_MOVED_EVENT,
    topics.SELF_TEST_TOPIC, topics.TRANS_CHECK_MAX_TIME_TOPIC,
})
# RocketMQ's own groups: admin reads, the transaction check's progress, self tests and the
# groups its ecosystem reserves; and the marks of OrbitMQ's dead letter resends.
SYSTEM_GROUPS = frozenset({
    TOOLS_CONSUMER_GROUP, "CID_SYS_RMQ_TRANS", "SELF_TEST_C_GROUP", "FILTERSRV_CONSUMER",
    "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_PULL", "CID_ONS-HTTP-PROXY",
    "DEFAULT_CONSUMER",
})
_SYSTEM_GROUP_PREFIXES = (SYSTEM_GROUP_PREFIX, RESEND_GROUP_PREFIX.upper())


def topic_kind(topic: str, reserved: Collection[str] = ()) -> str:
    """``normal``, ``retry``, ``dead letters`` or ``system``. ``reserved``: the cluster's and
    brokers' names, which brokers register as topics."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dead letters"
    if topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIXES) or topic in reserved:
        return "system"
    return "normal"


def is_system_topic(topic: str, reserved: Collection[str] = ()) -> bool:
    """A topic no application sends to: system, retry or dead letters."""
    return topic_kind(topic, reserved) != "normal"


def is_system_group(group: str) -> bool:
    """A group the brokers or OrbitMQ's tools consume with, not an application."""
    return group in SYSTEM_GROUPS or group.upper().startswith(_SYSTEM_GROUP_PREFIXES)
