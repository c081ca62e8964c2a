"""RocketMQ 5 messages to and from the broker's: every wire value range-checked here.

A 5.x message keeps its id as UNIQ_KEY, its tag and keys as TAGS and KEYS, its message group as
``__SHARDINGKEY``, its delivery time as ``TIMER_DELIVER_MS`` (the broker's timer), its priority
(0..9, RocketMQ 5.4's priority messages) as ``__PRIORITY`` and its user properties as they are; a 4.x consumer reads it like any message. The other way, a stored message
becomes a 5.x message with its properties split into system fields and user properties, its
body inflated and its CRC32 digest computed for the client to check.
"""

from __future__ import annotations

import ipaddress
import re
import zlib

from google.protobuf import duration_pb2, timestamp_pb2

from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc.codes import ApiError, Code
from orbitmq.protocol.lite import LITE_TOPIC_PROPERTY, lite_name_problem, split_lite_queue_topic
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX
from orbitmq.protocol.topic_attributes import (
    PRIORITY_MAX,
    PRIORITY_PROPERTY,
    SHARDING_KEY,
    TopicMessageType,
    priority_of,
)

__all__ = ["resource_name", "duration_ms", "timestamp_ms", "to_timestamp", "to_duration",
           "Outgoing", "incoming_properties", "to_wire_message", "message_type_of_wire",
           "NAME_MAX", "MESSAGE_ID_MAX", "MESSAGE_GROUP_MAX", "GRPC_PRODUCER_GROUP_PREFIX"]

NAME_MAX = 255  # characters of a topic or group name (RocketMQ's limits: 127 topics, 255 groups)
MESSAGE_ID_MAX = 128
MESSAGE_GROUP_MAX = 64  # RocketMQ 5's limit
TAG_MAX = 128
KEY_MAX = 128
KEYS_MAX = 32
TRACE_CONTEXT_MAX = 4096  # characters of a trace_context (W3C traceparent and tracestate fit)
GRPC_PRODUCER_GROUP_PREFIX = "%GRPC%"  # PGROUP of a 5.x half message: 5.x producers have none
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_COMPRESSED = int(MessageSysFlag.COMPRESSED)
_DURATION_MAX_S = 10 * 365 * 86_400
_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# A 5.x message's trace_context (OpenTelemetry), stored as RocketMQ 5's proxy stores it
_TRACE_CONTEXT = PropertyKey.TRACE_CONTEXT

# Properties the broker and the protocols keep for themselves: not user properties of a 5.x
# message, and refused as user property names (ILLEGAL_MESSAGE_PROPERTY_KEY).
SYSTEM_PROPERTIES = frozenset({
    PropertyKey.KEYS, PropertyKey.TAGS, PropertyKey.WAIT, PropertyKey.DELAY, PropertyKey.RETRY_TOPIC,
    PropertyKey.REAL_TOPIC, PropertyKey.REAL_QID, PropertyKey.TRAN_MSG, PropertyKey.PGROUP,
    PropertyKey.MIN_OFFSET, PropertyKey.MAX_OFFSET, PropertyKey.ORIGIN_MESSAGE_ID,
    PropertyKey.RECONSUME_TIME, PropertyKey.UNIQ_KEY, PropertyKey.MAX_RECONSUME_TIMES,
    PropertyKey.CONSUME_START_TIME, PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET,
    PropertyKey.TRANSACTION_CHECK_TIMES, PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS, SHARDING_KEY,
    PRIORITY_PROPERTY, _TIMER_DELIVER_MS, "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS",
    _TRACE_CONTEXT, LITE_TOPIC_PROPERTY,
})


def resource_name(res: pb.Resource, what: str, code: int) -> str:
    """A topic or group name from the wire; ApiError(code) when empty, too long or malformed."""
    name = res.name
    if not name or len(name) > NAME_MAX or not _NAME.match(name):
        raise ApiError(code, f"{what} {name[:NAME_MAX]!r} is empty, longer than {NAME_MAX} "
                             f"characters or not of {_NAME.pattern}")
    return name


def duration_ms(d: duration_pb2.Duration, what: str, code: int) -> int:
    if not 0 <= d.seconds <= _DURATION_MAX_S or not 0 <= d.nanos < 1_000_000_000:
        raise ApiError(code, f"{what} {d.seconds} s {d.nanos} ns is out of range")
    return d.seconds * 1000 + d.nanos // 1_000_000


def timestamp_ms(t: timestamp_pb2.Timestamp, what: str, code: int) -> int:
    if not 0 <= t.seconds <= 253_402_300_799 or not 0 <= t.nanos < 1_000_000_000:
        raise ApiError(code, f"{what} {t.seconds} s {t.nanos} ns is not a valid time")
    return t.seconds * 1000 + t.nanos // 1_000_000


def to_timestamp(ms: int) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def to_duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def message_type_of_wire(sp: pb.SystemProperties) -> TopicMessageType:
    """What a 5.x message is, from the type the client declared (checked against its fields:
    a message group is FIFO's, a delivery time DELAY's and a priority PRIORITY's alone)."""
    declared = sp.message_type
    has_group, has_time = sp.HasField("message_group"), sp.HasField("delivery_timestamp")
    has_priority = sp.HasField("priority")
    kinds = {pb.NORMAL: TopicMessageType.NORMAL, pb.FIFO: TopicMessageType.FIFO,
             pb.DELAY: TopicMessageType.DELAY, pb.TRANSACTION: TopicMessageType.TRANSACTION,
             pb.PRIORITY: TopicMessageType.PRIORITY, pb.LITE: TopicMessageType.LITE}
    has_lite = sp.HasField("lite_topic")
    if has_lite != (declared == pb.LITE) and declared != pb.MESSAGE_TYPE_UNSPECIFIED:
        raise ApiError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                       f"message type {pb.MessageType.Name(declared)} does not match its lite "
                       f"topic ({has_lite})")
    if has_lite and (has_group or has_time or has_priority):
        raise ApiError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                       "a lite message has no message group, delivery time or priority")
    if has_lite:
        kind = TopicMessageType.LITE
    elif declared == pb.MESSAGE_TYPE_UNSPECIFIED:
        kind = (TopicMessageType.FIFO if has_group else
                TopicMessageType.DELAY if has_time else
                TopicMessageType.PRIORITY if has_priority else TopicMessageType.NORMAL)
    elif declared in kinds:
        kind = kinds[declared]
    else:
        raise ApiError(Code.UNSUPPORTED, f"message type {pb.MessageType.Name(declared)} is not "
                                         "supported by OrbitMQ")
    if (kind is TopicMessageType.FIFO) != has_group or (kind is TopicMessageType.DELAY) != has_time \
            or (kind is TopicMessageType.PRIORITY) != has_priority \
            or (kind is TopicMessageType.TRANSACTION and (has_group or has_time)):
        raise ApiError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                       f"message type {kind.value} does not match its fields (message group: "
                       f"{has_group}, delivery time: {has_time}, priority: {has_priority})")
    return kind


class Outgoing:
    """A 5.x message checked and turned into the broker's body and properties."""

    __slots__ = ("topic", "body", "properties", "kind", "born_ms", "born_host", "message_id",
                 "message_group", "priority")

    def __init__(self, msg: pb.Message, body_max: int, peer_ip: str) -> None:
        self.topic = resource_name(msg.topic, "topic", Code.ILLEGAL_TOPIC)
        sp = msg.system_properties
        self.kind = message_type_of_wire(sp)
        self.body = _body(msg.body, sp.body_encoding, body_max)
        self.message_id = sp.message_id
        if not self.message_id or len(self.message_id) > MESSAGE_ID_MAX or not self.message_id.isalnum():
            raise ApiError(Code.ILLEGAL_MESSAGE_ID, f"message id {self.message_id[:MESSAGE_ID_MAX]!r} "
                                                    f"is empty, longer than {MESSAGE_ID_MAX} or not alphanumeric")
        self.properties = incoming_properties(msg)
        self.message_group = self.properties.get(SHARDING_KEY)
        self.priority = sp.priority if sp.HasField("priority") else None  # checked: 0..9
        self.born_ms = (timestamp_ms(sp.born_timestamp, "born time", Code.BAD_REQUEST)
                        if sp.HasField("born_timestamp") else 0)
        self.born_host = _ipv4_or(sp.born_host, peer_ip)


def incoming_properties(msg: pb.Message) -> dict[str, str]:
    """The stored properties of a 5.x message (module docstring); ApiError for a bad value."""
    sp = msg.system_properties
    props: dict[str, str] = {}
    for name, value in msg.user_properties.items():
        if name in SYSTEM_PROPERTIES or not name or _bad_text(name) or _bad_text(value):
            raise ApiError(Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                           f"user property {name[:64]!r} is reserved, empty or holds a control character")
        props[name] = value
    if sp.HasField("tag"):
        if not sp.tag or len(sp.tag) > TAG_MAX or "|" in sp.tag or _bad_text(sp.tag) or sp.tag.isspace():
            raise ApiError(Code.ILLEGAL_MESSAGE_TAG, f"tag {sp.tag[:TAG_MAX]!r} is blank, too long "
                                                     "or holds '|'")
        props[PropertyKey.TAGS] = sp.tag
    if sp.keys:
        if len(sp.keys) > KEYS_MAX or any(not k or len(k) > KEY_MAX or _bad_text(k) or " " in k
                                          for k in sp.keys):
            raise ApiError(Code.ILLEGAL_MESSAGE_KEY, f"keys must be at most {KEYS_MAX}, each "
                                                      f"1..{KEY_MAX} characters without spaces")
        props[PropertyKey.KEYS] = " ".join(sp.keys)
    if sp.HasField("message_group"):
        group = sp.message_group
        if not group or len(group) > MESSAGE_GROUP_MAX or _bad_text(group):
            raise ApiError(Code.ILLEGAL_MESSAGE_GROUP, f"message group must be 1..{MESSAGE_GROUP_MAX} "
                                                        "characters")
        props[SHARDING_KEY] = group
    if sp.HasField("priority"):
        if not 0 <= sp.priority <= PRIORITY_MAX:
            raise ApiError(Code.BAD_REQUEST, f"priority {sp.priority} is out of range "
                                             f"0..{PRIORITY_MAX} (higher first)")
        props[PRIORITY_PROPERTY] = str(sp.priority)
    if sp.HasField("lite_topic"):
        problem = lite_name_problem(sp.lite_topic)
        if problem is not None:
            raise ApiError(Code.ILLEGAL_LITE_TOPIC, problem)
        props[LITE_TOPIC_PROPERTY] = sp.lite_topic
    if sp.HasField("delivery_timestamp"):
        due = timestamp_ms(sp.delivery_timestamp, "delivery time", Code.ILLEGAL_DELIVERY_TIME)
        props[_TIMER_DELIVER_MS] = str(due)
    if sp.HasField("orphaned_transaction_recovery_duration"):
        ms = duration_ms(sp.orphaned_transaction_recovery_duration, "transaction recovery time",
                         Code.BAD_REQUEST)
        props[PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(max(ms // 1000, 1))
    if sp.HasField("trace_context") and sp.trace_context:
        context = sp.trace_context
        if len(context) > TRACE_CONTEXT_MAX or _bad_text(context) or not context.isprintable():
            raise ApiError(Code.BAD_REQUEST, f"trace context is longer than {TRACE_CONTEXT_MAX} "
                                             "characters or holds a control character")
        props[_TRACE_CONTEXT] = context
    props[PropertyKey.UNIQ_KEY] = sp.message_id
    size = sum(len(k) + len(v) + 2 for k, v in props.items())
    if size >= PROPERTIES_SIZE_MAX:
        raise ApiError(Code.MESSAGE_PROPERTIES_TOO_LARGE,
                       f"message properties of {size} bytes reach the limit {PROPERTIES_SIZE_MAX}")
    return props


def _bad_text(text: str) -> bool:
    return "\x01" in text or "\x02" in text or "\x00" in text


def _body(raw: bytes, encoding: int, body_max: int) -> bytes:
    if encoding == pb.GZIP:
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            body = d.decompress(raw, body_max + 1)
        except zlib.error:
            raise ApiError(Code.MESSAGE_CORRUPTED, "the gzip body does not inflate") from None
    elif encoding in (pb.IDENTITY, pb.ENCODING_UNSPECIFIED):
        body = raw
    else:
        raise ApiError(Code.BAD_REQUEST, f"body encoding {encoding} is unknown")
    if not body:
        raise ApiError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(body) > body_max:
        raise ApiError(Code.MESSAGE_BODY_TOO_LARGE, f"the message body exceeds {body_max} bytes")
    return body


def _ipv4_or(host: str, fallback: str) -> str:
    candidate = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    try:
        return str(ipaddress.IPv4Address(candidate))
    except ValueError:
        return fallback


_WIRE_TYPES = {TopicMessageType.NORMAL: pb.NORMAL, TopicMessageType.FIFO: pb.FIFO,
               TopicMessageType.DELAY: pb.DELAY, TopicMessageType.TRANSACTION: pb.TRANSACTION,
               TopicMessageType.PRIORITY: pb.PRIORITY}


def to_wire_message(msg: MessageExt, *, body_max: int, handle: str | None = None,
                    attempt: int | None = None, invisible_ms: int | None = None) -> pb.Message:
    """A stored message as a 5.x client reads it (a 4.x sender's too)."""
    props = msg.properties
    body = bytes(msg.body)
    if msg.sys_flag & _COMPRESSED:
        try:
            body = zlib.decompressobj().decompress(body, body_max + 1)
        except zlib.error:
            body = bytes(msg.body)  # not ours to judge: the client sees the digest mismatch
    sp = pb.SystemProperties(
        message_id=msg.uniq_key or msg.offset_msg_id,
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(body) & 0xFFFFFFFF:08X}"),
        body_encoding=pb.IDENTITY,
        born_host=msg.born_host[0],
        store_host=f"{msg.store_host[0]}:{msg.store_host[1]}",
        queue_id=msg.queue_id,
        queue_offset=msg.queue_offset,
    )
    if props.get(PropertyKey.TAGS):
        sp.tag = props[PropertyKey.TAGS]
    if msg.keys:
        sp.keys.extend(msg.keys)
    if props.get(SHARDING_KEY):
        sp.message_group = props[SHARDING_KEY]
    if props.get(_TRACE_CONTEXT):
        sp.trace_context = props[_TRACE_CONTEXT]
    sp.born_timestamp.CopyFrom(to_timestamp(max(msg.born_timestamp, 0)))
    sp.store_timestamp.CopyFrom(to_timestamp(max(msg.store_timestamp, 0)))
    due = props.get(_TIMER_DELIVER_MS, "")
    if due.isdigit() and len(due) <= 18:
        sp.delivery_timestamp.CopyFrom(to_timestamp(int(due)))
    if PRIORITY_PROPERTY in props:
        sp.priority = priority_of(props)
    sp.message_type = _WIRE_TYPES.get(_stored_type(props), pb.NORMAL)
    if handle is not None:
        sp.receipt_handle = handle
    if attempt is not None:
        sp.delivery_attempt = attempt
    if invisible_ms is not None:
        sp.invisible_duration.CopyFrom(to_duration(max(invisible_ms, 0)))
    topic = msg.topic
    lite = props.get(LITE_TOPIC_PROPERTY)
    split = split_lite_queue_topic(topic) if lite else None
    if split is not None:  # a lite topic's message: its parent and its lite topic (protocol/lite.py)
        topic = split[0]
        sp.lite_topic = split[1]
        sp.message_type = pb.LITE
    out = pb.Message(topic=pb.Resource(name=topic), system_properties=sp, body=body)
    for name, value in props.items():
        if name not in SYSTEM_PROPERTIES:
            out.user_properties[name] = value
    return out


def _stored_type(props: dict[str, str]) -> TopicMessageType:
    if props.get(PropertyKey.TRAN_MSG) == "true":
        return TopicMessageType.TRANSACTION
    if _TIMER_DELIVER_MS in props:
        return TopicMessageType.DELAY
    if props.get(SHARDING_KEY):
        return TopicMessageType.FIFO
    if PRIORITY_PROPERTY in props:
        return TopicMessageType.PRIORITY
    return TopicMessageType.NORMAL
