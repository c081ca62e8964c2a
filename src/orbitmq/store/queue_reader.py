"""Reading a queue: RocketMQ's getMessage, turning queue offsets into raw commit log slices."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orbitmq.config import StoreConfig
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import BLANK_ENTRY_SIZE_FIELD, CQ_ENTRY, ConsumeQueue
from orbitmq.store.status import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageFilter

__all__ = ["read_queue"]

FILTER_ENTRIES_MIN = 800  # RocketMQ scans at least 16,000 bytes of queue entries per pull


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
    count = 0
    total = 0
    scanned = 0
    skip_below = -1  # commit log offsets in a segment found deleted
    removing = False
    last = -1
    run_start = run_end = -1  # the commit log range of buffers[-1] (with ``runs``)

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
        if message_filter is not None:
            if not message_filter.match_tags_code(tags_code):
                continue
        elif phy == run_end:  # the run goes on: no slice of its own
            run_end += size
            count += 1
            total += size
            last = phy
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
