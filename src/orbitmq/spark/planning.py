"""Driver-side planning: which topics and queues exist, their bounds, and where reading starts
and ends. Each function is a coroutine for a :class:`~orbitmq.spark.clients.Session`'s loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re

from orbitmq.client import NOT_ALLOWED_SEND_TOPICS
from orbitmq.errors import TopicNotFoundError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from orbitmq.spark.clients import Session
from orbitmq.spark.fetch import DataLossError
from orbitmq.spark.offsets import (
    EARLIEST,
    EARLIEST_OFFSET,
    LATEST,
    LATEST_OFFSET,
    Offsets,
    QueueRange,
    canonical,
    parse_queue_key,
    queue_key,
    split_ranges,
)
from orbitmq.spark.options import OptionError, ReadOptions, StartSpec

__all__ = ["Bounds", "QueueBounds", "resolve_topics", "fetch_bounds", "resolve_start",
           "batch_ranges", "partition_ranges", "pack_ranges", "SYSTEM_TOPIC_PREFIXES"]

log = logging.getLogger(__name__)

SYSTEM_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, "RMQ_SYS_", "rmq_sys_",
                         "ORBITMQ_")


@dataclasses.dataclass(frozen=True, slots=True)
class QueueBounds:
    """The oldest stored offset of a queue and one past its newest."""

    min: int
    max: int


Bounds = dict[str, dict[str, QueueBounds]]  # topic -> queue key -> bounds (existing topics only)


async def resolve_topics(session: Session, opts: ReadOptions) -> list[str]:
    """The topics to read: the ``topic`` list, or every user topic matching ``topicPattern``."""
    if opts.topic_pattern is None:
        return list(opts.topics)
    admin = await session.admin()
    info, topics = await asyncio.gather(admin.cluster_info(), admin.list_topics())
    reserved = set(NOT_ALLOWED_SEND_TOPICS) | set(info.cluster_addr_table) | set(
        info.broker_addr_table) | {opts.commit_topic}
    pattern = re.compile(opts.topic_pattern)
    return sorted(t for t in topics if pattern.fullmatch(t) and t not in reserved
                  and not t.startswith(SYSTEM_TOPIC_PREFIXES))


async def fetch_bounds(session: Session, topics: list[str]) -> Bounds:
    """Bounds of every queue of ``topics`` (one request per broker and topic); a topic that does
    not exist is left out."""
    admin = await session.admin()

    async def one(topic: str) -> tuple[str, dict[str, QueueBounds] | None]:
        try:
            status = await admin.topic_status(topic)
        except TopicNotFoundError:
            return topic, None
        return topic, {queue_key(s.queue.broker_name, s.queue.queue_id): QueueBounds(
            s.min_offset, s.max_offset) for s in status}

    found = await asyncio.gather(*(one(t) for t in topics))
    return {t: dict(sorted(q.items())) for t, q in sorted(found) if q is not None}


def check_topics_exist(topics: list[str], bounds: Bounds, option: str = "topic") -> None:
    missing = [t for t in topics if t not in bounds]
    if missing:
        raise OptionError(option, f"topic(s) {', '.join(missing)} do not exist")


async def _search(session: Session, opts: ReadOptions, stamps: dict[tuple[str, str], int]) -> Offsets:
    """The first offset of each queue stored at or after its timestamp (SEARCH_OFFSET_BY_TIMESTAMP
    through the SDK; a queue with no message that late: its end)."""
    puller = await session.puller(opts.consumer_group)
    keys = sorted(stamps)

    async def one(topic: str, key: str) -> int:
        broker, qid = parse_queue_key(key)
        return await puller.search_offset(MessageQueue(topic, broker, qid), stamps[(topic, key)])

    found = await asyncio.gather(*(one(t, k) for t, k in keys))
    out: Offsets = {}
    for (topic, key), offset in zip(keys, found, strict=True):
        out.setdefault(topic, {})[key] = offset
    return out


async def _by_time(session: Session, opts: ReadOptions, bounds: Bounds, spec: StartSpec,
                   option: str) -> Offsets:
    """``spec`` of kind timestamp (every queue) or timestamps (the queues the JSON names; the
    others at their start, or their end for an ``ending*`` option)."""
    if spec.kind == "timestamp":
        stamps = {(t, k): spec.timestamp_ms for t, queues in bounds.items() for k in queues}
    else:
        stamps = {}
        for topic, given in spec.offsets.items():
            for key, ms in given.items():
                _check_named(bounds, topic, key, option)
                stamps[(topic, key)] = ms
    out = await _search(session, opts, stamps)
    for topic, queues in bounds.items():
        for key, b in queues.items():
            out.setdefault(topic, {}).setdefault(key, b.max if option.startswith("ending") else b.min)
    return canonical(out)


def _check_named(bounds: Bounds, topic: str, key: str, option: str) -> None:
    if topic not in bounds:
        raise OptionError(option, f"names topic {topic!r}, which is not read or does not exist")
    if key not in bounds[topic]:
        raise OptionError(option, f"names queue {key} of topic {topic!r}, which does not "
                                  f"exist (queues: {', '.join(bounds[topic])})")


async def resolve_start(session: Session, opts: ReadOptions, bounds: Bounds, spec: StartSpec,
                        option: str) -> Offsets:
    """Concrete offsets of every queue of ``bounds`` for ``spec`` (JSON -2: earliest, -1: latest;
    queues the JSON does not name: earliest for a start, latest for an end).

    Raises:
        OptionError: the JSON names a topic not read or a queue that does not exist.
    """
    if spec.kind in ("timestamp", "timestamps"):
        return await _by_time(session, opts, bounds, spec, option)
    out: Offsets = {}
    for topic, queues in bounds.items():
        for key, b in queues.items():
            out.setdefault(topic, {})[key] = b.max if spec.kind == LATEST else b.min
    if spec.kind in (EARLIEST, LATEST):
        return canonical(out)
    default_latest = option == "endingOffsets"
    for topic, given in spec.offsets.items():
        for key, value in given.items():
            _check_named(bounds, topic, key, option)
            qb = bounds[topic][key]
            out[topic][key] = qb.min if value == EARLIEST_OFFSET else (
                qb.max if value == LATEST_OFFSET else value)
    if default_latest:
        for topic, queues in bounds.items():
            for key, b in queues.items():
                if key not in spec.offsets.get(topic, {}):
                    out[topic][key] = b.max
    return canonical(out)


def batch_ranges(opts: ReadOptions, bounds: Bounds, start: Offsets, end: Offsets) -> list[QueueRange]:
    """The ranges a batch read covers (:func:`partition_ranges`).

    Raises:
        OptionError: an ending offset before its starting offset.
        DataLossError: a start below the oldest stored offset, with failOnDataLoss.
    """
    ranges = []
    for topic, queues in end.items():
        for key, hi in queues.items():
            lo = start[topic][key]
            if hi < lo:
                raise OptionError(_ending_option(opts), f"topic {topic!r} queue {key}: ending "
                                                        f"offset {hi} is before starting offset {lo}")
            lo = check_retention(opts, topic, key, lo, bounds[topic][key])
            broker, qid = parse_queue_key(key)
            ranges.append(QueueRange(topic, broker, qid, lo, max(lo, hi)))
    return partition_ranges(opts, ranges)


def _ending_option(opts: ReadOptions) -> str:
    return {"timestamp": "endingTimestamp", "timestamps": "endingOffsetsByTimestamp"}.get(
        opts.ending.kind, "endingOffsets")


def partition_ranges(opts: ReadOptions, ranges: list[QueueRange]) -> list[QueueRange]:
    """``ranges`` as input partitions: cut to at most ``maxRecordsPerPartition`` offsets, then,
    while fewer than ``minPartitions``, large ones divided further in proportion to their size
    (Kafka's rule), so a big queue is read by several tasks. Depends on nothing but its
    arguments, so a replayed micro-batch is cut the same way."""
    pieces = split_ranges(ranges, opts.max_offsets_per_partition)
    wanted = opts.min_partitions
    if wanted is None or len(pieces) >= wanted:
        return pieces
    total = sum(r.size for r in pieces)
    out = []
    for r in pieces:
        parts = max(int(r.size / total * wanted + 0.5), 1) if total else 1  # Kafka's
        remaining, lo = r.size, r.start
        for part in range(parts):
            size = remaining // (parts - part)
            remaining -= size
            if size:
                out.append(dataclasses.replace(r, start=lo, end=lo + size))
            lo += size
    return sorted(out, key=lambda r: r.order)


def pack_ranges(opts: ReadOptions, pieces: list[QueueRange],
                parallelism: int | None) -> list[tuple[QueueRange, ...]]:
    """Input partitions of ``pieces`` (from :func:`partition_ranges`): small ones grouped into
    ``max(parallelism, minPartitions)`` partitions of about equal size (largest piece first,
    each into the smallest group), more only where a group would pass
    ``maxOffsetsPerPartition`` offsets. A task of a Python source costs Spark tens of
    milliseconds before it reads anything, so eight queues of a few thousand offsets are better
    read by two tasks than by eight; and by exactly as many as there are cores, since one task
    more is a round more. Without a ``parallelism`` every piece is its own partition; empty
    pieces are dropped. Depends on nothing but its arguments, so a replay is grouped the same
    way."""
    pieces = [r for r in pieces if r.size]
    wanted = max(parallelism or 0, opts.min_partitions or 0)
    if not wanted or len(pieces) <= wanted:
        return [(r,) for r in pieces]
    cap = opts.max_offsets_per_partition
    total = sum(r.size for r in pieces)
    groups: list[list[QueueRange]] = [[] for _ in range(max(wanted, -(-total // cap)))]
    sizes = [0] * len(groups)
    for r in sorted(pieces, key=lambda r: (-r.size, r.order)):
        at = min(range(len(groups)), key=lambda i: (sizes[i], i))
        if sizes[at] + r.size > cap:
            groups.append([])
            sizes.append(0)
            at = len(groups) - 1
        groups[at].append(r)
        sizes[at] += r.size
    ordered = (tuple(sorted(g, key=lambda r: r.order)) for g in groups if g)
    return sorted(ordered, key=lambda g: g[0].order)


def check_retention(opts: ReadOptions, topic: str, key: str, start: int, b: QueueBounds) -> int:
    """``start``, or the oldest stored offset when retention removed messages from ``start`` on
    (logged; DataLossError instead with failOnDataLoss)."""
    if start >= b.min:
        return start
    msg = (f"orbitmq: data loss on topic {topic!r} queue {key}: offsets [{start}, {b.min}) are no "
           "longer stored (removed by retention or a deleted queue)")
    if opts.fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to skip lost messages.")
    log.warning("%s; skipped (failOnDataLoss=false)", msg)
    return b.min
