"""Reading a queue: RocketMQ's getMessage, turning queue offsets into raw commit log slices."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orbitmq.config import StoreConfig
from orbitmq.protocol.native import NATIVE
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import (
    BLANK_ENTRY_SIZE_FIELD,
    CQ_ENTRY,
    CQ_ENTRY_SIZE,
    ConsumeQueue,
)
from orbitmq.store.status import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageFilter

__all__ = ["read_queue", "queue_runs", "queue_runs_py"]

FILTER_ENTRIES_MIN = 800  # RocketMQ scans at least 16,000 bytes of queue entries per pull
_OFFSET_MAX = 2**63 - 1

Walk = tuple[list[tuple[int, int]], int, int, int, int, int]


def queue_runs_py(entries: Any, count_max: int, bytes_max: int, max_physical_end: int) -> Walk:
    """An unfiltered read's walk over queue entries: (runs, scanned, count, total, last,
    held_back_end), ``runs`` the (commit log offset, length) of each run of messages lying back
    to back, the rest as ``read_queue`` counts them; ``max_physical_end`` < 0 for none. The
    C twin (``NATIVE.queue_runs``) returns the same, and raises ValueError as here for a damaged
    entry (a negative offset, or an end outside int64); bytes after the last whole entry are
    ignored."""
    runs: list[tuple[int, int]] = []
    scanned = count = total = 0
    last = held = run_start = run_end = -1
    view = memoryview(entries)
    whole = view[: len(view) - len(view) % CQ_ENTRY_SIZE]
    for i, (phy, size, _tags) in enumerate(CQ_ENTRY.iter_unpack(whole)):
        if count and (count >= count_max or total + size > bytes_max):
            break
        if size == BLANK_ENTRY_SIZE_FIELD:
            scanned += 1
            continue
        if phy < 0:
            raise ValueError(f"queue entry {i}: negative offset {phy}")
        end = phy + size
        if not -_OFFSET_MAX - 1 <= end <= _OFFSET_MAX:
            raise ValueError(f"queue entry {i}: offset {phy} + size {size} overflows")
        if 0 <= max_physical_end < end:
            held = end
            break
        scanned += 1
        if phy == run_end:
            run_end = end
        else:
            if run_end >= 0:
                runs.append((run_start, run_end - run_start))
            run_start, run_end = phy, end
        count += 1
        total += size
        last = phy
    if run_end >= 0:
        runs.append((run_start, run_end - run_start))
    return runs, scanned, count, total, last, held


queue_runs: Callable[[Any, int, int, int], Walk] = (
    NATIVE.queue_runs if NATIVE is not None else queue_runs_py)


def read_queue(
    cq: ConsumeQueue | None,
    commit_log: CommitLog,
    offset: int,
    max_msg_nums: int,
    message_filter: MessageFilter | None,
    config: StoreConfig,
    bulk: bool = False,
    max_physical_end: int | None = None,
    runs: bool = False,
) -> GetMessageResult:
    """Messages of ``cq`` from queue ``offset``; statuses and next offsets as RocketMQ's. A
    ``bulk`` read is bounded by ``bulk_pull_count_max`` / ``bulk_pull_bytes_max`` instead of the
    ``max_transfer_*_on_message_in_memory`` bounds (OrbitMQ's PULL_MESSAGE_BULK).

    With ``max_physical_end``, the read stops at the first entry whose message ends past that
    commit log offset: it is neither returned nor scanned over (so ``next_begin_offset`` never
    passes it), and ``held_back_end`` says where it ends. When it is the first entry, the answer
    is OFFSET_OVERFLOW_ONE at ``offset``, as if the queue ended there. The caller decides what
    the bound means (the broker's confirm offset in controller mode, docs/failover.md).

    With ``runs``, messages lying back to back in the commit log share one buffer (a pull's
    body is their concatenation either way): a batch producer's messages are, and a bulk pull
    of them then costs one slice and one iovec per run instead of per message.
    ``message_count`` still counts messages."""
    if cq is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset, max_offset = cq.min_offset, cq.max_offset
    if max_offset == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return GetMessageResult(
            GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset
        )
    if offset == max_offset:
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        corrected = min_offset if min_offset == 0 else max_offset
        return GetMessageResult(
            GetMessageStatus.OFFSET_OVERFLOW_BADLY, corrected, min_offset, max_offset
        )
    entries = cq.entries_from(offset, max(FILTER_ENTRIES_MIN, max_msg_nums))
    if entries is None:
        return GetMessageResult(
            GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_index(offset), min_offset, max_offset
        )
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    buffers = result.buffers
    if bulk:
        count_max = min(max_msg_nums, config.bulk_pull_count_max)
        bytes_max = config.bulk_pull_bytes_max
    else:
        count_max = min(max_msg_nums, config.max_transfer_count_on_message_in_memory)
        bytes_max = config.max_transfer_bytes_on_message_in_memory
    if runs and message_filter is None and _read_runs(result, entries, commit_log, count_max,
                                                      bytes_max, max_physical_end):
        return result
    total = 0
    scanned = 0
    skip_below = -1  # commit log offsets in a segment found deleted
    removing = False
    last = -1
    starts: list[int] = []  # with ``runs``: where each kept message starts
    for phy, size, tags_code in CQ_ENTRY.iter_unpack(entries):
        if buffers and (len(buffers) >= count_max or total + size > bytes_max):
            break
        if size == BLANK_ENTRY_SIZE_FIELD:
            scanned += 1
            continue
        if max_physical_end is not None and phy + size > max_physical_end:
            result.held_back_end = phy + size
            break
        scanned += 1
        if phy < skip_below:
            continue
        if message_filter is not None and not message_filter.match_tags_code(tags_code):
            continue
        raw = commit_log.read(phy, size)
        if raw is None:
            removing = not buffers
            skip_below = commit_log.roll_next_file(phy)
            continue
        if message_filter is not None and not message_filter.match_message(raw):
            continue
        buffers.append(raw)
        if runs:
            starts.append(phy)
        total += size
        last = phy
    result.next_begin_offset = offset + scanned
    result.last_commit_offset = last
    result.message_count = len(buffers)
    result.total_size = total
    if buffers:
        result.status = GetMessageStatus.FOUND
        if runs:
            result.buffers = _joined(buffers, starts, commit_log)
    elif removing:
        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
    elif scanned == 0 and result.held_back_end >= 0:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
    return result


def _joined(buffers: list[memoryview | bytes], starts: list[int],
            commit_log: CommitLog) -> list[memoryview | bytes]:
    """``buffers`` (messages at commit log offsets ``starts``) with those lying back to back
    joined into one slice each run; ``buffers`` as they are when none do, or when a run's whole
    slice is not there (a run never crosses a segment's end, which always holds a blank entry,
    so that is not expected)."""
    runs: list[tuple[int, int]] = []
    for phy, raw in zip(starts, buffers, strict=True):
        if runs and runs[-1][0] + runs[-1][1] == phy:
            runs[-1] = (runs[-1][0], runs[-1][1] + len(raw))
        else:
            runs.append((phy, len(raw)))
    if len(runs) == len(buffers):
        return buffers
    slices = _run_slices(commit_log, runs)
    return buffers if slices is None else slices


def _run_slices(commit_log: CommitLog, runs: list[tuple[int, int]]) -> list[memoryview | bytes] | None:
    """The commit log's slice of each (offset, length) run; None when one is not all there."""
    slices: list[memoryview | bytes] = []
    for start, length in runs:
        raw = commit_log.read(start, length) if length > 0 else None
        if raw is None or len(raw) != length:
            return None
        slices.append(raw)
    return slices


def _read_runs(result: GetMessageResult, entries: Any, commit_log: CommitLog, count_max: int,
               bytes_max: int, max_physical_end: int | None) -> bool:
    """``result`` filled by an unfiltered read in runs (``queue_runs``, the C walk when built);
    False, ``result`` untouched, when a run is not all there (a segment deleted meanwhile, a
    damaged entry): the caller's message-by-message read tells what is."""
    try:
        runs, scanned, count, total, last, held = queue_runs(
            entries, count_max, bytes_max, -1 if max_physical_end is None else max_physical_end)
    except ValueError:
        return False
    buffers = _run_slices(commit_log, runs)
    if buffers is None:
        return False
    result.buffers = buffers
    result.next_begin_offset += scanned
    result.last_commit_offset = last
    result.message_count = count
    result.total_size = total
    result.held_back_end = held
    if buffers:
        result.status = GetMessageStatus.FOUND
    elif scanned == 0 and held >= 0:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
    return True
