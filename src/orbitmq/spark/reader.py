"""The batch reader and the Structured Streaming reader of the ``orbitmq`` data source.

Both plan on the driver (queue bounds through the admin API, one short-lived Session per call)
and read on executors (:func:`orbitmq.spark.fetch.read_range`; a partition reads one queue range,
or several small ones: :func:`orbitmq.spark.planning.pack_ranges`).

Streaming rules that keep replays exact:

- offsets are canonical JSON (:mod:`orbitmq.spark.offsets`); ``partitions(start, end)`` depends on
  nothing but its arguments;
- a queue that appears while the query runs (a topic got more queues, or a new topic matches
  ``topicPattern``) first enters an end offset at its oldest stored offset, with nothing read from
  it in that batch; the next batches read it from there, so a replay of either batch reads the
  same rows;
- admission control: ``getDefaultReadLimit`` maps ``maxOffsetsPerTrigger`` to ReadMaxRows and
  ``minOffsetsPerTrigger`` to ReadMinRows (with ``maxOffsetsPerTrigger`` still capping the batch,
  and ``maxTriggerDelay`` measured here, since PySpark's ReadMinRows carries no delay); whatever
  limit the engine passes is obeyed, ReadAllAvailable included;
- with Trigger.AvailableNow the latest offsets at ``prepareForTriggerAvailableNow`` are a cap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from orbitmq.errors import SparkError
from orbitmq.spark.clients import Session
from orbitmq.spark.fetch import DataLossError, read_range
from orbitmq.spark.offsets import (
    Offsets,
    QueueRange,
    canonical,
    parse_queue_key,
    rate_limit,
    total_between,
)
from orbitmq.spark.options import ReadOptions
from orbitmq.spark.planning import (
    Bounds,
    batch_ranges,
    check_retention,
    check_topics_exist,
    fetch_bounds,
    pack_ranges,
    partition_ranges,
    resolve_start,
    resolve_topics,
)
from orbitmq.spark.schema import ReadPlan, read_plan
from orbitmq.spark.ship import ship

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["OrbitMQBatchReader", "OrbitMQStreamReader", "RangePartition"]

log = logging.getLogger(__name__)


class RangePartition(InputPartition):
    """One input partition: ranges of queues, read one after the other (pickled to the
    executor)."""

    def __init__(self, ranges: tuple[QueueRange, ...]) -> None:
        assert ranges
        super().__init__(ranges)
        self.ranges = ranges

    def read(self, opts: ReadOptions, plan: ReadPlan) -> Iterator[Any]:
        for rng in self.ranges:
            yield from read_range(rng, opts, plan)

    def __repr__(self) -> str:
        return f"RangePartition({'; '.join(r.describe() for r in self.ranges)})"


async def _bounds(session: Session, opts: ReadOptions) -> tuple[list[str], Bounds]:
    topics = await resolve_topics(session, opts)
    return topics, await fetch_bounds(session, topics)


def _plan(opts: ReadOptions, schema: StructType) -> ReadPlan:
    return read_plan(schema, opts.include_properties, opts.tag_set is not None, opts.sql is not None)


class OrbitMQBatchReader(DataSourceReader):
    """Reads [startingOffsets, endingOffsets) of every queue once; only the columns of
    ``schema`` (the source's, or a subset the user declared: see schema.py). ``parallelism``:
    the session's default parallelism, which small ranges are packed to (None: no packing)."""

    def __init__(self, opts: ReadOptions, schema: StructType,
                 parallelism: int | None = None) -> None:
        self.opts = opts
        self.schema = schema
        self.parallelism = parallelism

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with Session(opts.namesrv, opts.credentials, opts.tls) as session:
            topics, bounds = session.run(_bounds(session, opts))
            check_topics_exist(topics, bounds, "topicPattern" if opts.topic_pattern else "topic")
            start = session.run(resolve_start(session, opts, bounds, opts.starting,
                                              "startingOffsets"))
            end = session.run(resolve_start(session, opts, bounds, opts.ending, "endingOffsets"))
        ranges = batch_ranges(opts, bounds, start, end)
        groups = pack_ranges(opts, ranges, self.parallelism)
        log.info("orbitmq batch read of %d range(s) in %d partition(s), %d offset(s)",
                 len(ranges), len(groups), sum(r.size for r in ranges))
        return [RangePartition(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, RangePartition):  # Spark reads one empty partition when none
            yield from partition.read(self.opts, _plan(self.opts, self.schema))

    def __reduce__(self) -> tuple[Any, ...]:
        return ship(self)


class OrbitMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over every queue of the topics read (see the module docstring);
    ``parallelism`` as for :class:`OrbitMQBatchReader`."""

    def __init__(self, opts: ReadOptions, schema: StructType,
                 parallelism: int | None = None) -> None:
        self.opts = opts
        self.schema = schema
        self.parallelism = parallelism
        self._target: Offsets | None = None  # Trigger.AvailableNow's cap
        self._last_batch_at = time.monotonic()

    # -- offsets -----------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        opts = self.opts
        with Session(opts.namesrv, opts.credentials, opts.tls) as session:
            topics, bounds = session.run(_bounds(session, opts))
            if opts.topic_pattern is None:
                check_topics_exist(topics, bounds)
            start = session.run(resolve_start(session, opts, bounds, opts.starting,
                                              "startingOffsets"))
        return start

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with Session(self.opts.namesrv, self.opts.credentials, self.opts.tls) as session:
            _topics, bounds = session.run(_bounds(session, self.opts))
        self._target = {t: {k: b.max for k, b in q.items()} for t, q in bounds.items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        with Session(self.opts.namesrv, self.opts.credentials, self.opts.tls) as session:
            _topics, bounds = session.run(_bounds(session, self.opts))
        start = canonical(start)
        candidates = self._candidates(start, bounds)
        end = self._admit(start, candidates, limit)
        if end != start:
            self._last_batch_at = time.monotonic()
        self._log_lag(end, bounds)
        return end

    def reportLatestOffset(self) -> dict | None:
        """The newest offsets of every queue read: Spark shows them as the source's
        ``latestOffset`` in StreamingQueryProgress, next to ``endOffset`` (their difference is
        the lag)."""
        with Session(self.opts.namesrv, self.opts.credentials, self.opts.tls) as session:
            _topics, bounds = session.run(_bounds(session, self.opts))
        return canonical({t: {k: b.max for k, b in q.items()} for t, q in bounds.items()})

    def _log_lag(self, end: Offsets, bounds: Bounds) -> None:
        """Kafka's offsetsBehindLatest figures, logged (PySpark gives a Python source no way to
        report source metrics: see docs/spark.md)."""
        behind = [max(0, b.max - end.get(t, {}).get(k, b.max))
                  for t, queues in bounds.items() for k, b in queues.items()]
        if behind:
            log.info("orbitmq offsets behind latest: min=%d max=%d avg=%.1f over %d queue(s)",
                     min(behind), max(behind), sum(behind) / len(behind), len(behind))

    def _candidates(self, start: Offsets, bounds: Bounds) -> Offsets:
        """The furthest end allowed: latest of known queues (capped by the AvailableNow target),
        new queues at their oldest offset; lost queues failed or dropped."""
        out: Offsets = {}
        for topic, queues in start.items():
            for key, offset in queues.items():
                b = bounds.get(topic, {}).get(key)
                if b is None or b.max < offset:
                    self._lost_queue(topic, key, offset, b is None)
                    continue
                check_retention(self.opts, topic, key, offset, b)
                hi = b.max
                if self._target is not None:
                    hi = max(offset, min(hi, self._target.get(topic, {}).get(key, offset)))
                out.setdefault(topic, {})[key] = hi
        for topic, present in bounds.items():
            for key, qb in present.items():
                known = key in start.get(topic, {})
                if not known and (self._target is None or key in self._target.get(topic, {})):
                    log.info("orbitmq: new queue %s of topic %r, read from offset %d on",
                             key, topic, qb.min)
                    out.setdefault(topic, {})[key] = qb.min
        return canonical(out)

    def _lost_queue(self, topic: str, key: str, offset: int, deleted: bool) -> None:
        what = "was deleted" if deleted else "was recreated and lost its messages"
        msg = (f"orbitmq: data loss on topic {topic!r} queue {key}: the queue {what}; the query "
               f"had read up to offset {offset}")
        if self.opts.fail_on_data_loss:
            raise DataLossError(msg + ". Set failOnDataLoss=false to skip lost messages.")
        log.warning("%s; dropped from the query (failOnDataLoss=false)", msg)

    def _admit(self, start: Offsets, candidates: Offsets, limit: ReadLimit) -> Offsets:
        if isinstance(limit, ReadAllAvailable):
            return candidates
        if isinstance(limit, ReadMaxRows):
            return rate_limit(start, candidates, limit.max_rows)
        if isinstance(limit, ReadMinRows):
            waited_ms = (time.monotonic() - self._last_batch_at) * 1000
            if (total_between(start, candidates) < limit.min_rows
                    and waited_ms < self.opts.max_trigger_delay_ms):
                return start
            mx = self.opts.max_offsets_per_trigger
            return rate_limit(start, candidates, mx) if mx is not None else candidates
        raise SparkError(f"orbitmq: read limit {limit!r} is not supported")

    # -- reading -------------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = []
        for topic, queues in end.items():
            for key, hi in queues.items():
                lo = start.get(topic, {}).get(key, hi)  # a new queue: nothing in this batch
                if hi > lo:
                    broker, qid = parse_queue_key(key)
                    ranges.append(QueueRange(topic, broker, qid, int(lo), int(hi)))
        groups = pack_ranges(self.opts, partition_ranges(self.opts, ranges), self.parallelism)
        return [RangePartition(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, RangePartition):  # Spark reads one empty partition when none
            yield from partition.read(self.opts, _plan(self.opts, self.schema))

    def __reduce__(self) -> tuple[Any, ...]:
        return ship(self)

    def commit(self, end: dict) -> None:
        """Nothing to do: the checkpoint holds the offsets, not the broker."""

    def stop(self) -> None:
        """Nothing to release: every driver call closes its own connections."""
