"""The SDK's message types and the names RocketMQ gives to message fields.

``Message`` (what a producer sends), ``MessageExt`` (every field of a stored message, decoded),
``PropertyKey`` (property names), ``MessageSysFlag`` (the bits of SYSFLAG) and the hashes that
travel with messages. The stored format itself (the bytes of the CommitLog and of a pull
response) lives in ``orbitmq.protocol.stored``, the properties text and its rule in
``orbitmq.protocol.properties``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
from collections.abc import Mapping
from typing import Any

from orbitmq.errors import ClientError
from orbitmq.protocol.java_hash import java_string_hash
from orbitmq.protocol.lite import LITE_TOPIC_PROPERTY, lite_name_problem
from orbitmq.protocol.topic_attributes import PRIORITY_MAX, PRIORITY_PROPERTY

__all__ = [
    "MessageSysFlag",
    "PropertyKey",
    "KEY_SEPARATOR",
    "HOST_V6_BITS",
    "TRANSACTION_TYPE_MASK",
    "Message",
    "MessageExt",
    "offset_msg_id",
    "java_string_hash",
    "tags_hash",
    "transaction_type",
    "takes_queue_entry",
    "check_priority",
]


class MessageSysFlag(enum.IntFlag):
    """Bits of SYSFLAG. The transaction type is the two bits under ``TRANSACTION_ROLLBACK_TYPE``."""

    TRANSACTION_NOT_TYPE = 0
    COMPRESSED = 1
    MULTI_TAGS = 2
    TRANSACTION_PREPARED_TYPE = 4
    TRANSACTION_COMMIT_TYPE = 8
    TRANSACTION_ROLLBACK_TYPE = 12
    BORNHOST_V6 = 16
    STOREHOST_V6 = 32


# Plain ints: IntFlag arithmetic costs microseconds per operation on hot paths.
TRANSACTION_TYPE_MASK = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)  # both transaction bits
HOST_V6_BITS = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)
_NO_QUEUE_ENTRY_TYPES = (int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
                         int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))


def transaction_type(sys_flag: int) -> int:
    """The transaction type of a sysFlag: 0 (none), 4 (prepared), 8 (commit) or 12 (rollback)."""
    return sys_flag & TRANSACTION_TYPE_MASK


def takes_queue_entry(sys_flag: int) -> bool:
    """Whether a stored message gets a queue offset and a ConsumeQueue entry: every message but
    prepared (half) and rolled-back transaction messages."""
    return sys_flag & TRANSACTION_TYPE_MASK not in _NO_QUEUE_ENTRY_TYPES


class PropertyKey:
    """Names of the message properties RocketMQ gives a meaning to."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    TRACE_CONTEXT = "TRACE_CONTEXT"  # a RocketMQ 5 message's OpenTelemetry trace context
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    TRANSACTION_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    INSTANCE_ID = "INSTANCE_ID"
    CLUSTER = "CLUSTER"
    SHARDING_KEY = "__SHARDINGKEY"
    PRIORITY = PRIORITY_PROPERTY  # a priority message's priority (topic_attributes)


KEY_SEPARATOR = " "  # KEYS holds several keys separated by spaces

# Names the system gives a meaning to (RocketMQ 4.x's MessageConst.STRING_HASH_SET): a producer's
# own properties may not use them, as RocketMQ's Message.putUserProperty refuses them. Setting
# UNIQ_KEY, say, would silently replace the message id.
RESERVED_PROPERTIES = frozenset({
    PropertyKey.TRACE_ON, PropertyKey.MSG_REGION, PropertyKey.KEYS, PropertyKey.TAGS,
    PropertyKey.WAIT, PropertyKey.DELAY, PropertyKey.RETRY_TOPIC, PropertyKey.REAL_TOPIC,
    PropertyKey.REAL_QID, PropertyKey.TRAN_MSG, PropertyKey.PGROUP, PropertyKey.MIN_OFFSET,
    PropertyKey.MAX_OFFSET, PropertyKey.BUYER_ID, PropertyKey.ORIGIN_MESSAGE_ID,
    PropertyKey.TRANSFER_FLAG, PropertyKey.CORRECTION_FLAG, PropertyKey.MQ2_FLAG,
    PropertyKey.RECONSUME_TIME, PropertyKey.UNIQ_KEY, PropertyKey.MAX_RECONSUME_TIMES,
    PropertyKey.CONSUME_START_TIME, PropertyKey.PRIORITY,
})
_RESERVED_HINTS = {
    PropertyKey.TAGS: "give tags=...", PropertyKey.KEYS: "give keys=...",
    PropertyKey.DELAY: "give delay_level=...", PropertyKey.PRIORITY: "give priority=...",
}


# -- hashes -----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def tags_hash(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value (0 without tags); cached, tags repeat a lot."""
    return java_string_hash(tags) if tags else 0


# -- SDK message ------------------------------------------------------------------------------


@dataclasses.dataclass
class Message:
    """A message as a producer builds it (the SDK's type).

    ``properties`` are the application's own: a name RESERVED_PROPERTIES holds is refused with a
    ClientError (tags, keys, the delay level and the priority have fields of their own).

    ``priority`` (0..9, higher first; None: not a priority message) is for topics of
    ``message.type`` PRIORITY: the broker stores the message in queue ``min(priority, queues - 1)``
    and consumers take the higher queues first when a backlog exists. It cannot be combined with
    a delay level (as RocketMQ 5's clients refuse it). ``lite_topic``: the lite topic of a
    message to a LITE parent topic (RocketMQ 5.5; created by its first message).
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: str | list[str] | None = None
    flag: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    delay_level: int = 0
    priority: int | None = None
    lite_topic: str | None = None

    def __post_init__(self) -> None:
        check_priority(self.priority, self.delay_level)
        if self.lite_topic is not None and self.priority is not None:
            raise ClientError("a lite message has no priority (a lite topic is one ordered queue)")
        if self.lite_topic is not None:
            problem = lite_name_problem(self.lite_topic)
            if problem is not None:
                raise ClientError(problem)
        reserved = sorted(name for name in self.properties if name in RESERVED_PROPERTIES)
        if reserved:
            name = reserved[0]
            hint = _RESERVED_HINTS.get(name, "use another name")
            raise ClientError(f"property name {name!r} is reserved by the system; {hint} "
                              f"(reserved: {', '.join(sorted(RESERVED_PROPERTIES))})")

    @classmethod
    def with_system_properties(cls, topic: str, body: bytes, *,
                               properties: Mapping[str, str], **fields: Any) -> Message:
        """A message whose properties may hold reserved names, for the SDK's own use: sending a
        stored message again as it was (a dead letter keeps its UNIQ_KEY, hence its id), or a
        half message's TRAN_MSG and PGROUP. Applications use the constructor."""
        msg = cls(topic, body, **fields)
        msg.properties = dict(properties)
        return msg

    def all_properties(self) -> dict[str, str]:
        """The properties sent on the wire: user ones plus TAGS, KEYS and DELAY."""
        props = dict(self.properties)
        if self.tags:
            props[PropertyKey.TAGS] = self.tags
        if self.keys:
            keys = [self.keys] if isinstance(self.keys, str) else self.keys
            props[PropertyKey.KEYS] = KEY_SEPARATOR.join(keys)
        if self.delay_level > 0:
            props[PropertyKey.DELAY] = str(self.delay_level)
        if self.priority is not None:
            props[PropertyKey.PRIORITY] = str(self.priority)
        if self.lite_topic:
            props[LITE_TOPIC_PROPERTY] = self.lite_topic
        return props


def check_priority(priority: object, delay_level: int = 0) -> None:
    """Refuse a priority a broker would refuse (ClientError naming it): an integer
    0..PRIORITY_MAX or None, and not with a delay level."""
    if priority is None:
        return
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= PRIORITY_MAX:
        raise ClientError(f"priority must be an integer 0..{PRIORITY_MAX} (higher first), got {priority!r}")
    if delay_level:
        raise ClientError("a message cannot have both a priority and a delay level")


@dataclasses.dataclass
class MessageExt:
    """Every field of a stored message, decoded."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    commit_log_offset: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    body_crc: int = 0
    store_size: int = 0
    msg_id: str = ""
    offset_msg_id: str = ""

    @property
    def tags(self) -> str | None:
        """The TAGS property."""
        return self.properties.get(PropertyKey.TAGS)

    @property
    def keys(self) -> list[str]:
        """The KEYS property split into its keys."""
        return [k for k in self.properties.get(PropertyKey.KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def priority(self) -> int | None:
        """A priority message's priority (0..9, higher first); None for other messages."""
        raw = self.properties.get(PropertyKey.PRIORITY)
        if raw is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 3:
            return None
        return int(raw)

    @property
    def uniq_key(self) -> str | None:
        """The producer-assigned unique id (UNIQ_KEY), if any."""
        return self.properties.get(PropertyKey.UNIQ_KEY)


def offset_msg_id(store_ip: bytes, store_port: int, commit_log_offset: int) -> str:
    """RocketMQ's offset message id: hex upper of store ip + port i32 + commit log offset i64."""
    return (store_ip + struct.pack(">iq", store_port, commit_log_offset)).hex().upper()

