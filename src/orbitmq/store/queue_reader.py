"""Reading a queue: RocketMQ's getMessage, turning queue offsets into raw commit log slices."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orbitmq.config import StoreConfig
from orbitmq.protocol import stored
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import (
    BLANK_ENTRY_SIZE_FIELD,
    CQ_ENTRY_UNSIGNED_SIZE,
    ConsumeQueue,
)
from orbitmq.store.message_filter import MessageFilter
from orbitmq.store.native import NATIVE
from orbitmq.store.status import GetMessageResult, GetMessageStatus

__all__ = ["read_queue"]

FILTER_ENTRIES_MIN = 800  # RocketMQ scans at least 16,000 bytes of queue entries per pull
_NO_RUN = 2**64  # where no message ends: no entry's offset (an int64) is it

# The Python path reads message by message and joins runs as it goes: a walk over the entries
# before the reads costs more in Python than it saves where messages do not lie back to back.
_RUNS_IN_C = NATIVE is not None


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
    check: bool = False,
    max_bytes: int | None = None,
) -> GetMessageResult:
    """Messages of ``cq`` from queue ``offset``; statuses and next offsets as RocketMQ's. A
    ``bulk`` read is bounded by ``bulk_pull_count_max`` / ``bulk_pull_bytes_max`` instead of the
    ``max_transfer_*_on_message_in_memory`` bounds (OrbitMQ's PULL_MESSAGE_BULK).

    With ``max_physical_end``, the read stops at the first entry whose message ends past that
    commit log offset: it is neither returned nor scanned over (so ``next_begin_offset`` never
    passes it), and ``held_back_end`` says where it ends. When it is the first entry, the answer
    is OFFSET_OVERFLOW_ONE at ``offset``, as if the queue ended there. The caller decides what
    the bound means (the broker's confirm offset in controller mode, docs/failover.md).

    ``max_bytes`` (the reader's own, a pull's maxMsgBytes) lowers the bytes bound further; as
    with every bytes bound the first message is returned whatever its size.

    With ``runs``, messages lying back to back in the commit log share one buffer (a pull's
    body is their concatenation either way): a batch producer's messages are, and a bulk pull
    of them then costs one slice and one iovec per run instead of per message.
    ``message_count`` still counts messages. Such a read, unfiltered or by tags, walks the
    entries in C; a SQL92 filter's is read message by message.

    With ``check``, every message read is checked before it is served (``stored.check_served``:
    layout, PHYSICALOFFSET, body CRC): the answer stops before the first one that fails, as if
    the queue ended there, and ``corrupt_at`` / ``corrupt_problem`` say where and why (the
    store decides what to do about it: message_store.py)."""
    if cq is None:
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    outside = _outside_the_queue(cq, offset)
    if outside is not None:
        return outside
    min_offset, max_offset = cq.min_offset, cq.max_offset
    entries = cq.entries_from(offset, max(FILTER_ENTRIES_MIN, max_msg_nums))
    if entries is None:
        return GetMessageResult(
            GetMessageStatus.OFFSET_FOUND_NULL, cq.roll_next_index(offset), min_offset, max_offset
        )
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    count_max, bytes_max = _transfer_limits(config, max_msg_nums, bulk)
    if max_bytes is not None:
        bytes_max = min(bytes_max, max_bytes)
    starts: list[int] | None = [] if check else None
    tags = None if message_filter is None else message_filter.tags_in_c
    if not (runs and _RUNS_IN_C and (message_filter is None or tags is not None)
            and _read_runs_in_c(result, entries, commit_log, count_max, bytes_max,
                                max_physical_end, starts, tags)):
        _read_one_by_one(result, entries, commit_log, message_filter, count_max, bytes_max,
                         max_physical_end, runs, starts)
    if starts is not None and result.buffers:
        _check_served(result, starts, entries, offset)
    return result


def _check_served(result: GetMessageResult, starts: list[int], entries: Any,
                  offset: int) -> None:
    """``result`` cut before its first message that fails ``stored.check_served`` (see
    ``read_queue``); ``starts[i]``: the commit log offset of ``result.buffers[i]``."""
    buffers = result.buffers
    for i, (raw, start) in enumerate(zip(buffers, starts, strict=True)):
        bad = stored.check_served(raw, start)
        if bad is None:
            continue
        corrupt_at = start + bad.position
        kept = buffers[:i]
        count = sum(_messages_in(b) for b in kept) + bad.messages_before
        last = start + bad.last_before if bad.last_before >= 0 else (
            starts[i - 1] + _last_message_at(buffers[i - 1]) if i else -1)
        if bad.position:
            kept.append(raw[:bad.position])
        result.buffers = kept
        result.message_count = count
        result.total_size = sum(len(b) for b in kept)
        result.last_commit_offset = last
        result.corrupt_at = corrupt_at
        result.corrupt_problem = bad.problem
        result.next_begin_offset = offset + _entry_index(entries, corrupt_at)
        if not kept:
            result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE
        return


def _messages_in(raw: memoryview | bytes) -> int:
    """Messages in a run that passed the checks."""
    pos = count = 0
    while pos < len(raw):
        pos += stored.total_size(raw, pos)
        count += 1
    return count


def _last_message_at(raw: memoryview | bytes) -> int:
    """Where the last message of a run that passed the checks starts."""
    pos = last = 0
    while pos < len(raw):
        last = pos
        pos += stored.total_size(raw, pos)
    return last


def _entry_index(entries: Any, phy: int) -> int:
    """The index among ``entries`` of the queue entry of the message at ``phy`` (the first
    entry at or past it: a queue's entries go up the commit log)."""
    for i, (entry_phy, _size, _tags) in enumerate(CQ_ENTRY_UNSIGNED_SIZE.iter_unpack(entries)):
        if entry_phy >= phy:
            return i
    return len(entries) // CQ_ENTRY_UNSIGNED_SIZE.size


def _outside_the_queue(cq: ConsumeQueue, offset: int) -> GetMessageResult | None:
    """The answer when ``offset`` is not a stored entry of ``cq`` (an empty queue, below its
    minimum, at or past its end), RocketMQ's statuses and corrected offsets; None when it is."""
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
    return None


def _transfer_limits(config: StoreConfig, max_msg_nums: int, bulk: bool) -> tuple[int, int]:
    """(messages, bytes) one read may return: the bulk pull's bounds for a ``bulk`` read, the
    ``max_transfer_*_on_message_in_memory`` bounds otherwise."""
    if bulk:
        return min(max_msg_nums, config.bulk_pull_count_max), config.bulk_pull_bytes_max
    return (min(max_msg_nums, config.max_transfer_count_on_message_in_memory),
            config.max_transfer_bytes_on_message_in_memory)


def _read_one_by_one(result: GetMessageResult, entries: Any, commit_log: CommitLog,
                     message_filter: MessageFilter | None, count_max: int, bytes_max: int,
                     max_physical_end: int | None, runs: bool,
                     starts: list[int] | None = None) -> None:
    """``result`` filled by reading ``entries`` message by message: filtered when a
    ``message_filter`` is given, stopped before the first message ending past
    ``max_physical_end``, and with ``runs`` joining back-to-back messages into one buffer;
    ``starts``, when given, gets the commit log offset of each buffer."""
    buffers = result.buffers
    read = commit_log.read
    total = scanned = count = 0
    skip_below = -1  # commit log offsets in a segment found deleted
    removing = False
    last = -1
    run_end = _NO_RUN  # where the kept message(s) of buffers[-1] end
    for phy, size, tags_code in CQ_ENTRY_UNSIGNED_SIZE.iter_unpack(entries):
        if count and (count >= count_max or total + size > bytes_max):
            break
        if size >= BLANK_ENTRY_SIZE_FIELD:  # blank, or damaged (a negative size): passed over
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
            raw = read(phy, size)
            if raw is not None and not message_filter.match_message(raw):
                continue
        if phy == run_end and runs and _join_run(buffers, read, phy, size):
            run_end += size
            count += 1
            total += size
            last = phy
            continue
        if message_filter is None:
            raw = read(phy, size)
        if raw is None:
            removing = not count
            skip_below = commit_log.roll_next_file(phy)
            continue
        buffers.append(raw)
        if starts is not None:
            starts.append(phy)
        run_end = phy + size
        count += 1
        total += size
        last = phy
    result.next_begin_offset += scanned
    result.last_commit_offset = last
    result.message_count = count
    result.total_size = total
    if buffers:
        result.status = GetMessageStatus.FOUND
    elif removing:
        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
    elif scanned == 0 and result.held_back_end >= 0:
        result.status = GetMessageStatus.OFFSET_OVERFLOW_ONE


def _join_run(buffers: list[memoryview | bytes],
              read: Callable[[int, int], memoryview | None], phy: int, size: int) -> bool:
    """The message at ``phy`` joined to ``buffers[-1]``, which ends right there: one slice for
    both; False, ``buffers`` untouched, when the joined slice cannot be read."""
    run_start = phy - len(buffers[-1])
    joined = read(run_start, phy + size - run_start)
    if joined is None:
        return False
    buffers[-1] = joined
    return True


def _run_slices(commit_log: CommitLog, runs: list[tuple[int, int]]) -> list[memoryview | bytes] | None:
    """The commit log's slice of each (offset, length) run; None when one is not all there."""
    slices: list[memoryview | bytes] = []
    for start, length in runs:
        raw = commit_log.read(start, length) if length > 0 else None
        if raw is None or len(raw) != length:
            return None
        slices.append(raw)
    return slices


def _read_runs_in_c(result: GetMessageResult, entries: Any, commit_log: CommitLog,
                    count_max: int, bytes_max: int, max_physical_end: int | None,
                    starts: list[int] | None = None,
                    tags: tuple[tuple[int, ...], tuple[bytes, ...]] | None = None) -> bool:
    """``result`` filled by a read in runs, the entries walked in C (``queue_runs``), then a
    slice a run; with ``tags`` (a TAG filter's ``tags_in_c``) only the entries of those tags
    codes, then every message of a run checked for its exact tag (``runs_tags_in``). False,
    ``result`` untouched, when an entry is damaged, a run is not all there or a message is not
    one of the tags: the read message by message tells what is, and answers the same
    (tests/unit/protocol/test_stored_twins.py)."""
    assert NATIVE is not None
    try:
        runs, scanned, count, total, last, held = NATIVE.queue_runs(
            entries, count_max, bytes_max, -1 if max_physical_end is None else max_physical_end,
            None if tags is None else tags[0])
    except ValueError:
        return False
    buffers = _run_slices(commit_log, runs)
    if buffers is None:
        return False
    if tags is not None:
        tags_in, names = NATIVE.runs_tags_in, tags[1]
        if not all(tags_in(raw, start, names)
                   for raw, (start, _length) in zip(buffers, runs, strict=True)):
            return False
    result.buffers = buffers
    if starts is not None:
        starts.extend(start for start, _length in runs)
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
