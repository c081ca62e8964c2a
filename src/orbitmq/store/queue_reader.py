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
    C twin (``NATIVE.queue_runs``) returns the same, and raises ValueError as here for an entry
    whose end is outside int64; bytes after the last whole entry are ignored."""
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
    count = 0
    total = 0
    scanned = 0
    skip_below = -1  # commit log offsets in a segment found deleted
    removing = False
    last = -1
    # With ``runs`` (a filtered read, or an unfiltered one whose runs were not all there),
    # the commit log range of buffers[-1]: kept messages lying back to back join it.
    run_start = run_end = -1

    def _message_by_message() -> GetMessageResult:  # a run's whole slice was not there
        return read_queue(cq, commit_log, offset, max_msg_nums, message_filter, config, bulk,
                          max_physical_end)

    for phy, size, tags_code in CQ_ENTRY.iter_unpack(entries):
        if count and (count >= count_max or total + size > bytes_max):
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
            removing = not count
            skip_below = commit_log.roll_next_file(phy)
            continue
        if message_filter is not None and not message_filter.match_message(raw):
            continue
        if phy == run_end:
            run_end += size
        else:
            if not _close_run(buffers, commit_log, run_start, run_end):
                return _message_by_message()
            buffers.append(raw)
            if runs:
                run_start, run_end = phy, phy + size
        count += 1
        total += size
        last = phy
    if not _close_run(buffers, commit_log, run_start, run_end):
        return _message_by_message()
    result.next_begin_offset = offset + scanned
    result.last_commit_offset = last
    result.message_count = count
    result.total_size = total
    if buffers:
        result.status = GetMessageStatus.FOUND
    elif removing:
        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
    elif scanned == 0 and result.held_back_end >= 0:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
    return result


def _close_run(buffers: list[memoryview | bytes], commit_log: CommitLog, start: int,
               end: int) -> bool:
    """Make ``buffers[-1]``, the first message of the run [start, end), the whole run; False
    when the commit log has no such slice (a run never crosses a segment's end, which always
    holds a blank entry, so this is not expected)."""
    if not buffers or end - start <= len(buffers[-1]):  # one message (or no run kept)
        return True
    whole = commit_log.read(start, end - start)
    if whole is None:
        return False
    buffers[-1] = whole
    return True


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
    buffers: list[memoryview | bytes] = []
    for start, length in runs:
        raw = commit_log.read(start, length) if length > 0 else None
        if raw is None or len(raw) != length:
            return False
        buffers.append(raw)
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
