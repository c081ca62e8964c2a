"""Transactions by the batch (OrbitMQ), the pure parts: SEND_TRANSACTION_BATCH built from messages,
its answer read back, and a broker's CHECK_TRANSACTION_BATCH_STATE read into a TransactionBatch.

A batch of messages of one topic is stored by the broker as one half message and committed or
rolled back with one END_TRANSACTION_BATCH (``transaction_end``), checked back as a unit
(docs/transactions.md). No I/O here: the producer (``transaction_producer``) sends and receives.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from orbitmq.client.instance import RETRIABLE_CODES
from orbitmq.client.producer.column_send import message_columns
from orbitmq.client.producer.send_codec import (
    EncodedMessage,
    check_batch,
    encode_message,
    encoded_size,
    prepare_encoded_batch,
)
from orbitmq.client.producer.transaction_state import (
    LocalTransactionState,
    TransactionBatch,
    TransactionSendResult,
)
from orbitmq.client.results import SendStatus
from orbitmq.client.validation import check_message
from orbitmq.errors import ClientError, RemoteProtocolError, broker_error
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import OrbitMQRequestCode
from orbitmq.protocol.column_batch import IdBlock, MessageColumns, encode_columns
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import (
    TRAN_BATCH,
    TX_BATCH_MESSAGES_MAX,
    CheckTransactionBatchStateRequestHeader,
    SendTransactionBatchRequestHeader,
    SendTransactionBatchResponseHeader,
)
from orbitmq.protocol.message import RESERVED_PROPERTIES, Message, PropertyKey
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.properties import encode_properties
from orbitmq.protocol.stored import decode_stored_message

__all__ = [
    "PreparedBatch",
    "prepare_transaction_batch",
    "prepare_transaction_columns",
    "prepare_messages_half",
    "encode_batch_messages",
    "build_send_batch_request",
    "parse_send_batch_response",
    "read_batch_check",
]

# Properties of a batch's half message that are the broker's or the protocol's, not the batch's
# own: left out of TransactionBatch.properties.
_SYSTEM = RESERVED_PROPERTIES | {
    TRAN_BATCH, PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET,
    PropertyKey.TRANSACTION_CHECK_TIMES, PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS,
}


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedBatch:
    """A transaction batch ready for the wire.

    Attributes:
        topic: the batch's topic.
        body: the batch body (``protocol.batch``), each message with its UNIQ_KEY.
        properties: the batch's own properties as wire text, its id as UNIQ_KEY.
        transaction_id: the batch's id.
        msg_ids: the UNIQ_KEY of each message.
    """

    topic: str
    body: bytes
    properties: str
    transaction_id: str
    msg_ids: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.msg_ids)


def prepare_transaction_batch(topic: str, encoded: Sequence[EncodedMessage], transaction_id: str,
                              properties: Mapping[str, str], max_message_size: int) -> PreparedBatch:
    """Encoded messages (``send_codec.encode_message``, each with its UNIQ_KEY) of ``topic`` as
    one transaction batch named ``transaction_id``, with the batch's own ``properties``.

    Raises:
        ClientError: empty, too many messages, over ``max_message_size`` bytes, or a property
            name that is the system's.
    """
    if not encoded:
        raise ClientError("a transaction batch holds at least one message")
    if len(encoded) > TX_BATCH_MESSAGES_MAX:
        raise ClientError(f"a transaction batch holds at most {TX_BATCH_MESSAGES_MAX} messages, "
                          f"got {len(encoded)}")
    own = _batch_properties(properties, transaction_id)
    size = sum(encoded_size(m) for m in encoded)
    if size > max_message_size:
        raise ClientError(f"transaction batch of {size} bytes exceeds the maximum "
                          f"{max_message_size}: send fewer messages per batch")
    return PreparedBatch(topic, prepare_encoded_batch(topic, encoded).body, own, transaction_id,
                         tuple(m[0] for m in encoded))


def _batch_properties(properties: Mapping[str, str], transaction_id: str) -> str:
    """The wire text of a batch's own properties, its id as UNIQ_KEY.

    Raises:
        ClientError: a name that is the system's.
    """
    reserved = sorted(name for name in properties if name in _SYSTEM
                      and name != PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS)
    if reserved:
        raise ClientError(f"property name {reserved[0]!r} is reserved by the system")
    return encode_properties({**properties, PropertyKey.UNIQ_KEY: transaction_id}).decode()


def prepare_transaction_columns(topic: str, columns: MessageColumns, start: int,
                                ids: IdBlock | Sequence[str], transaction_id: str,
                                properties: Mapping[str, str], rows_max: int, bytes_max: int,
                                max_message_size: int) -> tuple[PreparedBatch, int]:
    """The rows of ``columns`` from ``start`` that fit ``rows_max`` rows and ``bytes_max``
    bytes as one transaction batch (the column encoder, ``protocol.column_batch``); and how
    many rows it holds.

    Raises:
        ClientError: a bad row (named), a reserved batch property name, limits out of range.
    """
    own = _batch_properties(properties, transaction_id)
    encoded = encode_columns(columns, ids, start=start, rows_max=rows_max, bytes_max=bytes_max,
                             message_size_max=max_message_size)
    return PreparedBatch(topic, encoded.body, own, transaction_id,
                         tuple(encoded.msg_ids.split(","))), encoded.rows


def prepare_messages_half(messages: Sequence[Message], ids: UniqIdGenerator,
                          properties: Mapping[str, str], max_message_size: int
                          ) -> PreparedBatch | None:
    """Messages of one topic as one transaction batch through the column encoder, or None when
    one holds a property name the system reserves (:func:`encode_batch_messages` then).

    Raises:
        ClientError: invalid, several topics, a delayed message, or over ``max_message_size``.
    """
    for msg in messages:
        check_message(msg, max_message_size)
    topic, count = check_batch(messages, "a transaction batch"), len(messages)
    columns = message_columns(messages)
    if columns is None:
        return None
    prepared, rows = prepare_transaction_columns(
        topic, columns, 0, IdBlock(*ids.next_block(count)), ids.next(), properties, count,
        max_message_size, max_message_size)
    if rows < count:
        raise ClientError(f"transaction batch of {count} messages exceeds the maximum "
                          f"{max_message_size} bytes (the first {rows} fit): send fewer messages "
                          "per batch")
    return prepared


def encode_batch_messages(messages: Sequence[Message], ids: Sequence[str],
                          max_message_size: int) -> tuple[str, list[EncodedMessage]]:
    """(topic, encoded messages) of validated messages of one topic, each with its id.

    Raises:
        ClientError: invalid, several topics or a delayed message.
    """
    if not messages:
        raise ClientError("a transaction batch holds at least one message")
    topic = messages[0].topic
    out = []
    for msg, msg_id in zip(messages, ids, strict=True):
        check_message(msg, max_message_size)
        if msg.topic != topic:
            raise ClientError(f"a transaction batch holds one topic; got {topic!r} and {msg.topic!r}")
        if msg.delay_level > 0:
            raise ClientError("a transaction batch cannot hold delayed messages")
        if msg.priority is not None:
            raise ClientError("a transaction batch cannot hold priority messages")
        out.append(encode_message(msg, msg_id))
    return topic, out


def build_send_batch_request(prepared: PreparedBatch, queue: MessageQueue, group: str, *,
                             born_timestamp_ms: int | None = None,
                             default_topic_queue_nums: int | None = None) -> RemotingCommand:
    """SEND_TRANSACTION_BATCH of ``prepared`` to ``queue``; ``default_topic_queue_nums``: the
    queues a broker that auto-creates topics gives the topic when it does not exist yet."""
    born = time.time_ns() // 1_000_000 if born_timestamp_ms is None else born_timestamp_ms
    header = SendTransactionBatchRequestHeader(
        producer_group=group, topic=prepared.topic, queue_id=queue.queue_id, born_timestamp=born,
        count=prepared.count, properties=prepared.properties,
        default_topic_queue_nums=default_topic_queue_nums)
    return RemotingCommand.request(OrbitMQRequestCode.SEND_TRANSACTION_BATCH,
                                   header.to_ext_fields(), body=prepared.body)


def parse_send_batch_response(resp: RemotingCommand, prepared: PreparedBatch,
                              queue: MessageQueue) -> TransactionSendResult:
    """The receipt of a stored batch (local state UNKNOWN: nothing is decided yet).

    Raises:
        BrokerError: a failure code (``retriable`` when another broker may take the batch).
        RemoteProtocolError: a success without the response header fields.
    """
    status = SendStatus.from_response_code(resp.code)
    if status is None:
        raise broker_error(resp.code, resp.remark, retriable=resp.code in RETRIABLE_CODES)
    try:
        header = SendTransactionBatchResponseHeader.from_ext_fields(resp.ext_fields)
    except RemoteProtocolError as e:
        raise RemoteProtocolError(f"transaction batch answer from {queue.broker_name}: {e}") from None
    return TransactionSendResult(
        local_state=LocalTransactionState.UNKNOWN, transaction_id=prepared.transaction_id,
        msg_id=prepared.transaction_id, offset_msg_id=header.msg_id,
        queue=MessageQueue(queue.topic, queue.broker_name, header.queue_id),
        queue_offset=header.queue_offset, status=status, batch_size=prepared.count)


def read_batch_check(cmd: RemotingCommand) -> tuple[CheckTransactionBatchStateRequestHeader,
                                                    TransactionBatch, str | None]:
    """A broker's CHECK_TRANSACTION_BATCH_STATE: its header, the batch it asks about, and the
    producer group the batch belongs to.

    Raises:
        RemoteProtocolError: a malformed header, half message or batch body.
    """
    header = CheckTransactionBatchStateRequestHeader.from_ext_fields(cmd.ext_fields)
    half = decode_stored_message(cmd.body, check_crc=False)
    messages = tuple(Message.with_system_properties(half.topic, body, properties=props, flag=flag)
                     for flag, body, props in decode_batch(half.body))
    own = {k: v for k, v in half.properties.items()
           if k not in _SYSTEM and k not in (PropertyKey.REAL_TOPIC, PropertyKey.REAL_QID)}
    batch = TransactionBatch(header.transaction_id, half.topic, messages, own, header.check_times)
    return header, batch, half.properties.get(PropertyKey.PGROUP)

