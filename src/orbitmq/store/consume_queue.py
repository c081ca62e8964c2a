"""A ConsumeQueue: the per topic-queue index of 20-byte entries into the CommitLog, what every
caller sees of it, whichever access is behind it.

Entry ``i`` (the message of queue offset ``i``) lies at byte ``i * 20`` of the queue's global
offset space: commit log offset i64 | size i32 | tags code i64, in files of
``mapped_file_size_consume_queue`` bytes named by their first byte's offset (RocketMQ's layout).
Only the dispatch thread writes; readers may read from any thread.

Two accesses keep that same format (a store may restart under either ``store_type``):

- ``mapped_consume_queue.MappedConsumeQueue`` (``store_type = default``): each file mapped;
  the fastest for busy queues, but every queue holding a message keeps at least one mapped page
  (4 KiB of RSS, 8 KiB with the page tables) however few entries it has.
- ``compact_consume_queue.CompactConsumeQueue`` (``store_type = compact``): a small queue's
  entries written with pwrite and read with pread through a bounded cache of descriptors (no
  mapping, so no page in the broker's RSS), the queue switching to the mapped access for good
  once its entries pass ``compact_queue_bytes_max``: hot queues keep today's layout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Protocol

__all__ = ["ConsumeQueue", "CQ_ENTRY", "CQ_ENTRY_UNSIGNED_SIZE", "CQ_ENTRY_SIZE",
           "BLANK_ENTRY_SIZE_FIELD", "ZERO_ENTRY", "offset_by_time"]

CQ_ENTRY = struct.Struct(">qiq")
# The same, the size read unsigned: a damaged entry's negative size reads as 2^31 or more, so
# one comparison with the blank's size passes over both (store/queue_reader.py).
CQ_ENTRY_UNSIGNED_SIZE = struct.Struct(">qIq")
CQ_ENTRY_SIZE = 20
BLANK_ENTRY_SIZE_FIELD = 0x7FFFFFFF  # size of a filler entry (RocketMQ's blank), never read
ZERO_ENTRY = bytes(CQ_ENTRY_SIZE)  # what the file holds past the last entry


class ConsumeQueue(Protocol):
    """The entries of one (topic, queue id); see the module docstring for the two accesses.

    Invariants of ``put`` (asserted by the accesses): entries are contiguous, entry ``i`` at
    byte ``i * 20`` and written once (a re-dispatch of a stored entry is skipped, a gap filled
    with blanks first), and the max offset grows by exactly one entry per entry written.
    """

    topic: str
    queue_id: int
    min_offset: int  # first readable queue offset; retention raises it
    max_phy_end: int  # commit log offset just past the last entry's message

    @property
    def max_offset(self) -> int:
        """One past the last entry's queue offset."""

    def entry(self, index: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tags code) of entry ``index``; None when absent."""

    def entries_from(self, index: int, count_max: int) -> memoryview | bytes | None:
        """Raw entries from ``index`` to the end of its segment's written part (at most
        ``count_max``), or None when ``index`` is not stored."""

    def roll_next_index(self, index: int) -> int:
        """First queue offset of the segment after the one holding ``index``."""

    def put(self, phy_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Record the message of ``queue_offset``; False when it was there already.

        Raises:
            StoreSpaceError: the entry could not get its space; the same put may be made again.
        """

    def put_run(self, first: int, entries: bytes) -> None:
        """``put`` of 20-byte entries for queue offsets ``first``, ``first + 1``...

        Raises:
            StoreSpaceError: as ``put``; the entries before the failing one stay written.
        """

    def flush(self) -> int:
        """Sync the entries written so far; returns the byte offset synced to."""

    def sync_names(self) -> None:
        """Make the names of files created since the last call durable (before a checkpoint)."""

    def release_cold_pages(self) -> None:
        """Unmap the process's view of old entries (nothing to do without a mapping)."""

    def load(self) -> None:
        """Open the queue's files found on disk (at start, before ``recover``)."""

    def recover(self, cut: int, is_stored: Callable[[int, int, int], bool]) -> int:
        """Keep the entries that point below ``cut`` and whose message ``is_stored(index, phy,
        size)`` confirms; drop the rest. Returns how many entries were dropped."""

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Raise ``min_offset`` to the first entry whose message is still in the CommitLog."""

    def delete_expired(self, min_phy_offset: int, count_max: int = 10) -> int:
        """Delete leading files whose every entry points below ``min_phy_offset``."""

    def offset_by_time(self, timestamp_ms: int, store_timestamp_at: Callable[[int], int]) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms``."""

    def close(self) -> None:
        """Release the queue's mappings or descriptors (files stay)."""

    def destroy(self) -> None:
        """Delete the queue's files and directory."""


def offset_by_time(lo: int, hi: int, entry: Callable[[int], tuple[int, int, int] | None],
                   timestamp_ms: int, store_timestamp_at: Callable[[int], int]) -> int:
    """The first queue offset in ``[lo, hi)`` whose message was stored at or after
    ``timestamp_ms`` (``hi`` when every one is older): a binary search, store times growing
    with queue offsets; ``entry`` reads an entry, ``store_timestamp_at`` a message's store
    time by its commit log offset."""
    while lo < hi:
        mid = (lo + hi) // 2
        found = entry(mid)
        ts = -1 if found is None else store_timestamp_at(found[0])
        if ts < timestamp_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo
