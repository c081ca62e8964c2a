"""A consume queue read and written through mapped files (``store_type = default``, and the
hot queues of ``compact``): the per topic-queue index of 20-byte entries into the CommitLog.

Entry ``i`` (the message of queue offset ``i``) lies at byte ``i * 20`` of the queue's global
offset space: commit log offset i64 | size i32 | tags code i64. Only the dispatch thread writes;
readers take snapshots of the segment list. Retention raises ``min_offset`` when the CommitLog
segments its first entries point to are gone.

Invariants of ``put`` (asserted): entries are contiguous, entry ``i`` at byte ``i * 20`` and
written once (a re-dispatch of a stored entry is skipped, a gap filled with blanks first), and the
queue's max offset grows by exactly one entry per entry written.

Segment files are sparse (see MappedFile): a queue's disk use follows its entries, and every
entry's page is allocated before it is written, so a full disk makes ``put`` raise
StoreSpaceError (nothing written, retried by dispatch) instead of killing the broker. Past the
last entry a file reads as zeros, allocated or not, which is what recovery looks for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from orbitmq.errors import ClientError
from orbitmq.store.consume_queue import (
    BLANK_ENTRY_SIZE_FIELD,
    CQ_ENTRY,
    CQ_ENTRY_SIZE,
    ZERO_ENTRY,
    offset_by_time,
)
from orbitmq.store.file_ops import FileOps, StoreSpaceError
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.mapped_file_queue import MappedFileQueue

__all__ = ["MappedConsumeQueue"]

log = logging.getLogger(__name__)


class MappedConsumeQueue:
    """Entries of one (topic, queue id), through a MappedFileQueue of sparse segments."""

    def __init__(
        self, topic: str, queue_id: int, root: str, file_size: int, file_ops: FileOps
    ) -> None:
        if file_size % CQ_ENTRY_SIZE:
            raise ClientError(f"consume queue file size {file_size} is not a multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.topic_raw = topic.encode("utf-8")
        self.mfq = MappedFileQueue(os.path.join(root, topic, str(queue_id)), file_size, file_ops,
                                   sparse=True, lazy_dir_sync=True)
        self.min_offset = 0  # first readable queue offset
        self.max_phy_end = 0  # commit log offset just past the last entry's message
        self._first_pending = False  # the first segment exists but its first put did not finish

    # -- offsets --------------------------------------------------------------------------------

    @property
    def max_offset(self) -> int:
        """One past the last entry's queue offset."""
        return self.mfq.max_offset // CQ_ENTRY_SIZE

    def entry(self, index: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tags code) of entry ``index``; None when absent."""
        mf = self.mfq.find(index * CQ_ENTRY_SIZE)
        if mf is None:
            return None
        pos = index * CQ_ENTRY_SIZE - mf.file_from_offset
        if pos + CQ_ENTRY_SIZE > mf.wrote_position:
            return None
        try:
            return CQ_ENTRY.unpack_from(mf.view, pos)
        except ValueError:  # segment deleted meanwhile
            return None

    def entries_from(self, index: int, count_max: int) -> memoryview | None:
        """Raw entries from ``index`` to the end of its segment's written part (at most
        ``count_max``), or None when ``index`` is not stored."""
        mf = self.mfq.find(index * CQ_ENTRY_SIZE)
        if mf is None:
            return None
        pos = index * CQ_ENTRY_SIZE - mf.file_from_offset
        end = min(mf.wrote_position, pos + count_max * CQ_ENTRY_SIZE)
        if pos >= end:
            return None
        try:
            return mf.slice(pos, end - pos)
        except ValueError:
            return None

    def roll_next_index(self, index: int) -> int:
        """First queue offset of the segment after the one holding ``index``."""
        return self.mfq.roll_next_offset(index * CQ_ENTRY_SIZE) // CQ_ENTRY_SIZE

    # -- writing --------------------------------------------------------------------------------

    def put(self, phy_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Record the message of ``queue_offset``. A duplicate (re-dispatch after recovery) is
        skipped; a gap is filled with blank entries and logged. Returns False when skipped.

        Raises:
            StoreSpaceError: a segment or the space of the entry cannot be had; this entry was
                not written and the same put may be made again (blank entries of a gap written
                meanwhile stay: they are what the retry would write).
        """
        try:
            return self._put(phy_offset, size, tags_code, queue_offset)
        except OSError as e:
            raise StoreSpaceError(f"consume queue {self.topic}/{self.queue_id}", e) from e

    def put_run(self, first: int, entries: bytes) -> None:
        """``put`` of a run of entries for queue offsets ``first``, ``first + 1``... (20 bytes
        each, as stored): one copy when they follow the queue's last entry within its last
        segment, else one ``put`` each (a new segment, a gap, a re-dispatch).

        Raises:
            StoreSpaceError: as ``put``; the entries before the failing one stay written.
        """
        size = len(entries)
        files = self.mfq.files
        if files and not self._first_pending and size:
            mf = files[-1]
            pos = mf.wrote_position
            end = pos + size
            if mf.file_from_offset + pos == first * CQ_ENTRY_SIZE and end <= mf.file_size:
                if end > mf.allocated_to:
                    try:
                        mf.ensure_allocated(end)
                    except OSError as e:
                        raise StoreSpaceError(f"consume queue {self.topic}/{self.queue_id}", e) from e
                mf.buf[pos:end] = entries
                mf.wrote_position = end  # entries contiguous, each offset written once
                phy, last_size, _ = CQ_ENTRY.unpack_from(entries, size - CQ_ENTRY_SIZE)
                self.max_phy_end = phy + last_size
                return
        for i in range(size // CQ_ENTRY_SIZE):
            phy, entry_size, tags_code = CQ_ENTRY.unpack_from(entries, i * CQ_ENTRY_SIZE)
            self.put(phy, entry_size, tags_code, first + i)

    def _put(self, phy_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        expected = queue_offset * CQ_ENTRY_SIZE
        mfq = self.mfq
        if not mfq.files or self._first_pending:
            mf = mfq.files[-1] if mfq.files else mfq.last_file_for_append(expected)
            self._first_pending = True  # until the blanks before the first entry are written
            first = expected - mf.file_from_offset
            mf.ensure_allocated(first + CQ_ENTRY_SIZE)
            mf.reset_positions(first)
            self._fill_blank(mf, mf.file_from_offset, expected)
            self.min_offset = queue_offset
            self._first_pending = False
        current = mfq.max_offset
        if expected < current:
            return False
        if expected > current:
            log.error(
                "consume queue gap filled topic=%s queue=%d from=%d to=%d",
                self.topic, self.queue_id, current // 20, queue_offset,
            )
            while current < expected:
                self._put_raw(0, BLANK_ENTRY_SIZE_FIELD, 0, current)
                current += CQ_ENTRY_SIZE
        self._put_raw(phy_offset, size, tags_code, expected)
        self.max_phy_end = phy_offset + size
        return True

    def _put_raw(self, phy_offset: int, size: int, tags_code: int, at: int) -> None:
        """Write the entry whose byte offset in the queue is ``at`` (the next one)."""
        mf = self.mfq.last_file_for_append()
        pos = mf.wrote_position
        assert mf.file_from_offset + pos == at, "entries contiguous, each offset written once"
        if pos + CQ_ENTRY_SIZE > mf.allocated_to:
            mf.ensure_allocated(pos + CQ_ENTRY_SIZE)
        CQ_ENTRY.pack_into(mf.buf, pos, phy_offset, size, tags_code)
        mf.wrote_position = pos + CQ_ENTRY_SIZE

    @staticmethod
    def _fill_blank(mf: MappedFile, start: int, end: int) -> None:
        # Entries before a queue's first real one, as when RocketMQ creates a queue mid-way.
        blank = CQ_ENTRY.pack(0, BLANK_ENTRY_SIZE_FIELD, 0)
        for at in range(start - mf.file_from_offset, end - mf.file_from_offset, CQ_ENTRY_SIZE):
            mf.buf[at : at + CQ_ENTRY_SIZE] = blank

    def flush(self) -> int:
        """Sync the entries written so far (``sync_names`` makes a new segment's name durable)."""
        return self.mfq.flush()

    def sync_names(self) -> None:
        """See MappedFileQueue.sync_names: called after ``flush``, before a checkpoint."""
        self.mfq.sync_names()

    def release_cold_pages(self, hot_bytes: int = 64 * 1024) -> None:
        """MappedFile.release_pages below the newest ``hot_bytes`` of entries (3,276 by default:
        consumers read near the end, and an old page maps again when read)."""
        files = self.mfq.files
        for mf in files:
            mf.release_pages(mf.wrote_position - (hot_bytes if mf is files[-1] else 0))

    # -- recovery -------------------------------------------------------------------------------

    def load(self) -> None:
        self.mfq.load()

    def adopt(self, wrote_end: int, flushed_end: int, *, names_unsynced: bool,
              sync_failed: bool) -> None:
        """Take over a queue written so far by the compact access (compact_consume_queue.py)
        after ``load``: its one segment's positions set from the entries it holds
        (``wrote_end``) and has synced (``flushed_end``, global byte offsets), so that the next
        ``flush`` syncs the rest; a segment name not yet made durable and a failed sync are
        carried over too (the next ``sync_names`` syncs the directory, the next ``flush``
        marks the unsynced range dirty again before syncing it)."""
        files = self.mfq.files
        assert len(files) == 1, "a compact queue has exactly one segment"
        mf = files[0]
        assert mf.file_from_offset <= flushed_end <= wrote_end <= mf.file_from_offset + mf.file_size
        mf.reset_positions(wrote_end - mf.file_from_offset)
        mf.flushed_position = flushed_end - mf.file_from_offset
        mf.adopt_sync_failed(sync_failed)
        self.mfq.flushed_where = flushed_end
        if names_unsynced:
            self.mfq.mark_names_unsynced()

    def recover(self, cut: int, is_stored: Callable[[int, int, int], bool]) -> int:
        """Keep the entries that point below ``cut`` and whose message ``is_stored(index, phy,
        size)`` confirms; drop the rest. Returns how many entries were dropped.

        Valid entries form a prefix (they are written in order, and everything below the last
        checkpoint was synced), so a binary search finds the end even across whole segments of
        zeros or torn garbage, checking a handful of entries against the CommitLog. The search
        ends where the last segment's data ends: its sparse rest reads as zeros and is never
        probed (a probe into a hole costs a page fault, 2,000 queues of them seconds).
        """
        files = self.mfq.files
        if not files:
            return 0
        lo = files[0].file_from_offset // CQ_ENTRY_SIZE
        capacity = (files[-1].file_from_offset + self.mfq.file_size) // CQ_ENTRY_SIZE
        data_end = files[-1].file_from_offset + files[-1].data_end()
        hi = stored_end = min(capacity, max(lo, -(-data_end // CQ_ENTRY_SIZE)))
        first = lo

        def good(i: int) -> bool:
            mf = self.mfq.find(i * CQ_ENTRY_SIZE)
            assert mf is not None
            phy, size, _ = CQ_ENTRY.unpack_from(mf.buf, i * CQ_ENTRY_SIZE - mf.file_from_offset)
            if size == BLANK_ENTRY_SIZE_FIELD and phy == 0:
                return True
            return size > 0 and 0 <= phy < cut and is_stored(i, phy, size)

        while lo < hi:
            mid = (lo + hi) // 2
            if good(mid):
                lo = mid + 1
            else:
                hi = mid
        dropped = 0
        while lo + dropped < stored_end:  # non-zero entries past the cut (for the report)
            mf = self.mfq.find((lo + dropped) * CQ_ENTRY_SIZE)
            assert mf is not None
            at = (lo + dropped) * CQ_ENTRY_SIZE - mf.file_from_offset
            if mf.buf[at : at + CQ_ENTRY_SIZE] == ZERO_ENTRY:
                break
            dropped += 1
        self.mfq.truncate(lo * CQ_ENTRY_SIZE)
        self.max_phy_end = 0
        for i in range(lo - 1, first - 1, -1):
            found = self.entry(i)
            if found is not None and found[1] != BLANK_ENTRY_SIZE_FIELD:
                self.max_phy_end = found[0] + found[1]
                break
        self.min_offset = max(self.min_offset, first)
        return dropped

    # -- retention ------------------------------------------------------------------------------

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Raise ``min_offset`` to the first entry whose message is still in the CommitLog."""
        files = self.mfq.files
        if not files:
            return
        lo = max(self.min_offset, files[0].file_from_offset // CQ_ENTRY_SIZE)
        hi = self.max_offset
        while lo < hi:  # commit log offsets grow with queue offsets
            mid = (lo + hi) // 2
            found = self.entry(mid)
            if found is not None and (found[0] < min_phy_offset or found[1] == BLANK_ENTRY_SIZE_FIELD):
                lo = mid + 1
            else:
                hi = mid
        self.min_offset = lo

    def delete_expired(self, min_phy_offset: int, count_max: int = 10) -> int:
        """Delete leading segments whose every entry points below ``min_phy_offset``."""
        last_at = self.mfq.file_size - CQ_ENTRY_SIZE

        def expired(mf: MappedFile) -> bool:
            phy: int
            size: int
            phy, size, _ = CQ_ENTRY.unpack_from(mf.buf, last_at)
            return phy + size <= min_phy_offset or size == BLANK_ENTRY_SIZE_FIELD

        deleted = self.mfq.delete_first_files(expired, count_max)
        self.correct_min_offset(min_phy_offset)
        return deleted

    def offset_by_time(self, timestamp_ms: int, store_timestamp_at: Callable[[int], int]) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms`` (the max
        offset when every message is older)."""
        return offset_by_time(self.min_offset, self.max_offset, self.entry, timestamp_ms,
                              store_timestamp_at)

    def close(self) -> None:
        self.mfq.close()

    def destroy(self) -> None:
        self.mfq.destroy()
