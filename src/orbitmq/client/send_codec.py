"""Pure parts of a send: a Message to a SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request, and the
response back to a SendResult.

No I/O here, so compression, property encoding, batch layout and response parsing are unit-tested
without a broker.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Sequence

from orbitmq.client.instance import RETRIABLE_CODES
from orbitmq.client.results import SendResult, SendStatus
from orbitmq.client.validation import DEFAULT_TOPIC, body_size
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageResponseHeader
from orbitmq.protocol.message import Message, MessageSysFlag, PropertyKey, encode_properties

__all__ = [
    "COMPRESS_LEVEL",
    "PreparedMessage",
    "prepare_message",
    "prepare_batch",
    "build_send_request",
    "parse_send_response",
]

COMPRESS_LEVEL = 5  # RocketMQ's default zlib level for bodies over compress_over


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


def prepare_message(msg: Message, uniq_key: str, compress_over: int) -> PreparedMessage:
    """Encode one validated message: UNIQ_KEY (kept if the caller set one, so a resend keeps its
    id) and WAIT added, body deflated when over ``compress_over`` bytes and smaller for it.

    Raises:
        ClientError: a property contains a separator character or is too long.
    """
    props = _wire_properties(msg, uniq_key)
    raw = encode_properties(props)
    if len(raw) > 0x7FFF:
        raise ClientError(f"message properties of {len(raw)} bytes exceed 32767")
    body = bytes(msg.body)
    sys_flag = 0
    if len(body) > compress_over:
        packed = zlib.compress(body, COMPRESS_LEVEL)
        if len(packed) < len(body):
            body, sys_flag = packed, int(MessageSysFlag.COMPRESSED)
    return PreparedMessage(msg.topic, body, raw.decode(), sys_flag, msg.flag,
                           props[PropertyKey.UNIQ_KEY])


def prepare_batch(
    messages: Sequence[Message], uniq_keys: Sequence[str], max_message_size: int
) -> PreparedMessage:
    """Encode validated messages of one topic as one batch body (each with its own UNIQ_KEY).

    Batches are never compressed, like RocketMQ's, and may not hold delayed messages.

    Raises:
        ClientError: empty batch, several topics, a delayed message, or an encoding over
            ``max_message_size`` bytes.
    """
    if not messages:
        raise ClientError("batch is empty")
    topic = messages[0].topic
    entries = []
    for msg, key in zip(messages, uniq_keys, strict=True):
        if msg.topic != topic:
            raise ClientError(f"a batch holds one topic; got {topic!r} and {msg.topic!r}")
        if msg.delay_level > 0:
            raise ClientError("delayed messages cannot be sent in a batch")
        body_size(msg.body)
        entries.append((msg.flag, bytes(msg.body), _wire_properties(msg, key)))
    body = encode_batch(entries)
    if len(body) > max_message_size:
        raise ClientError(f"batch of {len(body)} bytes exceeds the maximum {max_message_size}")
    outer = encode_properties({PropertyKey.WAIT: "true"}).decode()
    msg_id = ",".join(props[PropertyKey.UNIQ_KEY] for _, _, props in entries)
    return PreparedMessage(topic, body, outer, 0, 0, msg_id, batch=True)


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
        raise BrokerError(resp.code, resp.remark, retriable=resp.code in RETRIABLE_CODES)
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
    )
