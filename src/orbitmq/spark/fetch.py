"""Reading one queue range [start, end) on an executor, as Arrow RecordBatches in offset order.

A broker answers a pull with at most ``max_transfer_count_on_message_in_memory`` messages (32 by
default, RocketMQ's value), so one pull at a time leaves the broker and the client mostly waiting.
The range is cut into windows of ``WINDOW_OFFSETS`` offsets; up to ``WINDOWS_IN_FLIGHT`` windows are
pulled at once on the session's loop while this thread decodes the previous one. Each window is
read with pulls from its first offset until the broker's ``nextBeginOffset`` passes its end, and
rows at or past the end are dropped, so the rows of a range never depend on how it was cut, on
tag filtering, or on timing: a replayed range yields the same rows.

Data loss (a range whose messages retention or a deleted queue removed) shows as an answer that
moves the offset forward (PULL_OFFSET_MOVED, MESSAGE_WAS_REMOVING) or as a queue that ends before
the range does; :class:`DataLossError` names topic, queue and offsets, or, with
``failOnDataLoss=false``, the gap is logged and skipped.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from orbitmq.client.results import PullStatus, RawPullResult
from orbitmq.errors import ClientError, RemoteProtocolError, SparkDataLossError, TopicNotFoundError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.spark.clients import Session, executor_session
from orbitmq.spark.decode import Columns, decode_into
from orbitmq.spark.offsets import QueueRange
from orbitmq.spark.options import ReadOptions

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["DataLossError", "Gap", "read_range", "fetch_window", "data_loss_message"]

log = logging.getLogger(__name__)

WINDOW_OFFSETS = 4096
WINDOWS_IN_FLIGHT = 4
PULL_NUMS_MAX = 1024

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
    raw pulls: the bodies stay undecoded for :func:`~orbitmq.spark.decode.decode_into`."""
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
                                           timeout=timeout)
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


def read_range(rng: QueueRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The rows of ``rng`` as RecordBatches of the read schema, in offset order.

    Raises:
        DataLossError: part of the range is gone and ``failOnDataLoss`` is true.
    """
    from orbitmq.spark.schema import to_record_batch

    tags = opts.tag_set
    bounds = iter([(lo, min(lo + WINDOW_OFFSETS, rng.end))
                   for lo in range(rng.start, rng.end, WINDOW_OFFSETS)])
    with executor_session(opts.namesrv) as session:
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
                cols = Columns(opts.include_properties)
                for body in win.bodies:
                    decode_into(cols, body, rng.broker_name, win.end, tags)
                if len(cols):
                    yield to_record_batch(cols)
        finally:
            for fut in pending:
                fut.cancel()


def _report_gaps(rng: QueueRange, gaps: list[Gap], fail: bool) -> None:
    for gap in gaps:
        if fail:
            raise DataLossError(data_loss_message(rng, gap))
        log.warning("%s; skipped (failOnDataLoss=false)", data_loss_message(rng, gap))
