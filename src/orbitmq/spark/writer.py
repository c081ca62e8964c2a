"""The sink: batch and streaming Arrow writers of the ``orbitmq`` data source.

Streaming writes are exactly-once by default and batch writes at-least-once (``exactlyOnce``
changes either). Exactly-once, per micro-batch (docs/spark.md has the whole argument):

1. ``write()`` on each executor first looks for the batch's commit marker: when there is one,
   Spark is replaying a batch that was already committed, and the task sends nothing; otherwise
   it sends its rows as half messages tagged (query id, batch id, run, partition) and returns
   their references (broker, commit log offset, half queue offset, msg id);
2. ``commit()`` on the driver writes the marker listing every half (unless one exists), then
   commits the halves the marker lists (the SDK's ``end_transaction`` by receipt), which a
   broker answers without a second delivery when repeated;
3. ``abort()`` rolls back the halves no marker lists and records that this run gave the batch up;
   halves nobody committed nor rolled back are settled by the brokers' checks, which
   :class:`~orbitmq.spark.commit_log.SinkTransactionListener` answers from the markers.

Neither ``write()`` nor ``commit()`` gets the other's state: the batch id comes from the task's
local property ``streaming.sql.batchId`` and the query id from ``sql.streaming.queryId``, stable
over restarts from one checkpoint; commit messages carry everything ``commit()`` needs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from orbitmq.spark import commit_log as cl
from orbitmq.spark.clients import Session, executor_session
from orbitmq.spark.options import WriteOptions
from orbitmq.spark.send import check_target_topic, send_halves, send_plain, send_plain_columns
from orbitmq.spark.ship import ship
from orbitmq.spark.sink_rows import ColumnPlan, Outgoing, plan_columns, to_columns, to_messages

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["SinkCommitMessage", "OrbitMQArrowWriter", "OrbitMQStreamArrowWriter",
           "make_batch_writer", "make_stream_writer", "FAULT_ENV"]

log = logging.getLogger(__name__)

FAULT_ENV = "ORBITMQ_SPARK_FAULT"  # test seam: "point@batch[:once],..." (see _fault_point)
FAULT_DIR_ENV = "ORBITMQ_SPARK_FAULT_DIR"
FAULT_PAUSE_S = 600.0
SEND_CHUNK_ROWS = 4096
SEND_CHUNKS_IN_FLIGHT_MAX = 2  # chunks sent while the task converts the next
SEND_CHUNK_TIMEOUT_S = 600.0


@dataclasses.dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task reports to ``commit()``."""

    query_id: str
    batch_id: int
    run: str
    partition: str
    rows: int = 0
    halves: tuple[cl.HalfRef, ...] = ()
    replayed: bool = False  # the batch was already committed: nothing was sent


def _fault_point(point: str, batch_id: int) -> None:
    """Pause forever at ``point`` of batch ``batch_id`` when FAULT_ENV asks for it (a test kills the
    process there: the exactly-once tests' way to crash at a chosen step). ``point@batch:once``
    pauses only the first process to get there (the others go on: one executor is killed while
    the rest of the job runs). A no-op otherwise."""
    wanted = os.environ.get(FAULT_ENV, "")
    for item in filter(None, wanted.split(",")):
        name, _, rest = item.partition("@")
        batch, _, mode = rest.partition(":")
        if name == point and batch_id >= int(batch or 0):
            folder = Path(os.environ.get(FAULT_DIR_ENV, "."))
            if mode == "once":
                try:
                    (folder / f"{point}.once").open("x").close()
                except FileExistsError:
                    return
            (folder / f"{point}-{batch_id}-{os.getpid()}").touch()
            log.warning("orbitmq: pausing at fault point %s of batch %d", point, batch_id)
            time.sleep(FAULT_PAUSE_S)


class _Chunks:
    """A task's rows going out in chunks on the session's loop while the task's thread converts
    the next chunk (at most SEND_CHUNKS_IN_FLIGHT_MAX out); exactly-once chunks' halves are
    kept in order."""

    def __init__(self, session: Session, opts: WriteOptions, tag: cl.TxnTag) -> None:
        self.session, self.opts, self.tag = session, opts, tag
        self.halves: list[cl.HalfRef] = []
        self.in_flight: collections.deque[concurrent.futures.Future[Any]] = collections.deque()

    def send(self, chunk: list[Outgoing]) -> None:
        """Rows with a queue choice (at-least-once only), as messages."""
        self._submit(lambda: send_plain(self.session, self.opts, chunk))

    def send_columns(self, batches: list[pa.RecordBatch], plan: ColumnPlan) -> None:
        """Rows without a queue choice, as Arrow columns (small input batches joined first)."""
        import pyarrow as pa

        rb = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        parts = to_columns(rb, plan, self.opts)
        session, opts = self.session, self.opts
        self._submit(lambda: send_halves(session, opts, parts, self.tag) if opts.exactly_once
                     else send_plain_columns(session, opts, parts))

    def _submit(self, job: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        while len(self.in_flight) >= SEND_CHUNKS_IN_FLIGHT_MAX:
            self._settle_oldest()
        self.in_flight.append(self.session.submit(job()))

    def _settle_oldest(self) -> None:
        """Wait for the oldest chunk; its failure is the task's."""
        sent = self.in_flight.popleft().result(SEND_CHUNK_TIMEOUT_S)
        if self.opts.exactly_once:
            first = not self.halves
            self.halves.extend(sent)
            if first:  # part of the task's rows are in pending transaction batches
                _fault_point("sending", self.tag.batch_id)

    def finish(self) -> list[cl.HalfRef]:
        """Wait for every chunk; the halves sent, in order."""
        while self.in_flight:
            self._settle_oldest()
        return self.halves

    def cancel(self) -> None:
        """After a failure: what is still out is not waited for."""
        for future in self.in_flight:
            future.cancel()


class _Sink:
    """What the batch and the streaming writers share."""

    def __init__(self, opts: WriteOptions, plan: ColumnPlan) -> None:
        self.opts = opts
        self.plan = plan
        self.run = uuid.uuid4().hex[:16]  # this run of the query (or this batch job)

    def write(self, batches: Iterator[pa.RecordBatch], query_id: str, batch_id: int,
              partition: str) -> SinkCommitMessage:
        opts = self.opts
        msg = SinkCommitMessage(query_id, batch_id, self.run, partition)
        with executor_session(opts.namesrv, opts.credentials, opts.tls) as session:
            if opts.exactly_once and session.run(
                    cl.lookup_marker(session, opts.commit_topic, query_id, batch_id)) is not None:
                log.info("orbitmq: batch %d of query %s is already committed: nothing sent",
                         batch_id, query_id)
                msg.replayed = True
                for _ in batches:  # drain the input, as the worker protocol expects
                    pass
                return msg
            chunks = _Chunks(session, opts, cl.TxnTag(query_id, batch_id, self.run, partition))
            try:
                # Input batches may be tiny (a limit, a cache): send in chunks of our own size,
                # so that many sends are in flight whatever Spark's batching.
                msg.rows = self._send_all(batches, chunks)
                halves = chunks.finish()
            finally:
                chunks.cancel()
        msg.halves = tuple(halves)
        if opts.exactly_once:
            _fault_point("halves_sent", batch_id)
        return msg

    def _send_all(self, batches: Iterator[pa.RecordBatch], chunks: _Chunks) -> int:
        """Hand every input row to ``chunks`` in chunks of SEND_CHUNK_ROWS or more; the rows."""
        plan, opts = self.plan, self.opts
        rows = 0
        pending: list[Outgoing] = []
        pending_batches: list[pa.RecordBatch] = []
        pending_rows = 0
        for rb in batches:
            rows += rb.num_rows
            if plan.selects_queue:  # FIFO rows: messages sent one by one per queue, in order
                pending.extend(to_messages(rb, plan, opts))
                if len(pending) >= SEND_CHUNK_ROWS:
                    chunks.send(pending)
                    pending = []
            elif rb.num_rows:
                pending_batches.append(rb)
                pending_rows += rb.num_rows
                if pending_rows >= SEND_CHUNK_ROWS:
                    chunks.send_columns(pending_batches, plan)
                    pending_batches, pending_rows = [], 0
        if pending:
            chunks.send(pending)
        if pending_batches:
            chunks.send_columns(pending_batches, plan)
        return rows

    def commit(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
        mine = [m for m in messages if isinstance(m, SinkCommitMessage)]
        rows = sum(m.rows for m in mine)
        if not self.opts.exactly_once or not mine:
            log.info("orbitmq: batch %d wrote %d row(s) at least once", batch_id, rows)
            return
        with Session(self.opts.namesrv, self.opts.credentials, self.opts.tls) as session:
            session.run(self._commit(session, mine, batch_id), timeout=600.0)

    async def _commit(self, session: Session, mine: list[SinkCommitMessage], batch_id: int) -> None:
        opts, query_id = self.opts, mine[0].query_id
        marker = await cl.lookup_marker(session, opts.commit_topic, query_id, batch_id)
        sent = sorted(h for m in mine for h in m.halves)
        if marker is None:
            await cl.write_marker(session, opts.commit_topic, opts.producer_group, query_id,
                                  batch_id, uuid.uuid4().hex, sent)
            _fault_point("marker_written", batch_id)
            marker = await cl.lookup_marker(session, opts.commit_topic, query_id, batch_id)
            if marker is None:
                raise cl.CommitError(f"batch {batch_id}: the commit marker just written is not found")
        stray = [h for h in sent if h.msg_id not in marker.msg_ids]
        if stray:  # halves of an attempt that lost to an earlier marker: never to be delivered
            await cl.end_halves(session, opts.producer_group, opts.commit_topic, stray,
                                commit=False)
        listed = list(marker.halves)
        first, rest = listed[: len(listed) // 2], listed[len(listed) // 2:]
        failures = await cl.end_halves(session, opts.producer_group, opts.commit_topic, first,
                                       commit=True)
        _fault_point("half_committed", batch_id)
        failures += await cl.end_halves(session, opts.producer_group, opts.commit_topic, rest,
                                        commit=True)
        if failures:
            hint = ("; the brokers discarded them after their transaction checks: the query was "
                    "down longer than transactionCheckImmunitySeconds plus the brokers' check "
                    "window, and these rows are in TRANS_CHECK_MAX_TIME_TOPIC"
                    if any("discarded" in f for f in failures) else "")
            raise cl.CommitError(f"orbitmq: batch {batch_id} of query {query_id}: "
                                 f"{len(failures)} of {len(listed)} half messages not committed; "
                                 f"first: {failures[0]}{hint}")
        log.info("orbitmq: batch %d committed exactly once: %d row(s)", batch_id, len(listed))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
        mine = [m for m in messages if isinstance(m, SinkCommitMessage)]
        if not self.opts.exactly_once:
            log.warning("orbitmq: batch %d aborted; at-least-once rows already sent stay", batch_id)
            return
        with Session(self.opts.namesrv, self.opts.credentials, self.opts.tls) as session:
            session.run(self._abort(session, mine, batch_id), timeout=600.0)

    async def _abort(self, session: Session, mine: list[SinkCommitMessage], batch_id: int) -> None:
        opts = self.opts
        query_id = mine[0].query_id if mine else None
        marker = None
        if query_id is not None:
            marker = await cl.lookup_marker(session, opts.commit_topic, query_id, batch_id)
        keep = marker.msg_ids if marker is not None else frozenset()
        doomed = [h for m in mine for h in m.halves if h.msg_id not in keep]
        failures = await cl.end_halves(session, opts.producer_group, opts.commit_topic, doomed,
                                       commit=False)
        if query_id is not None and marker is None:
            await cl.write_abort_record(session, opts.commit_topic, opts.producer_group,
                                        query_id, batch_id, self.run)
        log.warning("orbitmq: batch %d aborted: %d half message(s) rolled back, %d failed "
                    "(the brokers' checks settle those)", batch_id, len(doomed) - len(failures),
                    len(failures))


def _task_ids(fallback_query: str) -> tuple[str, int, str]:
    """(query id, batch id, partition) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return fallback_query, 0, "0"
    query = ctx.getLocalProperty("sql.streaming.queryId") or fallback_query
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return query, int(batch) if batch is not None else 0, f"{ctx.partitionId()}.{ctx.attemptNumber()}"


class OrbitMQArrowWriter(DataSourceArrowWriter):
    """Batch writes: at-least-once, or all-or-nothing with ``exactlyOnce=true``."""

    def __init__(self, sink: _Sink) -> None:
        self.sink = sink
        self.job_id = f"job-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        _q, _b, partition = _task_ids(self.job_id)
        return self.sink.write(iterator, self.job_id, 0, partition)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.sink.commit(messages, 0)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.sink.abort(messages, 0)

    def __reduce__(self) -> tuple[Any, ...]:
        return ship(self)


class OrbitMQStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writes: exactly-once per micro-batch (at-least-once with ``exactlyOnce=false``)."""

    def __init__(self, sink: _Sink) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        query, batch, partition = _task_ids(f"run-{self.sink.run}")
        return self.sink.write(iterator, query, batch, partition)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self.sink.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        self.sink.abort(messages, batchId)

    def __reduce__(self) -> tuple[Any, ...]:
        return ship(self)


def _prepare(opts: WriteOptions, schema: StructType) -> _Sink:
    """The sink, after the driver's checks: the ``topic`` option names a topic that exists or
    that the brokers create on its first send (else one line naming it, before any task runs);
    exactly-once: the commit topic exists."""
    plan = plan_columns(schema, opts)
    if opts.topic is not None or opts.exactly_once:
        with Session(opts.namesrv, opts.credentials, opts.tls) as session:
            if opts.topic is not None:
                session.run(check_target_topic(session, opts.topic))
            if opts.exactly_once:
                session.run(cl.ensure_commit_topic(session, opts.commit_topic))
    return _Sink(opts, plan)


def make_batch_writer(opts: WriteOptions, schema: StructType) -> OrbitMQArrowWriter:
    return OrbitMQArrowWriter(_prepare(opts, schema))


def make_stream_writer(opts: WriteOptions, schema: StructType) -> OrbitMQStreamArrowWriter:
    return OrbitMQStreamArrowWriter(_prepare(opts, schema))
