"""RocketMQ 4.x message trace records, as clients write them to the trace topic (sans I/O).

A trace message's body is a run of records, each ended by FIELD_SPLITOR (char 2), its fields
separated by CONTENT_SPLITOR (char 1), in the order RocketMQ's ``TraceDataEncoder`` writes them:

==============  ====================================================================================
Pub             type, timestamp, regionId, producer group, topic, msgId, tags, keys, storeHost,
                bodyLength, costTime, msgType ordinal, offsetMsgId, success
                (a 15th field, clientHost, is read when present: older writers put it there)
SubBefore       type, timestamp, regionId, consumer group, requestId, msgId, retryTimes, keys
SubAfter        type, requestId, msgId, costTime, success, keys, contextCode, timestamp,
                consumer group (the last two are absent from records written for the cloud
                access channel)
EndTransaction  type, timestamp, regionId, producer group, topic, msgId, tags, keys, storeHost,
                msgType ordinal, transactionId, transactionState, fromTransactionCheck
Recall          type, timestamp, regionId, producer group, topic, msgId, success
==============  ====================================================================================

Java writes a missing tag, key or transaction id as the text ``null`` (string concatenation of a
null reference); :class:`TraceRecord` holds it as None and writes it back the same way, so a
record read from a RocketMQ client encodes to the same bytes. Java's ``String.split`` drops
trailing empty fields; the decoder here reads those as empty instead of failing, and refuses a
record of a known type that lacks a field it needs (:class:`TraceDecodeError`). Records of a
type it does not know are passed over, as RocketMQ's decoder passes them over.

The trace message's keys are the traced messages' ids and keys (:func:`trace_keys`), so that the
broker's index finds a message's trace by its id (RocketMQ's ``queryMsgTraceById``).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from orbitmq.errors import ClientError, RemoteProtocolError

__all__ = [
    "CONTENT_SPLITOR",
    "FIELD_SPLITOR",
    "DEFAULT_REGION_ID",
    "TRACE_PRODUCER_GROUP_PREFIX",
    "TraceType",
    "TraceMessageType",
    "ConsumeReturnType",
    "TraceRecord",
    "TraceDecodeError",
    "encode_record",
    "encode_records",
    "decode_trace_data",
    "trace_keys",
]

CONTENT_SPLITOR = "\x01"  # between the fields of one record (TraceConstants.CONTENT_SPLITOR)
FIELD_SPLITOR = "\x02"  # after each record (TraceConstants.FIELD_SPLITOR)
DEFAULT_REGION_ID = "DefaultRegion"  # MixAll.DEFAULT_TRACE_REGION_ID
TRACE_PRODUCER_GROUP_PREFIX = "_INNER_TRACE_PRODUCER"  # TraceConstants.GROUP_NAME_PREFIX
_NULL = "null"  # how Java writes a null String
_KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
_INT32 = range(-0x80000000, 0x80000000)
_INT64 = range(-0x8000000000000000, 0x8000000000000000)


class TraceType(enum.StrEnum):
    """RocketMQ's TraceType: the record's first field."""

    PUB = "Pub"
    RECALL = "Recall"
    SUB_BEFORE = "SubBefore"
    SUB_AFTER = "SubAfter"
    END_TRANSACTION = "EndTransaction"


class TraceMessageType(enum.IntEnum):
    """RocketMQ's MessageType, written by its ordinal."""

    NORMAL = 0  # Normal_Msg
    TRANS_HALF = 1  # Trans_Msg_Half
    TRANS_COMMIT = 2  # Trans_msg_Commit
    DELAY = 3  # Delay_Msg
    ORDER = 4  # Order_Msg


class ConsumeReturnType(enum.IntEnum):
    """RocketMQ's ConsumeReturnType: a SubAfter record's contextCode is its ordinal."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


class TraceDecodeError(RemoteProtocolError):
    """A trace record that is not in RocketMQ's format (the remark says which field)."""


@dataclasses.dataclass(slots=True)
class TraceRecord:
    """One record of a trace (RocketMQ's TraceContext with its one TraceBean).

    Which fields a type carries is in the module docstring; the others keep their defaults.
    ``group`` is the producer group (Pub, EndTransaction, Recall) or the consumer group
    (SubBefore, SubAfter). ``request_id`` ties a SubAfter to its SubBefore. Times are epoch
    milliseconds; ``cost_time_ms`` is the send's round trip (Pub) or the listener's time per
    message (SubAfter).
    """

    type: TraceType
    timestamp_ms: int = 0
    region_id: str = ""
    group: str = ""
    topic: str = ""
    msg_id: str = ""
    tags: str | None = None
    keys: str | None = None
    store_host: str = ""
    body_length: int = 0
    cost_time_ms: int = 0
    msg_type: int = int(TraceMessageType.NORMAL)
    offset_msg_id: str = ""
    success: bool = True
    client_host: str = ""
    request_id: str = ""
    retry_times: int = 0
    context_code: int = int(ConsumeReturnType.SUCCESS)
    transaction_id: str | None = None
    transaction_state: str = ""
    from_transaction_check: bool = False

    @property
    def key_list(self) -> list[str]:
        """The traced message's keys, split."""
        return [k for k in (self.keys or "").split(_KEY_SEPARATOR) if k]


# -- encoding ---------------------------------------------------------------------------------


def _text(value: str | None, name: str) -> str:
    if value is None:
        return _NULL
    if CONTENT_SPLITOR in value or FIELD_SPLITOR in value:
        raise ClientError(f"trace field {name} holds a separator character (1 or 2)")
    return value


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_record(r: TraceRecord) -> str:
    """One record as RocketMQ's TraceDataEncoder writes it, FIELD_SPLITOR included.

    Raises:
        ClientError: a text field holds a separator character.
    """
    t = r.type
    if t is TraceType.PUB:
        fields = [t.value, str(r.timestamp_ms), _text(r.region_id, "regionId"),
                  _text(r.group, "groupName"), _text(r.topic, "topic"), _text(r.msg_id, "msgId"),
                  _text(r.tags, "tags"), _text(r.keys, "keys"), _text(r.store_host, "storeHost"),
                  str(r.body_length), str(r.cost_time_ms), str(int(r.msg_type)),
                  _text(r.offset_msg_id, "offsetMsgId"), _bool(r.success)]
    elif t is TraceType.SUB_BEFORE:
        fields = [t.value, str(r.timestamp_ms), _text(r.region_id, "regionId"),
                  _text(r.group, "groupName"), _text(r.request_id, "requestId"),
                  _text(r.msg_id, "msgId"), str(r.retry_times), _text(r.keys, "keys")]
    elif t is TraceType.SUB_AFTER:
        fields = [t.value, _text(r.request_id, "requestId"), _text(r.msg_id, "msgId"),
                  str(r.cost_time_ms), _bool(r.success), _text(r.keys, "keys"),
                  str(int(r.context_code)), str(r.timestamp_ms), _text(r.group, "groupName")]
    elif t is TraceType.END_TRANSACTION:
        fields = [t.value, str(r.timestamp_ms), _text(r.region_id, "regionId"),
                  _text(r.group, "groupName"), _text(r.topic, "topic"), _text(r.msg_id, "msgId"),
                  _text(r.tags, "tags"), _text(r.keys, "keys"), _text(r.store_host, "storeHost"),
                  str(int(r.msg_type)), _text(r.transaction_id, "transactionId"),
                  _text(r.transaction_state, "transactionState"),
                  _bool(r.from_transaction_check)]
    else:
        fields = [t.value, str(r.timestamp_ms), _text(r.region_id, "regionId"),
                  _text(r.group, "groupName"), _text(r.topic, "topic"), _text(r.msg_id, "msgId"),
                  _bool(r.success)]
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def encode_records(records: Iterable[TraceRecord]) -> str:
    """Records back to back: the body of one trace message (UTF-8 encode it to send)."""
    return "".join(encode_record(r) for r in records)


def trace_keys(records: Iterable[TraceRecord]) -> list[str]:
    """The keys of the trace message that carries ``records``: each traced message's id and its
    own keys (TraceDataEncoder's transKey set), each once, in first-seen order."""
    seen: dict[str, None] = {}
    for r in records:
        if r.msg_id:
            seen.setdefault(r.msg_id, None)
        for key in r.key_list:
            seen.setdefault(key, None)
    return list(seen)


# -- decoding ---------------------------------------------------------------------------------

# The fewest fields a record of each type needs (trailing empty fields may be missing).
_FIELDS_MIN = {TraceType.PUB: 12, TraceType.SUB_BEFORE: 7, TraceType.SUB_AFTER: 5,
               TraceType.END_TRANSACTION: 12, TraceType.RECALL: 6}
_FIELDS_PADDED = {TraceType.PUB: 15, TraceType.SUB_BEFORE: 8, TraceType.SUB_AFTER: 9,
                  TraceType.END_TRANSACTION: 13, TraceType.RECALL: 7}
_TYPES = {t.value: t for t in TraceType}


def _int(text: str, name: str, bounds: range = _INT32) -> int:
    if not text or len(text) > 20 or not text.lstrip("-").isdigit():
        raise TraceDecodeError(f"trace field {name} is not a number: {text[:32]!r}")
    value = int(text)
    if value not in bounds:
        raise TraceDecodeError(f"trace field {name} {value} is out of range")
    return value


def _parse_bool(text: str) -> bool:
    return text.lower() == "true"  # Boolean.parseBoolean: anything else is false


def _nullable(text: str) -> str | None:
    return None if text == _NULL else text


def _msg_type(text: str) -> int:
    value = _int(text, "msgType")
    if not 0 <= value <= max(TraceMessageType):
        raise TraceDecodeError(f"trace field msgType {value} is not a MessageType ordinal (0..4)")
    return value


def _decode_one(parts: list[str], t: TraceType) -> TraceRecord:
    if len(parts) < _FIELDS_MIN[t]:
        raise TraceDecodeError(f"a {t.value} record has {len(parts)} fields, fewer than "
                               f"{_FIELDS_MIN[t]}")
    n = len(parts)
    parts = parts + [""] * (_FIELDS_PADDED[t] - n)
    if t is TraceType.PUB:
        return TraceRecord(
            t, timestamp_ms=_int(parts[1], "timestamp", _INT64), region_id=parts[2],
            group=parts[3], topic=parts[4], msg_id=parts[5], tags=_nullable(parts[6]),
            keys=_nullable(parts[7]), store_host=parts[8], body_length=_int(parts[9], "bodyLength"),
            cost_time_ms=_int(parts[10], "costTime"), msg_type=_msg_type(parts[11]),
            # 13 fields: the success flag follows msgType (the oldest writers had no offsetMsgId)
            offset_msg_id=parts[12] if n >= 14 else "",
            success=_parse_bool(parts[13]) if n >= 14 else _parse_bool(parts[12]) if n == 13
            else True,
            client_host=parts[14] if n >= 15 else "")
    if t is TraceType.SUB_BEFORE:
        return TraceRecord(
            t, timestamp_ms=_int(parts[1], "timestamp", _INT64), region_id=parts[2],
            group=parts[3], request_id=parts[4], msg_id=parts[5],
            retry_times=_int(parts[6], "retryTimes"), keys=_nullable(parts[7]))
    if t is TraceType.SUB_AFTER:
        return TraceRecord(
            t, request_id=parts[1], msg_id=parts[2], cost_time_ms=_int(parts[3], "costTime"),
            success=_parse_bool(parts[4]), keys=_nullable(parts[5]),
            context_code=_int(parts[6], "contextCode") if parts[6] else 0,
            timestamp_ms=_int(parts[7], "timestamp", _INT64) if parts[7] else 0, group=parts[8])
    if t is TraceType.END_TRANSACTION:
        return TraceRecord(
            t, timestamp_ms=_int(parts[1], "timestamp", _INT64), region_id=parts[2],
            group=parts[3], topic=parts[4], msg_id=parts[5], tags=_nullable(parts[6]),
            keys=_nullable(parts[7]), store_host=parts[8], msg_type=_msg_type(parts[9]),
            transaction_id=_nullable(parts[10]), transaction_state=parts[11],
            from_transaction_check=_parse_bool(parts[12]))
    return TraceRecord(
        t, timestamp_ms=_int(parts[1], "timestamp", _INT64), region_id=parts[2], group=parts[3],
        topic=parts[4], msg_id=parts[5], success=_parse_bool(parts[6]))


def decode_trace_data(data: str | bytes, *, errors: list[str] | None = None) -> list[TraceRecord]:
    """The records of a trace message's body (RocketMQ's ``decoderFromTraceDataString``).

    Args:
        data: the body, as text or UTF-8 bytes.
        errors: when given, a malformed record is passed over and the reason appended here;
            when None, it raises.

    Raises:
        TraceDecodeError: a record of a known type is malformed (and ``errors`` is None), or
            the bytes are not UTF-8.
    """
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceDecodeError(f"trace data is not UTF-8 text (byte {e.start})") from None
    out: list[TraceRecord] = []
    for chunk in data.split(FIELD_SPLITOR):
        if not chunk:
            continue
        parts = chunk.split(CONTENT_SPLITOR)
        t = _TYPES.get(parts[0])
        if t is None:
            continue  # a type this reader does not know (as RocketMQ's decoder does)
        try:
            out.append(_decode_one(parts, t))
        except TraceDecodeError as e:
            if errors is None:
                raise
            errors.append(str(e))
    return out
