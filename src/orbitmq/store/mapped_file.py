"""One fixed-size segment file, written in place through a mapped region.

A MappedFile knows two positions: ``wrote_position`` (bytes appended so far, all visible to readers)
and ``flushed_position`` (bytes made durable by a sync). Appends come from one writer at a time (the
owner serializes them); ``flush`` may run in another thread, and readers take memoryview slices.

A segment is created either fully allocated (the commit log: written sequentially and fast, its
blocks reserved up front) or sparse (consume queues: most of a 6 MB queue file is never used), in
which case the writer calls ``ensure_allocated`` before each write: space is allocated in steps
that double with the file's use (one page, then two... up to ``ALLOCATE_STEP_SIZE_MAX``), so a
queue holding one message costs one page of disk, and a busy queue one allocation per MiB. Below
``allocated_to`` every page has its blocks: a write there never meets a full disk (SIGBUS).
"""

from __future__ import annotations

import logging
import mmap
import sys
import threading

from orbitmq.store.file_ops import FileOps, MappedRegion

__all__ = ["MappedFile", "segment_name", "ZERO_CHUNK_SIZE", "ALLOCATE_STEP_SIZE_MAX"]

log = logging.getLogger(__name__)

ZERO_CHUNK_SIZE = 64 * 1024
ALLOCATE_STEP_SIZE_MAX = 1024 * 1024  # largest allocation step of a sparse segment: 52,428 entries
_PAGE = mmap.PAGESIZE
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)
# Linux moves a dirty page's state to the page cache when MADV_DONTNEED unmaps it from a shared
# file mapping (the sync writes it as before), so unsynced pages may be released too; elsewhere
# only synced ones are.
_RELEASE_DIRTY = sys.platform.startswith("linux")
_ZEROS = bytes(ZERO_CHUNK_SIZE)


def segment_name(offset: int) -> str:
    """RocketMQ's file name for a segment: its start offset on 20 digits."""
    return f"{offset:020d}"


class MappedFile:
    """A segment of a MappedFileQueue: ``file_from_offset`` is its first byte's global offset."""

    __slots__ = (
        "path",
        "file_from_offset",
        "file_size",
        "buf",
        "view",
        "wrote_position",
        "flushed_position",
        "destroyed",
        "allocated_to",
        "_region",
        "_io_lock",
        "_map_lock",
        "_sync_failed",
        "_cache_dropped_to",
    )

    def __init__(self, path: str, file_from_offset: int, file_size: int, region: MappedRegion,
                 *, allocated_to: int | None = None):
        self.path = path
        self.file_from_offset = file_from_offset
        self.file_size = file_size
        self._region = region
        self.buf = region.buf
        self.view = memoryview(region.buf)
        self.wrote_position = 0
        self.flushed_position = 0
        self.destroyed = False
        # Bytes below it are known to have blocks (the whole file unless it is sparse).
        self.allocated_to = file_size if allocated_to is None else allocated_to
        self._io_lock = threading.Lock()  # syncs against close
        # Populating and unmapping against close; apart from _io_lock so that neither waits for
        # a sync, which takes 100 ms and more on a busy segment.
        self._map_lock = threading.Lock()
        self._sync_failed = False  # the last sync raised: its pages may have been left clean
        self._cache_dropped_to = 0  # drop_cached has asked the kernel to drop pages below it

    @classmethod
    def open(
        cls, file_ops: FileOps, path: str, file_from_offset: int, file_size: int, *, create: bool,
        sparse: bool = False, sync_dir: bool = True,
    ) -> MappedFile:
        """Map an existing segment or create a zero-filled one (fully allocated, or ``sparse``;
        its name made durable at once unless not ``sync_dir``: see FileOps.open_region).

        A sparse segment, new or loaded, counts as unallocated up to its written part:
        ``ensure_allocated`` allocates from there before the next write.

        Raises:
            OSError: the file cannot be created or mapped.
        """
        region = file_ops.open_region(path, file_size, create=create, sparse=sparse,
                                      sync_dir=sync_dir)
        return cls(path, file_from_offset, file_size, region, allocated_to=0 if sparse else None)

    # -- writing --------------------------------------------------------------------------------

    @property
    def remaining(self) -> int:
        """Bytes still free."""
        return self.file_size - self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def ensure_allocated(self, end: int) -> None:
        """Make sure bytes below ``end`` have blocks before the writer stores into them: allocate
        the next step when ``end`` passes ``allocated_to`` (at least one page, at most
        ``ALLOCATE_STEP_SIZE_MAX``, about as much as is allocated already). Writer's thread only.

        What lies below ``wrote_position`` has blocks already (it was written after being
        allocated, and a page holding data is allocated whole), so the step starts there at the
        lowest: the region only ever allocates space that holds no data yet.

        Raises:
            OSError: the space cannot be allocated (ENOSPC...); nothing was written.
        """
        have = max(self.allocated_to, self.wrote_position)
        if end <= have:
            self.allocated_to = have
            return
        step = min(max(have, _PAGE), ALLOCATE_STEP_SIZE_MAX)
        target = max(end, have + step)
        target = min(-(-target // _PAGE) * _PAGE, self.file_size)
        self._region.allocate(have, target)
        self.allocated_to = target

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write ``data`` at the wrote position; returns the position it starts at."""
        pos = self.wrote_position
        end = pos + len(data)
        assert end <= self.file_size, "append past the end of a segment"
        self.buf[pos:end] = data
        self.wrote_position = end
        return pos

    def flush(self) -> int:
        """Sync everything written so far; returns the new flushed position.

        After a failed sync the unsynced range is made dirty again before the next try: Linux
        marks pages clean when their write-back fails, and a later fsync would then succeed
        without writing them, which would let acknowledged data be lost behind a success.

        Raises:
            OSError: the sync failed; ``flushed_position`` stays where it was.
        """
        with self._io_lock:
            if self.destroyed:
                return self.flushed_position
            end = self.wrote_position
            if end > self.flushed_position:
                if self._sync_failed:
                    self._region.mark_dirty(self.flushed_position, end)
                try:
                    self._region.sync(self.flushed_position, end)
                except OSError:
                    self._sync_failed = True
                    raise
                self._sync_failed = False
                self.flushed_position = end
            return end

    def release_pages(self, end: int, *, wait: bool = True) -> None:
        """Unmap this process's view of the pages below ``end`` (on Linux synced or not, else
        the synced ones): the page cache keeps them, dirty ones still to be synced, and a later
        read maps them again (a minor fault), so nothing is lost, but the broker's resident size
        counts the hot part of a segment instead of every page ever written, also between
        ASYNC_FLUSH's flushes at hundreds of MB/s. Only a real mapping (``mmap`` with madvise)
        does anything here. Without ``wait`` nothing is done while a warm step or the release
        thread holds the segment (the appender's own call: the release thread comes by later).
        A sync never holds it up (_map_lock)."""
        madvise = getattr(self.buf, "madvise", None)
        limit = end if _RELEASE_DIRTY else min(end, self.flushed_position)
        limit -= limit % _PAGE
        if madvise is None or _DONTNEED is None or limit <= 0:
            return
        if not self._map_lock.acquire(blocking=wait):
            return
        try:
            if not self.destroyed:
                madvise(_DONTNEED, 0, limit)  # shared file mapping: no data is discarded
        finally:
            self._map_lock.release()

    def drop_cached(self, end: int) -> None:
        """Unmap, then drop from the page cache, the synced pages below ``end`` not dropped
        before (see OsRegion.drop_cached): for pages no reader needs soon. A page mapped again
        by a reader meanwhile stays cached; it is not asked for twice."""
        limit = min(end, self.flushed_position)
        limit -= limit % _PAGE
        drop_cached = getattr(self._region, "drop_cached", None)
        if drop_cached is None or limit <= self._cache_dropped_to:
            return
        self.release_pages(limit)
        if not self.destroyed:  # no lock: a flush must not wait; a stale name drops nothing dirty
            drop_cached(self._cache_dropped_to, limit)
        self._cache_dropped_to = limit

    def populate(self, start: int, end: int) -> bool:
        """Fault [start, end) in ahead of the writer (see OsRegion.populate); False when the
        region cannot (not a real mapping, an old kernel) or the segment is gone."""
        populate = getattr(self._region, "populate", None)
        if populate is None:
            return False
        with self._map_lock:  # against close; callers go in small steps
            if self.destroyed:
                return False
            return bool(populate(start, min(end, self.file_size)))

    def sync_apart(self) -> bool:
        """Sync the file's written pages from a thread other than the writer's (see
        OsRegion.sync_apart), positions left as they are: the flushes own those. False when
        the region cannot, holds no descriptor for the writer, or the segment is gone.

        Raises:
            OSError: the sync failed; the writer's next ``flush`` marks its range dirty again
                (a failed write-back leaves the pages it tried clean, the writer's among them).
        """
        sync_apart = getattr(self._region, "sync_apart", None)
        if sync_apart is None:
            return False
        with self._map_lock:  # against close
            if self.destroyed:
                return False
            try:
                return bool(sync_apart())
            except OSError:
                self._sync_failed = True  # a flag, not _io_lock: that lock comes first (destroy)
                raise

    def hold_descriptor(self, hold: bool) -> None:
        """Have the region keep (or stop keeping) a descriptor open for its syncs (see
        OsRegion.hold_descriptor); nothing for a region that cannot, or a closed segment."""
        hold_descriptor = getattr(self._region, "hold_descriptor", None)
        if hold_descriptor is None:
            return
        with self._io_lock:
            if not self.destroyed or not hold:
                hold_descriptor(hold)

    def adopt_sync_failed(self, failed: bool) -> None:
        """Carry over a failed sync of the same file made elsewhere (a consume queue leaving its
        compact access): the next ``flush`` then marks its range dirty before syncing."""
        self._sync_failed = self._sync_failed or failed

    def reset_positions(self, position: int) -> None:
        """Set both positions (after loading, recovery has found where valid data ends)."""
        self.wrote_position = position
        self.flushed_position = position

    def zero_from(self, position: int) -> int:
        """Clear bytes from ``position`` to the end, so no stale entry can look valid later.

        Chunks that are already zero are left alone (the common case: the space was never used),
        and inside a chunk that is not, so are its zero pages: only pages holding data are
        written, and those have blocks, so clearing never needs space (a hole of a sparse file
        reads as zeros and is never touched). The cleared range is synced before returning.
        Returns how many bytes had to be cleared (whole pages: a measure of what was discarded,
        not an exact count).
        """
        cleared = 0
        buf = self.buf
        dirty_from = dirty_to = -1
        for lo, hi in self.data_ranges(position, self.file_size):  # holes read as zeros anyway
            at = lo
            while at < hi:
                end = min(at - at % ZERO_CHUNK_SIZE + ZERO_CHUNK_SIZE, hi)
                if buf[at:end] != _ZEROS[: end - at]:
                    page_at = at
                    while page_at < end:
                        page_end = min(page_at - page_at % _PAGE + _PAGE, end)
                        if buf[page_at:page_end] != _ZEROS[: page_end - page_at]:
                            buf[page_at:page_end] = _ZEROS[: page_end - page_at]
                            cleared += page_end - page_at
                            if dirty_from < 0:
                                dirty_from = page_at
                            dirty_to = page_end
                        page_at = page_end
                at = end
        if dirty_from >= 0:
            self._region.sync(dirty_from, dirty_to)
        return cleared

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """Ranges of [start, end) that may hold data (the rest are holes: zeros, unread)."""
        return self._region.data_ranges(start, end)

    def data_end(self) -> int:
        """One past the last byte that may hold data (0 for a file of holes): past it, the
        file reads as zeros."""
        ranges = self._region.data_ranges(0, self.file_size)
        return ranges[-1][1] if ranges else 0

    # -- reading --------------------------------------------------------------------------------

    def slice(self, position: int, size: int) -> memoryview:
        """A view of ``size`` bytes at ``position`` (no copy)."""
        return self.view[position : position + size]

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> bool:
        """Unmap; False if readers still hold slices (the caller keeps the object and retries)."""
        with self._io_lock, self._map_lock:
            self.destroyed = True
            try:
                self.view.release()
            except BufferError:  # something holds a buffer exported by the view itself
                return False
            return self._region.close()

    def destroy(self, file_ops: FileOps) -> bool:
        """Unmap and delete the file; returns ``close``'s answer (the file is gone either way)."""
        closed = self.close()
        file_ops.remove(self.path)
        log.info("segment destroyed path=%s", self.path)
        return closed

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.path!r}, from={self.file_from_offset}, wrote={self.wrote_position}, "
            f"flushed={self.flushed_position})"
        )
