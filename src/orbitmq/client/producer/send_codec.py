"""Pure parts of a send: a Message to a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request, and the
response back to a SendResult.

No I/O here, so compression, property encoding, batch layout and response parsing are unit-tested
without a broker.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import zlib
from collections.abc import Sequence

from orbitmq.client.instance import RETRIABLE_CODES
from orbitmq.client.results import SendResult, SendStatus
from orbitmq.client.validation import DEFAULT_TOPIC, body_size
from orbitmq.errors import ClientError, RemoteProtocolError, broker_error
from orbitmq.protocol.batch import ENTRY_OVERHEAD, encode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageResponseHeader
from orbitmq.protocol.message import KEY_SEPARATOR, Message, MessageSysFlag, PropertyKey
from orbitmq.protocol.properties import encode_properties

__all__ = [
    "BATCH_PROPERTIES",
    "COMPRESS_LEVEL",
    "EncodedMessage",
    "PreparedMessage",
    "encode_message",
    "encoded_size",
    "prepare_single",
    "prepare_message",
    "prepare_batch",
    "prepare_encoded_batch",
    "build_send_request",
    "parse_send_response",
    "split_batch_result",
]

COMPRESS_LEVEL = 5  # RocketMQ's default zlib level for bodies over compress_over
_PROPERTIES_LENGTH_MAX = 0x7FFF  # written as a signed short, in a batch entry and in the store
# A batch entry's head (total size, magic code 0, body CRC 0, flag, body length) and its
# properties' length: protocol.batch's layout, for bodies whose properties are already encoded.
_ENTRY_HEAD = struct.Struct(">iiiii")
_PROPERTIES_LENGTH = struct.Struct(">h")
BATCH_PROPERTIES = encode_properties({PropertyKey.WAIT: "true"}).decode()  # the request's own


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedMessage:
    """What goes on the wire for one send (a message or a whole batch).

    Attributes:
        topic: the target topic.
        body: the body as sent (compressed, or the batch encoding).
        properties: the wire properties (``k\\x01v\\x02...``).
        sys_flag: COMPRESSED when the body was deflated.
        flag: the user's flag (0 for a batch).
        msg_id: the UNIQ_KEY (comma-joined for a batch), reported in the SendResult.
        batch: whether this is a batch body.
    """

    topic: str
    body: bytes
    properties: str
    sys_flag: int
    flag: int
    msg_id: str
    batch: bool = False


def _wire_properties(msg: Message, uniq_key: str) -> dict[str, str]:
    props = msg.all_properties()
    props.setdefault(PropertyKey.UNIQ_KEY, uniq_key)
    props.setdefault(PropertyKey.WAIT, "true")  # Java's default waitStoreMsgOK
    return props


# One message ready for a SEND_MESSAGE_V2 or as a batch entry: (msg_id, flag, body, wire
# properties). A plain tuple: the auto-batching accumulator makes one per message.
EncodedMessage = tuple[str, int, bytes, bytes]


def encode_message(msg: Message, uniq_key: str) -> EncodedMessage:
    """The wire form of one validated message: UNIQ_KEY (kept if the caller set one, so a resend
    keeps its id) and WAIT added to its properties, the body as bytes (a copy when it was a
    bytearray or memoryview, so later changes by the caller do not reach the wire).

    Raises:
        ClientError: a property contains a separator character or is too long.
    """
    if msg.properties or msg.lite_topic:
        props = _wire_properties(msg, uniq_key)
        raw, msg_id = encode_properties(props), props[PropertyKey.UNIQ_KEY]
    else:
        raw, msg_id = _field_properties(msg, uniq_key), uniq_key
    if len(raw) > _PROPERTIES_LENGTH_MAX:
        raise ClientError(f"message properties of {len(raw)} bytes exceed 32767")
    return msg_id, msg.flag, bytes(msg.body), raw


def _field_properties(msg: Message, uniq_key: str) -> bytes:
    """``encode_properties(_wire_properties(msg, uniq_key))`` for a message without properties
    of its own (only TAGS, KEYS, DELAY and the priority from its fields), written in one go: this runs once
    per message, and the general path costs twice as much (the unit tests compare the two).

    Raises:
        ClientError: a tag, key or the UNIQ_KEY contains a separator character.
    """
    head = []
    if msg.tags:
        head.append(f"{PropertyKey.TAGS}\x01{msg.tags}\x02")
    keys = msg.keys
    if keys:
        joined = keys if isinstance(keys, str) else KEY_SEPARATOR.join(keys)
        head.append(f"{PropertyKey.KEYS}\x01{joined}\x02")
    if msg.delay_level > 0:
        head.append(f"{PropertyKey.DELAY}\x01{msg.delay_level}\x02")
    if msg.priority is not None:
        head.append(f"{PropertyKey.PRIORITY}\x01{msg.priority}\x02")
    text = f"{''.join(head)}{PropertyKey.UNIQ_KEY}\x01{uniq_key}\x02{PropertyKey.WAIT}\x01true\x02"
    pairs = len(head) + 2
    if text.count("\x01") != pairs or text.count("\x02") != pairs or "\x00" in text:
        raise ClientError("a tag, key or message id contains a NUL or a separator character")
    return text.encode()


def encoded_size(encoded: EncodedMessage) -> int:
    """The bytes ``encoded`` takes in a batch body."""
    return ENTRY_OVERHEAD + len(encoded[2]) + len(encoded[3])


def prepare_single(topic: str, encoded: EncodedMessage, compress_over: int) -> PreparedMessage:
    """One encoded message as a SEND_MESSAGE_V2 send: the body deflated when over
    ``compress_over`` bytes and smaller for it."""
    msg_id, flag, body, raw = encoded
    sys_flag = 0
    if len(body) > compress_over:
        packed = zlib.compress(body, COMPRESS_LEVEL)
        if len(packed) < len(body):
            body, sys_flag = packed, int(MessageSysFlag.COMPRESSED)
    return PreparedMessage(topic, body, raw.decode(), sys_flag, flag, msg_id)


def prepare_message(msg: Message, uniq_key: str, compress_over: int) -> PreparedMessage:
    """Encode one validated message (:func:`encode_message`) for a SEND_MESSAGE_V2 send
    (:func:`prepare_single`).

    Raises:
        ClientError: a property contains a separator character or is too long.
    """
    return prepare_single(msg.topic, encode_message(msg, uniq_key), compress_over)


def check_batch(messages: Sequence[Message], what: str = "a batch") -> str:
    """The topic of a batch of messages.

    Raises:
        ClientError: empty, several topics, a delayed message, or several priorities.
    """
    if not messages:
        raise ClientError("batch is empty")
    topic = messages[0].topic
    for msg in messages:
        if msg.topic != topic:
            raise ClientError(f"{what} holds one topic; got {topic!r} and {msg.topic!r}")
        if msg.delay_level > 0:
            raise ClientError(f"delayed messages cannot be sent in {what}")
        if msg.priority != messages[0].priority:
            raise ClientError(f"{what} goes to one queue: its messages must share one priority; "
                              f"got {messages[0].priority} and {msg.priority}")
    return topic


def prepare_batch(
    messages: Sequence[Message], uniq_keys: Sequence[str], max_message_size: int
) -> PreparedMessage:
    """Encode validated messages of one topic as one batch body (each with its own UNIQ_KEY),
    message by message: the reference the column encoder (``protocol.column_batch``, what
    ``send_batch`` uses) is tested equal to, and its fallback for messages it refuses.

    Batches are never compressed, like RocketMQ's, and may not hold delayed messages.

    Raises:
        ClientError: empty batch, several topics, a delayed message, or an encoding over
            ``max_message_size`` bytes.
    """
    topic = check_batch(messages)
    entries = []
    for msg, key in zip(messages, uniq_keys, strict=True):
        body_size(msg.body)
        entries.append((msg.flag, bytes(msg.body), _wire_properties(msg, key)))
    body = encode_batch(entries)
    if len(body) > max_message_size:
        raise ClientError(f"batch of {len(body)} bytes exceeds the maximum {max_message_size}")
    msg_id = ",".join(props[PropertyKey.UNIQ_KEY] for _, _, props in entries)
    return PreparedMessage(topic, body, BATCH_PROPERTIES, 0, 0, msg_id, batch=True)


def prepare_encoded_batch(topic: str, messages: Sequence[EncodedMessage]) -> PreparedMessage:
    """Encoded messages of ``topic`` (:func:`encode_message`) as one batch body, laid out as
    :func:`orbitmq.protocol.batch.encode_batch` does but without encoding the properties again.
    Never compressed; the caller keeps the size under the limits (:func:`encoded_size`).

    Raises:
        ClientError: empty, or a flag outside the signed 32-bit range.
    """
    if not messages:
        raise ClientError("batch is empty")
    parts: list[bytes] = []
    pack_head, pack_length = _ENTRY_HEAD.pack, _PROPERTIES_LENGTH.pack
    try:
        for _, flag, body, raw in messages:
            parts += (pack_head(ENTRY_OVERHEAD + len(body) + len(raw), 0, 0, flag, len(body)),
                      body, pack_length(len(raw)), raw)
    except struct.error as e:
        raise ClientError(f"batch message does not fit its 32-bit fields: {e}") from None
    msg_id = ",".join([m[0] for m in messages])
    return PreparedMessage(topic, b"".join(parts), BATCH_PROPERTIES, 0, 0, msg_id, batch=True)


def build_send_request(
    prepared: PreparedMessage,
    queue: MessageQueue,
    producer_group: str,
    default_topic_queue_nums: int,
    *,
    born_timestamp_ms: int | None = None,
) -> RemotingCommand:
    """SEND_MESSAGE_V2 (310) or SEND_BATCH_MESSAGE (320) with the short a..n header names.

    The fields are written directly rather than through SendMessageRequestHeader: this runs
    once per message and the generic header encoder costs several times more; the unit tests
    read the result back with ``SendMessageRequestHeader.from_v2_ext_fields``.
    """
    born = time.time_ns() // 1_000_000 if born_timestamp_ms is None else born_timestamp_ms
    fields = {
        "a": producer_group,
        "b": prepared.topic,
        "c": DEFAULT_TOPIC,
        "d": str(default_topic_queue_nums),
        "e": str(queue.queue_id),
        "f": str(prepared.sys_flag),
        "g": str(born),
        "h": str(prepared.flag),
        "i": prepared.properties,
        "j": "0",
        "k": "false",
        "m": "true" if prepared.batch else "false",
    }
    code = RequestCode.SEND_BATCH_MESSAGE if prepared.batch else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(int(code), ext_fields=fields, body=prepared.body)


def parse_send_response(
    resp: RemotingCommand, prepared: PreparedMessage, queue: MessageQueue
) -> SendResult:
    """The SendResult of a broker's answer.

    Raises:
        BrokerError: a failure code (``retriable`` when another broker may take the message).
        RemoteProtocolError: a success without the response header fields.
    """
    status = SendStatus.from_response_code(resp.code)
    if status is None:
        raise broker_error(resp.code, resp.remark, retriable=resp.code in RETRIABLE_CODES)
    try:
        header = SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
    except RemoteProtocolError as e:
        raise RemoteProtocolError(f"send response from {queue.broker_name}: {e}") from None
    return SendResult(
        status=status,
        msg_id=prepared.msg_id,
        offset_msg_id=header.msg_id,
        queue=MessageQueue(queue.topic, queue.broker_name, header.queue_id),
        queue_offset=header.queue_offset,
        transaction_id=header.transaction_id,
        master_epoch=header.master_epoch,
        recall_handle=header.recall_handle,
    )


def split_batch_result(result: SendResult, msg_ids: Sequence[str]) -> list[SendResult]:
    """One SendResult per message of a batch sent as one request: its own UNIQ_KEY, the i-th
    of the broker's comma-separated offset ids and the i-th queue offset from the first.

    A broker that answers fewer offset ids than messages (none does that we know of) leaves
    the missing ones empty rather than failing sends that were stored.
    """
    offset_ids = result.offset_msg_id.split(",")
    if len(offset_ids) < len(msg_ids):
        offset_ids += [""] * (len(msg_ids) - len(offset_ids))
    status, queue, first = result.status, result.queue, result.queue_offset
    return [SendResult(status, msg_id, offset_ids[i], queue, first + i,
                       master_epoch=result.master_epoch)
            for i, msg_id in enumerate(msg_ids)]
