"""Reading one queue range [start, end) on an executor, as Arrow RecordBatches in offset order.

Pulls are OrbitMQ's bulk pulls (``pull_raw(bulk=True)``: up to the broker's
``bulk_pull_count_max`` messages / ``bulk_pull_bytes_max`` bytes per answer, 8,192 and 4 MiB by
default; a RocketMQ broker answers PULL_MESSAGE's 32 instead). The range is cut into windows of
``WINDOW_OFFSETS`` offsets; up to ``WINDOWS_IN_FLIGHT`` windows are pulled at once on the
session's loop while this thread decodes the previous one (``decode.decode_body``: whole bodies
into Arrow columns). Each window is read with pulls from its first offset until the broker's
``nextBeginOffset`` passes its end, and rows at or past the end are dropped, so the rows of a
range never depend on how it was cut, on tag filtering, or on timing: a replayed range yields the
same rows.

A read of offset columns only (``ReadPlan.offsets_only``) pulls nothing: its rows are the
offsets of the range, after checking the queue's bounds.

Data loss (a range whose messages retention or a deleted queue removed) shows as an answer that
moves the offset forward (PULL_OFFSET_MOVED, MESSAGE_WAS_REMOVING), as a queue that ends before
the range does, or as bounds that no longer hold the range; :class:`DataLossError` names topic,
queue and offsets, or, with ``failOnDataLoss=false``, the gap is logged and skipped.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from orbitmq.client import PullStatus, RawPullResult
from orbitmq.errors import ClientError, RemoteProtocolError, SparkDataLossError, TopicNotFoundError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.spark.clients import Session, executor_session
from orbitmq.spark.decode import decode_body, offset_rows
from orbitmq.spark.offsets import QueueRange
from orbitmq.spark.options import ReadOptions
from orbitmq.spark.schema import ReadPlan

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DataLossError", "Gap", "read_range", "fetch_window", "data_loss_message"]

log = logging.getLogger(__name__)

WINDOW_OFFSETS = 8192
WINDOWS_IN_FLIGHT = 3
PULL_NUMS_MAX = 8192  # a bulk pull asks for the rest of its window, up to this
OFFSET_ROWS_MAX = 65_536  # rows per batch of an offsets-only read

DataLossError = SparkDataLossError  # the name the connector's users know


@dataclasses.dataclass(frozen=True, slots=True)
class Gap:
    """Offsets [start, end) of a queue that could not be read, and why."""

    start: int
    end: int
    reason: str


@dataclasses.dataclass
class Window:
    """What one window's pulls brought back: raw stored-message bodies and the gaps met."""

    start: int
    end: int
    bodies: list[bytes] = dataclasses.field(default_factory=list)
    gaps: list[Gap] = dataclasses.field(default_factory=list)


def data_loss_message(rng: QueueRange, gap: Gap) -> str:
    return (f"orbitmq: data loss on topic {rng.topic!r} queue {rng.key}: offsets "
            f"[{gap.start}, {gap.end}) are no longer stored ({gap.reason}); the query needed "
            f"[{rng.start}, {rng.end}). Set failOnDataLoss=false to skip lost messages.")


async def fetch_window(session: Session, opts: ReadOptions, rng: QueueRange,
                       start: int, end: int) -> Window:
    """Pull offsets [start, end) of ``rng``'s queue (see the module docstring) with the SDK's
    raw bulk pulls: the bodies stay undecoded for :func:`~orbitmq.spark.decode.decode_body`."""
    win = Window(start, end)
    puller = await session.puller(opts.consumer_group)
    mq = MessageQueue(rng.topic, rng.broker_name, rng.queue_id)
    try:
        await puller.instance.find_broker_addr(rng.broker_name, rng.topic, master_only=False)
    except ClientError:
        win.gaps.append(Gap(start, end, "the queue is no longer in the topic's route"))
        return win
    timeout = opts.pull_timeout_ms / 1000
    selector = opts.selector
    off = start
    while off < end:
        try:
            result = await puller.pull_raw(mq, off, min(PULL_NUMS_MAX, end - off), selector,
                                           timeout=timeout, bulk=True)
        except TopicNotFoundError:
            win.gaps.append(Gap(off, end, "the topic was deleted"))
            return win
        off = _step(win, result, off, end)
    return win


def _step(win: Window, result: RawPullResult, off: int, end: int) -> int:
    """Handle one pull answer; returns the next offset to pull (``end`` to stop)."""
    status, nxt = result.status, result.next_begin_offset
    if status is PullStatus.FOUND:
        win.bodies.append(result.body)
    elif status is PullStatus.NO_NEW_MSG:
        win.gaps.append(Gap(off, end, f"the queue now ends at offset {result.max_offset}"))
        return end
    elif status is PullStatus.OFFSET_ILLEGAL and nxt <= off:
        win.gaps.append(Gap(off, end, f"the queue now holds offsets [{result.min_offset}, "
                                      f"{result.max_offset})"))
        return end
    elif status is PullStatus.OFFSET_ILLEGAL or result.removed:
        why = "removed by retention" if result.removed else (
            f"the oldest stored offset is now {result.min_offset}")
        win.gaps.append(Gap(off, min(nxt, end), why))
    if nxt <= off:  # a broker must move on; never spin on the same offset
        raise RemoteProtocolError(f"broker answered a pull at offset {off} with nextBeginOffset "
                                  f"{nxt}")
    return nxt


def read_range(rng: QueueRange, opts: ReadOptions, plan: ReadPlan) -> Iterator[pa.RecordBatch]:
    """The rows of ``rng`` as RecordBatches of ``plan.schema``, in offset order.

    Raises:
        DataLossError: part of the range is gone and ``failOnDataLoss`` is true.
    """
    if plan.offsets_only:
        yield from _read_offsets(rng, opts, plan)
        return
    tags = opts.tag_set
    bounds = iter([(lo, min(lo + WINDOW_OFFSETS, rng.end))
                   for lo in range(rng.start, rng.end, WINDOW_OFFSETS)])
    with executor_session(opts.namesrv, opts.credentials, opts.tls) as session:
        pending: collections.deque[concurrent.futures.Future[Window]] = collections.deque()

        def top_up() -> None:
            while len(pending) < WINDOWS_IN_FLIGHT:
                nxt = next(bounds, None)
                if nxt is None:
                    return
                pending.append(session.submit(fetch_window(session, opts, rng, *nxt)))

        try:
            top_up()
            while pending:
                win = pending.popleft().result(opts.pull_timeout_ms / 1000 * 8)
                top_up()
                _report_gaps(rng, win.gaps, opts.fail_on_data_loss)
                for body in win.bodies:
                    batch = decode_body(body, rng.topic, rng.broker_name, win.end, plan, tags)
                    if batch is not None:
                        yield batch
        finally:
            for fut in pending:
                fut.cancel()


async def _queue_bounds(session: Session, opts: ReadOptions, rng: QueueRange) -> tuple[int, int]:
    puller = await session.puller(opts.consumer_group)
    mq = MessageQueue(rng.topic, rng.broker_name, rng.queue_id)
    try:
        return await puller.min_offset(mq), await puller.max_offset(mq)
    except (ClientError, TopicNotFoundError):
        return rng.start, rng.start  # the queue or its topic is gone: nothing of it is left


def _read_offsets(rng: QueueRange, opts: ReadOptions, plan: ReadPlan) -> Iterator[pa.RecordBatch]:
    """An offsets-only read: the range's offsets that the queue still holds, no pull made."""
    with executor_session(opts.namesrv, opts.credentials, opts.tls) as session:
        low, high = session.run(_queue_bounds(session, opts, rng), opts.pull_timeout_ms / 1000 * 2)
    gaps = []
    if low > rng.start:
        gaps.append(Gap(rng.start, min(low, rng.end), "removed by retention"))
    if high < rng.end:
        gaps.append(Gap(max(high, rng.start), rng.end, f"the queue now ends at offset {high}"))
    _report_gaps(rng, gaps, opts.fail_on_data_loss)
    lo, hi = max(rng.start, low), min(rng.end, high)
    for at in range(lo, hi, OFFSET_ROWS_MAX):
        yield offset_rows(rng.topic, rng.broker_name, rng.queue_id, at,
                          min(hi, at + OFFSET_ROWS_MAX), plan)


def _report_gaps(rng: QueueRange, gaps: list[Gap], fail: bool) -> None:
    for gap in gaps:
        if fail:
            raise DataLossError(data_loss_message(rng, gap))
        log.warning("%s; skipped (failOnDataLoss=false)", data_loss_message(rng, gap))
