"""Where a commit log can be cut: the last whole-entry boundary at or below an offset, and the
report of a cut. Shared by the operator's offline cut (truncate.py) and a running replica's
(replica_truncate.py)."""

from __future__ import annotations

import dataclasses

from orbitmq.protocol import stored
from orbitmq.protocol.stored import BLANK_ENTRY_SIZE
from orbitmq.store.mapped_file_queue import MappedFileQueue

__all__ = ["TruncateReport", "entry_boundary_at_or_below"]


@dataclasses.dataclass(frozen=True)
class TruncateReport:
    """``asked``: the offset given; ``cut``: the boundary the log was cut at (``asked`` or the
    start of the entry holding it); ``old_end`` / ``new_end``: where the log ended before and
    after; ``messages_dropped``: whole messages removed."""

    asked: int
    cut: int
    old_end: int
    new_end: int
    messages_dropped: int


def entry_boundary_at_or_below(mfq: MappedFileQueue, offset: int) -> tuple[int, int]:
    """(the last entry boundary <= ``offset``, messages from there to the log's end), walking
    the entries of the segment holding ``offset`` from its start."""
    end = mfq.max_offset
    if offset >= end:
        return end, 0
    mf = mfq.find(offset)
    if mf is None:  # below the oldest segment: everything goes
        return mfq.min_offset, _count_messages(mfq, mfq.min_offset, end)
    at = mf.file_from_offset
    while True:
        head = mf.view[at - mf.file_from_offset: at - mf.file_from_offset + BLANK_ENTRY_SIZE]
        size = stored.total_size(head)
        if size <= 0 or at + size > offset or stored.is_blank_entry(head):
            break
        at += size
    return at, _count_messages(mfq, at, end)


def _count_messages(mfq: MappedFileQueue, start: int, end: int) -> int:
    count = 0
    at = start
    while at < end:
        mf = mfq.find(at)
        if mf is None:
            break
        pos = at - mf.file_from_offset
        head = mf.view[pos:pos + BLANK_ENTRY_SIZE]
        size = stored.total_size(head)
        if stored.is_blank_entry(head):
            at = mf.file_from_offset + mf.file_size
            continue
        if size <= 0:
            break
        count += 1
        at += size
    return count
