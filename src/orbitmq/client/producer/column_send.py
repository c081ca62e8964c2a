"""Sending rows given as columns: the SDK's bulk path (no Message object per row).

A bulk writer hands the producer a :class:`~orbitmq.protocol.column_batch.MessageColumns`; it is
cut into SEND_BATCH_MESSAGE requests (or transaction batches) by the column encoder
(``protocol.column_batch``, in C when built) and sent several at a time. The per-Message batch
sends (``send_batch``, ``send_batch_half``) go through the same encoder: :func:`message_columns`
turns their messages into columns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from orbitmq.client.producer.send_codec import BATCH_PROPERTIES, PreparedMessage
from orbitmq.client.validation import NOT_ALLOWED_SEND_TOPICS, check_topic
from orbitmq.errors import ClientError
from orbitmq.protocol.column_batch import (
    ID_BLOCK_ROWS_MAX,
    IdBlock,
    MessageColumns,
    encode_columns,
)
from orbitmq.protocol.message import KEY_SEPARATOR, RESERVED_PROPERTIES, Message

__all__ = ["message_columns", "check_send_topic", "prepare_columns", "check_chunk_limits",
           "send_in_chunks"]

P = TypeVar("P")
R = TypeVar("R")


def check_send_topic(topic: object) -> str:
    """``topic`` if a producer may send to it (``check_message``'s topic rules).

    Raises:
        ClientError: an illegal name or a system topic.
    """
    check_topic(topic)
    assert isinstance(topic, str)
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise ClientError(f"topic {topic!r} is a system topic; messages cannot be sent to it")
    return topic


def message_columns(messages: Sequence[Message]) -> MessageColumns | None:
    """The columns of validated messages (of one topic, without delay), or None when one holds
    a property name the system reserves (``Message.with_system_properties``: a resend keeping
    its UNIQ_KEY, say), which the column encoder refuses and the per-Message encoder places
    where the caller put it; or keys that join into "" (``keys=[""]`` sends an empty KEYS
    property, a column's "" sends none); or when there are more than an id block's rows."""
    if len(messages) > ID_BLOCK_ROWS_MAX:
        return None
    if any(m.properties and not RESERVED_PROPERTIES.isdisjoint(m.properties) for m in messages):
        return None
    if any(m.priority is not None for m in messages):
        return None  # a priority is a property the columns do not carry
    keys = [None if not m.keys else m.keys if isinstance(m.keys, str)
            else KEY_SEPARATOR.join(m.keys) for m in messages]
    if any(k == "" for k in keys):
        return None
    return MessageColumns(
        bodies=[m.body for m in messages],
        keys=keys,
        tags=[m.tags for m in messages],
        properties=[m.properties or None for m in messages],
        flags=[m.flag for m in messages],
    )


def prepare_columns(topic: str, columns: MessageColumns, start: int, ids: IdBlock | Sequence[str],
                    rows_max: int, bytes_max: int, message_size_max: int
                    ) -> tuple[PreparedMessage, int]:
    """A SEND_BATCH_MESSAGE of the rows from ``start`` that fit; and how many rows it holds.

    Raises:
        ClientError: a bad row (named), or limits out of range.
    """
    encoded = encode_columns(columns, ids, start=start, rows_max=rows_max, bytes_max=bytes_max,
                             message_size_max=message_size_max)
    prepared = PreparedMessage(topic, encoded.body, BATCH_PROPERTIES, 0, 0, encoded.msg_ids,
                               batch=True)
    return prepared, encoded.rows


def check_chunk_limits(batch_rows_max: int, batch_bytes_max: int, in_flight_max: int) -> None:
    """Raises ClientError naming the first cutting limit out of range."""
    if not 1 <= batch_rows_max <= ID_BLOCK_ROWS_MAX:
        raise ClientError(f"batch_rows_max must be 1..{ID_BLOCK_ROWS_MAX}, got {batch_rows_max}")
    if batch_bytes_max < 1:
        raise ClientError(f"batch_bytes_max must be >= 1, got {batch_bytes_max}")
    if in_flight_max < 1:
        raise ClientError(f"in_flight_max must be >= 1, got {in_flight_max}")


async def send_in_chunks(rows: int, encode: Callable[[int], tuple[P, int]],
                         send: Callable[[P], Awaitable[R]], in_flight_max: int) -> list[R]:
    """Encode the rows chunk by chunk (``encode(start)`` -> (request, rows taken)) and send each,
    at most ``in_flight_max`` at a time; the answers in row order.

    After a failure nothing more is sent; the chunks already out are waited for, then the first
    failure (in row order; an encoding error last) is raised. Cancelled, it cancels what is out.
    """
    gate = asyncio.Semaphore(in_flight_max)
    tasks: list[asyncio.Future[R]] = []
    failed = False

    def done(task: asyncio.Future[R]) -> None:
        nonlocal failed
        gate.release()
        if not task.cancelled() and task.exception() is not None:
            failed = True

    stop: Exception | None = None
    start = 0
    try:
        while start < rows and not failed:
            await gate.acquire()
            if failed:
                gate.release()
                break
            try:
                request, taken = encode(start)
            except Exception as e:  # a bad row: wait for what is out, then raise it
                gate.release()
                stop = e
                break
            sending = asyncio.ensure_future(send(request))
            sending.add_done_callback(done)
            tasks.append(sending)
            start += taken
        results = await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    for result in results:
        if isinstance(result, BaseException):
            raise result
    if stop is not None:
        raise stop
    return results  # type: ignore[return-value]
