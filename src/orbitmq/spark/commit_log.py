"""The exactly-once sink's commit protocol: commit markers kept on the broker, ending the half
messages (the SDK's ``end_transaction`` by receipt), and the answer to the brokers' transaction
checks (docs/spark.md explains it).

A *commit marker* records that batch ``batch_id`` of query ``query_id`` is committed and lists the
half messages that make up its output. It is an ordinary message of the commit topic whose key is
``spark-commit:{query_id}:{batch_id}``, found again with QUERY_MESSAGE (which waits until the
broker's index holds every acknowledged send). A large list is split into parts; a marker counts
only when all its parts are there, and when (against Spark's protocol) two complete markers of
one batch exist, the one stored first wins everywhere. An *abort record* (key
``spark-abort:{query_id}:{batch_id}:{run}``) says that a run of the query gave the batch up.

Invariant: a half message is committed only if a complete marker lists it, and the marker is
written before any of its halves is committed; so once a marker exists the batch's output is
fixed, and every later decision (a replay, a commit retried, a transaction check) follows it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import logging
from collections.abc import Iterable, Sequence

from orbitmq.client import (
    HalfMessageRef,
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
)
from orbitmq.errors import OrbitMQError, SparkCommitError, TopicNotFoundError
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.spark.clients import Session

__all__ = [
    "HalfRef",
    "Marker",
    "TXN_PROPERTY",
    "TxnTag",
    "marker_key",
    "lookup_marker",
    "write_marker",
    "write_abort_record",
    "aborted",
    "end_halves",
    "ensure_commit_topic",
    "SinkTransactionListener",
    "CommitError",
]

log = logging.getLogger(__name__)

TXN_PROPERTY = "ORBITMQ_SPARK_TXN"  # on every half message: "query:batch:run:partition"
MARKER_PART_HALVES_MAX = 20_000  # halves listed per marker message (~1.5 MB of JSON, deflated)
MARKER_PARTS_MAX = 64  # QUERY_MESSAGE answers at most 64 messages per broker
END_IN_FLIGHT_MAX = 64
END_TIMEOUT_S = 10.0  # per END_TRANSACTION attempt (the SDK tries 3 times on transient refusals)
MARKER_CACHE_MAX = 256

CommitError = SparkCommitError  # the name the connector's users know


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class HalfRef:
    """Where a half message is: what END_TRANSACTION needs to commit or roll it back."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int  # in the broker's half queue (tranStateTableOffset)
    msg_id: str  # the UNIQ_KEY, stable over the broker's re-stored check copies
    topic: str  # the real topic (to find the broker's address through its route)
    broker_addr: str  # where it was stored (used when the route no longer names the broker)
    batch_size: int = 0  # rows of a transaction batch (0: a single half message, older markers)

    @classmethod
    def of(cls, ref: HalfMessageRef) -> HalfRef:
        """The HalfRef of the SDK's reference of a half message (read from its SendResult)."""
        return cls(ref.broker_name, ref.commit_log_offset, ref.half_queue_offset, ref.msg_id,
                   ref.topic, ref.store_addr, ref.batch_size)

    def ref(self) -> HalfMessageRef:
        """What the SDK's ``end_transaction`` takes (the transaction id is the UNIQ_KEY)."""
        return HalfMessageRef(self.broker_name, self.topic, self.commit_log_offset,
                              self.queue_offset, self.msg_id, self.msg_id, self.broker_addr,
                              self.batch_size)


@dataclasses.dataclass(frozen=True, slots=True)
class TxnTag:
    """The ORBITMQ_SPARK_TXN property of a half message."""

    query_id: str
    batch_id: int
    run: str
    partition: str

    def encode(self) -> str:
        return f"{self.query_id}:{self.batch_id}:{self.run}:{self.partition}"

    @classmethod
    def parse(cls, text: str | None) -> TxnTag | None:
        parts = (text or "").split(":")
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])


@dataclasses.dataclass(frozen=True)
class Marker:
    """A complete commit marker."""

    query_id: str
    batch_id: int
    token: str
    halves: tuple[HalfRef, ...]

    @property
    def msg_ids(self) -> frozenset[str]:
        return frozenset(h.msg_id for h in self.halves)


def marker_key(query_id: str, batch_id: int) -> str:
    return f"spark-commit:{query_id}:{batch_id}"


def abort_key(query_id: str, batch_id: int, run: str) -> str:
    return f"spark-abort:{query_id}:{batch_id}:{run}"


async def ensure_commit_topic(session: Session, topic: str) -> None:
    """Create the commit topic (one queue per broker) unless it exists."""
    admin = await session.admin()
    if topic not in await admin.list_topics():  # exist_ok: another task may create it meanwhile
        await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1, exist_ok=True)
        log.info("orbitmq: created the sink's commit topic %s", topic)


async def _query(session: Session, topic: str, key: str) -> list[MessageExt]:
    admin = await session.admin()
    try:
        return await admin.query_messages(topic, key, max_num=MARKER_PARTS_MAX)
    except TopicNotFoundError:
        return []


def _decode_marker(parts: Sequence[MessageExt]) -> Marker | None:
    """The first complete marker among the parts of several tokens (stored order)."""
    by_token: dict[str, dict[int, dict]] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for msg in parts:
        doc = json.loads(msg.body)
        token = str(doc["token"])
        by_token.setdefault(token, {})[int(doc["part"])] = doc
        seen = (msg.store_timestamp, msg.commit_log_offset)
        first_seen[token] = min(first_seen.get(token, seen), seen)
    for token in sorted(by_token, key=lambda t: first_seen[t]):
        docs = by_token[token]
        count = int(next(iter(docs.values()))["parts"])
        if sorted(docs) != list(range(count)):
            continue  # a commit that died while writing its marker
        halves = tuple(HalfRef(*h) for i in range(count) for h in docs[i]["halves"])
        head = docs[0]
        return Marker(str(head["query"]), int(head["batch"]), token, halves)
    return None


async def lookup_marker(session: Session, topic: str, query_id: str, batch_id: int) -> Marker | None:
    """The batch's commit marker, or None when the batch was never committed."""
    return _decode_marker(await _query(session, topic, marker_key(query_id, batch_id)))


async def write_marker(session: Session, topic: str, group: str, query_id: str, batch_id: int,
                       token: str, halves: Sequence[HalfRef]) -> None:
    """Store the marker's parts, each sent synchronously (stored on the broker when this returns).

    Raises:
        CommitError: more halves than markers can list.
    """
    halves = sorted(halves)
    chunks = [halves[i:i + MARKER_PART_HALVES_MAX]
              for i in range(0, len(halves), MARKER_PART_HALVES_MAX)] or [[]]
    if len(chunks) > MARKER_PARTS_MAX:
        raise CommitError(f"batch {batch_id} wrote {len(halves)} rows; an exactly-once batch may "
                          f"hold at most {MARKER_PARTS_MAX * MARKER_PART_HALVES_MAX}: lower "
                          "maxOffsetsPerTrigger")
    producer = await session.producer(f"{group}-commit")
    key = marker_key(query_id, batch_id)
    for i, chunk in enumerate(chunks):
        body = json.dumps({"query": query_id, "batch": batch_id, "token": token, "part": i,
                           "parts": len(chunks), "halves": [dataclasses.astuple(h) for h in chunk]})
        await producer.send(Message(topic, body.encode(), tags="commit", keys=[key]))


async def write_abort_record(session: Session, topic: str, group: str, query_id: str,
                             batch_id: int, run: str) -> None:
    producer = await session.producer(f"{group}-commit")
    body = json.dumps({"query": query_id, "batch": batch_id, "run": run}).encode()
    await producer.send(Message(topic, body, tags="abort", keys=[abort_key(query_id, batch_id, run)]))


async def aborted(session: Session, topic: str, query_id: str, batch_id: int, run: str) -> bool:
    return bool(await _query(session, topic, abort_key(query_id, batch_id, run)))


async def end_halves(session: Session, group: str, commit_topic: str,
                     halves: Iterable[HalfRef], *, commit: bool) -> list[str]:
    """Commit or roll back every half, through the SDK's ``end_transaction`` (two-way, so the
    answer is known, transient refusals tried again); returns the failures.

    Committing an already committed half answers SUCCESS without a second delivery (the broker's
    rule), so this may be repeated after a crash. The producer doing it belongs to the sink's
    group (the group of the halves, which the broker checks) and answers the brokers' checks
    from the markers, as the executors' producers do.
    """
    listener = SinkTransactionListener(session, commit_topic)
    producer = await session.tx_producer(group, listener, END_TIMEOUT_S)
    state = LocalTransactionState.COMMIT if commit else LocalTransactionState.ROLLBACK
    gate = asyncio.Semaphore(END_IN_FLIGHT_MAX)

    async def one(h: HalfRef) -> str | None:
        async with gate:
            try:
                await producer.end_transaction(h.ref(), state, timeout=END_TIMEOUT_S)
            except OrbitMQError as e:
                return f"msg {h.msg_id} on {h.broker_name} at {h.commit_log_offset}: {e}"
            return None

    results = await asyncio.gather(*(one(h) for h in halves))
    return [r for r in results if r is not None]


class SinkTransactionListener(TransactionListener):
    """Answers the brokers' checks of the sink's half messages from the commit markers.

    COMMIT when the batch's marker lists the message, ROLLBACK when the marker exists without it
    or when the run that wrote it aborted the batch, UNKNOWN while the batch is undecided (the
    broker asks again later). Any live producer of the sink's group can answer any half message,
    so it does not matter which process wrote it or whether that process still exists.
    """

    def __init__(self, session: Session, commit_topic: str) -> None:
        self.session = session
        self.commit_topic = commit_topic
        # complete markers never change: remember the recent ones (bounded, oldest dropped)
        self._markers: collections.OrderedDict[tuple[str, int], Marker] = collections.OrderedDict()

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN  # the sink sends halves only; commit decides

    def execute_local_transaction_batch(self, batch: TransactionBatch,
                                        arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    async def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return await self._verdict(msg.properties.get(TXN_PROPERTY), msg.msg_id)

    async def check_local_transaction_batch(self, batch: TransactionBatch) -> LocalTransactionState:
        return await self._verdict(batch.properties.get(TXN_PROPERTY), batch.transaction_id)

    async def _verdict(self, txn: str | None, msg_id: str) -> LocalTransactionState:
        tag = TxnTag.parse(txn)
        if tag is None:
            return LocalTransactionState.UNKNOWN
        key = (tag.query_id, tag.batch_id)
        marker = self._markers.get(key)
        if marker is None:
            marker = await lookup_marker(self.session, self.commit_topic, *key)
            if marker is not None:
                self._markers[key] = marker
                while len(self._markers) > MARKER_CACHE_MAX:
                    self._markers.popitem(last=False)
        if marker is not None:
            listed = msg_id in marker.msg_ids
            return LocalTransactionState.COMMIT if listed else LocalTransactionState.ROLLBACK
        if await aborted(self.session, self.commit_topic, tag.query_id, tag.batch_id, tag.run):
            return LocalTransactionState.ROLLBACK
        return LocalTransactionState.UNKNOWN
