"""Sending a task's messages (coroutines for an executor Session's loop).

At-least-once: messages without a chosen queue go out as SEND_BATCH_MESSAGE requests (a batch
costs about one send: 20,000+ messages/s here against 3,500/s one by one), several in flight;
messages with ``queue_id`` or ``sharding_key`` are sent one by one, in row order per queue, queues
in parallel, so a FIFO topic keeps each queue's order.

Rows without a queue choice, and every exactly-once row, are handed over as Arrow columns
(``sink_rows.to_columns``): the SDK's column encoder builds the request bodies from the Arrow
buffers, in C when built, with no Message object per row.

Exactly-once: rows are sent as transaction batches (OrbitMQ: one half message per batch of rows
of one topic, ``AsyncTransactionProducer.send_columns_half``), up to TX_BATCH_ROWS_MAX rows or
TX_BATCH_BYTES_MAX bytes each, several in flight; the receipts become the HalfRefs of the task's
commit message, and the driver ends each batch with one END_TRANSACTION_BATCH. The batch carries
the task's ORBITMQ_SPARK_TXN tag and CHECK_IMMUNITY_TIME_IN_SECONDS as its own properties: a
broker counts its checks of a pending batch even when no producer of the group is alive to
answer, and discards the batch after ``transaction_check_max`` of them, which would lose a batch
whose marker is written but whose driver crashed before committing it; during the immunity the
broker neither checks nor counts.

A topic that does not exist yet is created by its first send or transaction batch when the brokers
auto-create topics (``autoCreateTopicEnable``, the default), exactly-once as at-least-once; when
they do not, the write fails with one line naming the topic (:func:`check_target_topic` on the
driver for the ``topic`` option, before any task runs; :func:`missing_topic` in a task for a
``topic`` column).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager

from orbitmq.client import HalfMessageRef, SendStatus, select_by_hash
from orbitmq.errors import SparkError, TopicNotFoundError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message, PropertyKey
from orbitmq.protocol.topics import DEFAULT_TOPIC  # routed only where brokers auto-create topics
from orbitmq.spark.clients import Session
from orbitmq.spark.commit_log import TXN_PROPERTY, HalfRef, SinkTransactionListener, TxnTag
from orbitmq.spark.options import WriteOptions
from orbitmq.spark.sink_rows import Outgoing, TopicColumns

__all__ = ["send_plain", "send_plain_columns", "send_halves", "check_target_topic",
           "missing_topic", "BATCH_MESSAGES_MAX", "BATCH_BYTES_MAX", "TX_BATCH_ROWS_MAX",
           "TX_BATCH_BYTES_MAX"]

BATCH_MESSAGES_MAX = 256
BATCH_BYTES_MAX = 512 * 1024
BATCHES_IN_FLIGHT_MAX = 8
TX_BATCH_ROWS_MAX = 4096
TX_BATCH_BYTES_MAX = 1024 * 1024
TX_BATCHES_IN_FLIGHT_MAX = 4


def missing_topic_line(topic: str) -> str:
    return (f"orbitmq: topic {topic!r} does not exist and the brokers do not create topics "
            f"(autoCreateTopicEnable is false): create it first (orbitmq topic create -t {topic})")


@contextmanager
def missing_topic(topic: str) -> Iterator[None]:
    """A send's TopicNotFoundError for ``topic`` as a SparkError of one line naming it."""
    try:
        yield
    except TopicNotFoundError:
        raise SparkError(missing_topic_line(topic)) from None


async def check_target_topic(session: Session, topic: str) -> None:
    """On the driver: SparkError of one line when ``topic`` does not exist and no broker would
    create it on its first send (no route for TBW102: auto-creation is off)."""
    admin = await session.admin()
    for name in (topic, DEFAULT_TOPIC):
        try:
            await admin.topic_route(name)
            return
        except TopicNotFoundError:
            continue
    raise SparkError(missing_topic_line(topic))


async def _bounded(jobs: Sequence[Awaitable[object]], limit: int) -> list[object]:
    gate = asyncio.Semaphore(limit)

    async def run(job: Awaitable[object]) -> object:
        async with gate:
            return await job

    return list(await asyncio.gather(*(run(j) for j in jobs)))


def _chunks(messages: list[Message], rows_max: int = 0, bytes_max: int = 0) -> list[list[Message]]:
    """Messages grouped by topic, in order, cut at ``rows_max`` (BATCH_MESSAGES_MAX) messages or
    ``bytes_max`` (BATCH_BYTES_MAX) bytes."""
    rows_max, bytes_max = rows_max or BATCH_MESSAGES_MAX, bytes_max or BATCH_BYTES_MAX
    by_topic: dict[str, list[list[Message]]] = {}
    sizes: dict[str, int] = {}
    for msg in messages:
        chunks = by_topic.setdefault(msg.topic, [[]])
        size = len(msg.body) + 64
        if chunks[-1] and (len(chunks[-1]) >= rows_max or sizes[msg.topic] + size > bytes_max):
            chunks.append([])
            sizes[msg.topic] = 0
        chunks[-1].append(msg)
        sizes[msg.topic] = sizes.get(msg.topic, 0) + size
    return [c for chunks in by_topic.values() for c in chunks if c]


async def send_plain(session: Session, opts: WriteOptions, outgoing: Sequence[Outgoing]) -> None:
    """Send ``outgoing`` at least once (see the module docstring). Raises the first failure."""
    producer = await session.producer(opts.producer_group, opts.send_timeout_ms / 1000)
    free = [o.message for o in outgoing if o.queue_id is None and o.sharding_key is None]

    async def batch(chunk: list[Message]) -> object:
        with missing_topic(chunk[0].topic):
            return await producer.send_batch(chunk)

    jobs: list[Awaitable[object]] = [batch(c) for c in _chunks(free)]
    await _bounded(jobs, BATCHES_IN_FLIGHT_MAX)
    chosen = [o for o in outgoing if o.queue_id is not None or o.sharding_key is not None]
    if not chosen:
        return
    queues = {}
    for topic in sorted({o.message.topic for o in chosen}):
        with missing_topic(topic):
            queues[topic] = sorted(await producer.fetch_publish_queues(topic))
    per_queue: dict[MessageQueue, list[Message]] = {}
    for o in chosen:
        qs = queues[o.message.topic]
        mq = (qs[o.queue_id % len(qs)] if o.queue_id is not None
              else select_by_hash(qs, o.message, o.sharding_key))
        per_queue.setdefault(mq, []).append(o.message)

    async def in_order(mq: MessageQueue, messages: list[Message]) -> None:
        for msg in messages:
            await producer.send(msg, lambda _qs, _m, target: target, mq)

    await asyncio.gather(*(in_order(mq, msgs) for mq, msgs in per_queue.items()))


async def send_plain_columns(session: Session, opts: WriteOptions,
                             parts: Sequence[TopicColumns]) -> None:
    """Send rows given as columns (``sink_rows.to_columns``) at least once: the SDK's
    ``send_columns``, SEND_BATCH_MESSAGE requests straight from the Arrow buffers. Raises the
    first failure."""
    producer = await session.producer(opts.producer_group, opts.send_timeout_ms / 1000)
    for topic, columns in parts:
        with missing_topic(topic):
            await producer.send_columns(topic, columns, batch_rows_max=BATCH_MESSAGES_MAX,
                                        batch_bytes_max=BATCH_BYTES_MAX,
                                        in_flight_max=BATCHES_IN_FLIGHT_MAX)


async def send_halves(session: Session, opts: WriteOptions, parts: Sequence[TopicColumns],
                      tag: TxnTag) -> list[HalfRef]:
    """Send rows given as columns as transaction batches tagged with ``tag`` (the SDK's
    ``send_columns_half``); their references, in order.

    Raises:
        the first failure; a batch stored without a durable receipt (FLUSH_*_TIMEOUT) counts as
        one, so that a commit marker never lists a batch the broker may lose.
    """
    listener = SinkTransactionListener(session, opts.commit_topic)
    producer = await session.tx_producer(opts.producer_group, listener, opts.send_timeout_ms / 1000)
    own = {TXN_PROPERTY: tag.encode(),
           PropertyKey.CHECK_IMMUNITY_TIME_IN_SECONDS: str(opts.check_immunity_s)}
    refs = []
    for topic, columns in parts:
        with missing_topic(topic):
            sent_all = await producer.send_columns_half(
                topic, columns, properties=own, batch_rows_max=TX_BATCH_ROWS_MAX,
                batch_bytes_max=TX_BATCH_BYTES_MAX, in_flight_max=TX_BATCHES_IN_FLIGHT_MAX)
        for sent in sent_all:
            if sent.status is not SendStatus.OK:
                raise SparkError(f"orbitmq: transaction batch {sent.transaction_id} stored "
                                 f"without a durable receipt: {sent.status.value}")
            refs.append(HalfRef.of(HalfMessageRef.of(sent)))
    return refs
