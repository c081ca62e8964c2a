"""A consume queue for many small queues (``store_type = compact``): the same files as the mapped
access, written with pwrite and read with pread through a shared bounded FdCache.

Why: a mapped queue keeps at least one page of its file mapped once it holds a message (4 KiB,
plus page tables: about 8 KiB of broker RSS a queue, 10 MB per 1,000 queues of a few messages).
Here a queue holds no mapping, no buffer and no descriptor of its own: its entries live in the
page cache, which the broker's RSS does not count, and the queue object is a few slots.

A queue stays compact while its entries fit in the first ``bytes_max`` bytes of its first file
(a page by default: 204 entries; the blanks before a queue's first entry count). The write that
would pass it switches the queue to the mapped access for good (MappedConsumeQueue, which takes
over the same file: ``adopt``), so a hot queue pays a pread per pull only for its first couple
hundred messages, and afterwards runs exactly as under ``store_type = default``. At start a
queue whose data reaches past ``bytes_max`` (or spans more than one file) loads mapped at once.

The format being the same, a store written under either type starts under the other.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable

from orbitmq.store.consume_queue import (
    BLANK_ENTRY_SIZE_FIELD,
    CQ_ENTRY,
    CQ_ENTRY_SIZE,
    offset_by_time,
)
from orbitmq.store.fd_cache import FdCache
from orbitmq.store.file_mode import QueueDirs
from orbitmq.store.file_ops import FileOps, StoreSpaceError, file_data_ranges
from orbitmq.store.mapped_consume_queue import MappedConsumeQueue
from orbitmq.store.mapped_file import segment_name

__all__ = ["CompactConsumeQueue"]

log = logging.getLogger(__name__)

_BLANK = CQ_ENTRY.pack(0, BLANK_ENTRY_SIZE_FIELD, 0)
_PAGE = mmap.PAGESIZE


class CompactConsumeQueue:
    """Entries of one (topic, queue id) through pread/pwrite while few, mapped past ``bytes_max``.

    Args:
        root: the store's ``consumequeue`` directory.
        file_size: bytes of one queue file (``mapped_file_size_consume_queue``).
        fds: the store's descriptor cache, shared by every compact queue.
        bytes_max: bytes of entries the queue holds before it switches to the mapped access
            (at most ``file_size``: a compact queue has one file).
        dirs: makes new queues' directories (the store's, shared; None: one of its own).
    """

    __slots__ = ("topic", "queue_id", "_root", "_file_size", "_file_ops", "_fds", "_bytes_max",
                 "_from", "_wrote", "_flushed", "_min_offset", "_max_phy_end", "_mapped",
                 "_names_unsynced", "_sync_failed", "_dirs")

    def __init__(self, topic: str, queue_id: int, root: str, file_size: int, file_ops: FileOps,
                 fds: FdCache, bytes_max: int, dirs: QueueDirs | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self._root = root
        self._dirs = dirs if dirs is not None else QueueDirs(root)  # the store's, shared
        self._file_size = file_size
        self._file_ops = file_ops
        self._fds = fds
        self._bytes_max = min(bytes_max, file_size)
        self._from = -1  # global byte offset of the queue's one file; -1: no file yet
        self._wrote = 0  # bytes of the file holding entries (blanks included)
        self._flushed = 0  # bytes of the file synced
        self._min_offset = 0
        self._max_phy_end = 0
        self._mapped: MappedConsumeQueue | None = None  # set once the queue has switched
        self._names_unsynced = False  # the file was created and its directory not synced yet
        self._sync_failed = False

    # -- where ----------------------------------------------------------------------------------

    @property
    def mapped(self) -> MappedConsumeQueue | None:
        """The mapped access the queue has switched to, None while compact (tests, stats)."""
        return self._mapped

    def _dir(self) -> str:
        return os.path.join(self._root, self.topic, str(self.queue_id))

    def _path(self) -> str:
        return os.path.join(self._dir(), segment_name(self._from))

    @property
    def min_offset(self) -> int:
        m = self._mapped
        return self._min_offset if m is None else m.min_offset

    @min_offset.setter
    def min_offset(self, value: int) -> None:
        m = self._mapped
        if m is None:
            self._min_offset = value
        else:
            m.min_offset = value

    @property
    def max_phy_end(self) -> int:
        m = self._mapped
        return self._max_phy_end if m is None else m.max_phy_end

    @max_phy_end.setter
    def max_phy_end(self, value: int) -> None:
        m = self._mapped
        if m is None:
            self._max_phy_end = value
        else:
            m.max_phy_end = value

    @property
    def max_offset(self) -> int:
        """One past the last entry's queue offset."""
        m = self._mapped
        if m is not None:
            return m.max_offset
        frm = self._from
        return (frm + self._wrote) // CQ_ENTRY_SIZE if frm >= 0 else 0

    # -- reading --------------------------------------------------------------------------------

    def _read(self, size: int, at: int) -> bytes | None:
        try:
            return self._fds.pread(self, self._path, size, at)
        except FileNotFoundError:  # deleted with its topic meanwhile
            return None
        except OSError as e:
            log.warning("consume queue read failed topic=%s queue=%d err=%s",
                        self.topic, self.queue_id, e)
            return None

    def entry(self, index: int) -> tuple[int, int, int] | None:
        """(commit log offset, size, tags code) of entry ``index``; None when absent."""
        m = self._mapped
        if m is not None:
            return m.entry(index)
        frm = self._from
        at = index * CQ_ENTRY_SIZE - frm
        if frm < 0 or at < 0 or at + CQ_ENTRY_SIZE > self._wrote:
            return None
        raw = self._read(CQ_ENTRY_SIZE, at)
        if raw is None or len(raw) < CQ_ENTRY_SIZE:
            return None
        found: tuple[int, int, int] = CQ_ENTRY.unpack(raw)
        return found

    def entries_from(self, index: int, count_max: int) -> memoryview | bytes | None:
        """Raw entries from ``index`` to the last one (at most ``count_max``): one pread."""
        m = self._mapped
        if m is not None:
            return m.entries_from(index, count_max)
        frm = self._from
        at = index * CQ_ENTRY_SIZE - frm
        if frm < 0 or at < 0:
            return None
        end = min(self._wrote, at + count_max * CQ_ENTRY_SIZE)
        if at >= end:
            return None
        raw = self._read(end - at, at)
        if not raw:
            return None
        return raw[: len(raw) - len(raw) % CQ_ENTRY_SIZE] or None

    def roll_next_index(self, index: int) -> int:
        """First queue offset of the file after the one holding ``index``."""
        at = index * CQ_ENTRY_SIZE
        return (at + self._file_size - at % self._file_size) // CQ_ENTRY_SIZE

    # -- writing --------------------------------------------------------------------------------

    def put(self, phy_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Record the message of ``queue_offset`` (see ConsumeQueue.put); the put that would pass
        ``bytes_max`` switches the queue to the mapped access and is made there.

        Raises:
            StoreSpaceError: the entry (or its file) could not get its space; nothing of it was
                written that a retry would not write the same.
        """
        m = self._mapped
        if m is not None:
            return m.put(phy_offset, size, tags_code, queue_offset)
        expected = queue_offset * CQ_ENTRY_SIZE
        frm = self._from
        start = expected - expected % self._file_size if frm < 0 else frm
        current = start + self._wrote
        if expected < current:
            return False
        end = expected + CQ_ENTRY_SIZE - start
        if end > self._bytes_max:
            return self._to_mapped().put(phy_offset, size, tags_code, queue_offset)
        if frm >= 0 and expected > current:
            log.error("consume queue gap filled topic=%s queue=%d from=%d to=%d",
                      self.topic, self.queue_id, current // CQ_ENTRY_SIZE, queue_offset)
        data = _BLANK * ((expected - current) // CQ_ENTRY_SIZE) + CQ_ENTRY.pack(
            phy_offset, size, tags_code)
        self._write_at(start, data)
        if frm < 0:
            self._min_offset = queue_offset  # blanks before the first entry are not readable
        self._max_phy_end = phy_offset + size
        return True

    def put_run(self, first: int, entries: bytes) -> None:
        """``put`` of a run of entries (see ConsumeQueue.put_run): one pwrite when they follow
        the last entry, the whole run made mapped when it would pass ``bytes_max``."""
        m = self._mapped
        if m is not None:
            m.put_run(first, entries)
            return
        size = len(entries)
        if not size:
            return
        at = first * CQ_ENTRY_SIZE
        frm = self._from
        start = at - at % self._file_size if frm < 0 else frm
        if at + size - start > self._bytes_max:
            self._to_mapped().put_run(first, entries)
            return
        if frm < 0 or at == frm + self._wrote:  # a new queue's first run, or the next entries
            if frm < 0:  # blanks before the first entry, as ``put`` writes them
                self._write_at(start, _BLANK * ((at - start) // CQ_ENTRY_SIZE) + entries)
                self._min_offset = first
            else:
                self._write_at(frm, entries)
            phy, last_size, _ = CQ_ENTRY.unpack_from(entries, size - CQ_ENTRY_SIZE)
            self._max_phy_end = phy + last_size
            return
        for i in range(size // CQ_ENTRY_SIZE):
            phy, entry_size, tags_code = CQ_ENTRY.unpack_from(entries, i * CQ_ENTRY_SIZE)
            self.put(phy, entry_size, tags_code, first + i)

    def _write_at(self, start: int, data: bytes) -> None:
        """Write ``data`` at the written end of the file starting at global offset ``start``
        (created, sparse, when the queue has none yet); the positions move only once all of it
        is written, so a failed write is simply made again."""
        first = self._from < 0
        try:
            if first:
                self._create(start)
            self._fds.pwrite(self, self._path, data, self._wrote)
        except OSError as e:
            if first and self._from >= 0:  # the retry is a first put again (min_offset, blanks)
                self._fds.evict(self)
                self._from = -1
            raise StoreSpaceError(f"consume queue {self.topic}/{self.queue_id}", e) from e
        self._wrote += len(data)
        assert self._wrote <= self._bytes_max, "a compact queue's entries fit in bytes_max"

    def _create(self, start: int) -> None:
        """The queue's file, sparse and of the full size (MappedFileQueue loads it as its
        own); its name is made durable by ``sync_names`` (or the round's syncfs), before the
        checkpoint passes its first message, as a mapped queue's. On the dispatch thread, once
        per queue, so with the fewest system calls: the directory made with one ``mkdir``
        (QueueDirs), the file created with the mode known already, sized without asking its
        size first (a file a crash left shorter grows, a full one stays as it is), and its
        descriptor kept for the write that follows."""
        directory = self._dir()
        dirs = self._dirs
        dirs.make(directory)
        path = os.path.join(directory, segment_name(start))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, dirs.file_mode)
        try:
            os.ftruncate(fd, self._file_size)
        except BaseException:
            os.close(fd)
            raise
        self._fds.adopt(self, fd)
        self._from = start
        self._wrote = self._flushed = 0
        self._names_unsynced = True

    def _to_mapped(self) -> MappedConsumeQueue:
        """Switch to the mapped access for good: the file (if any) loaded and adopted with this
        queue's positions and state.

        Raises:
            StoreSpaceError: the file cannot be mapped; the queue stays compact (a retry
                switches again).
        """
        mapped = MappedConsumeQueue(self.topic, self.queue_id, self._root, self._file_size,
                                    self._file_ops)
        if self._from >= 0:
            try:
                mapped.load()
            except OSError as e:
                raise StoreSpaceError(f"consume queue {self.topic}/{self.queue_id}", e) from e
            mapped.adopt(self._from + self._wrote, self._from + self._flushed,
                         names_unsynced=self._names_unsynced, sync_failed=self._sync_failed)
            self._fds.evict(self)
        mapped.min_offset = self._min_offset
        mapped.max_phy_end = self._max_phy_end
        self._mapped = mapped
        log.debug("consume queue mapped topic=%s queue=%d", self.topic, self.queue_id)
        return mapped

    def flush(self) -> int:
        """Sync the entries written so far (fdatasync on a descriptor of its own, outside the
        cache's lock). After a failed sync the unsynced range is written again first: Linux
        marks pages clean when their write-back fails, and a later sync would then succeed
        without writing them.

        Raises:
            OSError: the sync failed; the flushed position stays where it was.
        """
        m = self._mapped
        if m is not None:
            return m.flush()
        frm = self._from
        if frm < 0:
            return 0
        end, flushed = self._wrote, self._flushed
        if end > flushed:
            fd = self._fds.dup(self, self._path)
            try:
                if self._sync_failed:
                    os.pwrite(fd, os.pread(fd, end - flushed, flushed), flushed)
                os.fdatasync(fd)
            except OSError:
                self._sync_failed = True
                raise
            finally:
                os.close(fd)
            self._sync_failed = False
            self._flushed = end
        return frm + self._flushed

    def sync_names(self) -> None:
        """Make the file's name durable once created (see MappedFileQueue.sync_names).

        Raises:
            OSError: the directory sync failed; the next call tries again.
        """
        m = self._mapped
        if m is not None:
            m.sync_names()
        elif self._names_unsynced:
            self._file_ops.sync_dir(self._dir())
            self._names_unsynced = False

    # -- a sync of the whole file system for many queues (fs_sync.py) -----------------------

    def fs_sync_mark(self) -> int | None:
        """The written end a sync of the file system started now would make durable, or None
        when there is nothing to sync or the queue syncs itself (switched to mapped, or after a
        failed sync: its own flush writes the range again first)."""
        if self._mapped is not None or self._from < 0 or self._sync_failed:
            return None
        if self._wrote <= self._flushed and not self._names_unsynced:
            return None
        return self._wrote

    def fs_synced(self, mark: int) -> None:
        """A sync of the file system started after ``fs_sync_mark`` gave ``mark`` succeeded."""
        if self._mapped is None:
            self._flushed = max(self._flushed, mark)
            self._names_unsynced = False

    def fs_sync_failed(self) -> None:
        """That sync failed: the kernel may have marked the pages clean, so the next own flush
        writes the unsynced range again."""
        self._sync_failed = True

    def release_cold_pages(self) -> None:
        """Nothing mapped, nothing to release (the mapped access's, once switched)."""
        m = self._mapped
        if m is not None:
            m.release_cold_pages()

    # -- recovery -------------------------------------------------------------------------------

    def load(self) -> None:
        """Find the queue's file: one file with no data past ``bytes_max`` stays compact,
        opened by no one until read; anything else (several files, a file of the wrong size,
        entries past ``bytes_max``: a queue that had switched) loads mapped.

        Raises:
            StoreError: as MappedFileQueue.load, for a queue loaded mapped.
        """
        directory = self._dir()
        names = [n for n in self._file_ops.listdir(directory) if len(n) == 20 and n.isdigit()]
        if len(names) == 1:
            path = os.path.join(directory, names[0])
            if self._file_ops.file_size(path) == self._file_size:
                data_end = _data_end(path, self._file_size, self._bytes_max)
                if data_end is not None:
                    self._from = int(names[0])
                    self._wrote = self._flushed = data_end
                    return
        if names:
            self._to_mapped_loaded()

    def _to_mapped_loaded(self) -> None:
        mapped = MappedConsumeQueue(self.topic, self.queue_id, self._root, self._file_size,
                                    self._file_ops)
        mapped.load()
        self._mapped = mapped

    def recover(self, cut: int, is_stored: Callable[[int, int, int], bool]) -> int:
        """Keep the entries pointing below ``cut`` that ``is_stored`` confirms, as
        MappedConsumeQueue.recover: a binary search over the file's data, read in one pread
        (a compact file's data is at most ``bytes_max``, rounded up to a page); entries past the
        end are cleared (and the clearing synced). Returns how many entries were dropped."""
        m = self._mapped
        if m is not None:
            return m.recover(cut, is_stored)
        frm = self._from
        if frm < 0:
            return 0
        # Nothing lies past bytes_max (load checked; writes stop there): one read covers it all.
        data = self._read(self._bytes_max - self._bytes_max % CQ_ENTRY_SIZE, 0) or b""
        first = lo = frm // CQ_ENTRY_SIZE
        stored_end = lo + len(data) // CQ_ENTRY_SIZE
        hi = lo + min(len(data), self._bytes_max) // CQ_ENTRY_SIZE  # never past what fits

        def good(i: int) -> bool:
            phy, size, _ = CQ_ENTRY.unpack_from(data, i * CQ_ENTRY_SIZE - frm)
            if size == BLANK_ENTRY_SIZE_FIELD and phy == 0:
                return True
            return size > 0 and 0 <= phy < cut and is_stored(i, phy, size)

        while lo < hi:
            mid = (lo + hi) // 2
            if good(mid):
                lo = mid + 1
            else:
                hi = mid
        keep = lo * CQ_ENTRY_SIZE - frm
        dropped = 0
        while lo + dropped < stored_end and any(
                data[keep + dropped * CQ_ENTRY_SIZE: keep + (dropped + 1) * CQ_ENTRY_SIZE]):
            dropped += 1
        data_end = len(data.rstrip(b"\0"))
        if data_end > keep:
            self._clear(keep, data_end)
        self._wrote = self._flushed = keep
        self._max_phy_end = 0
        for at in range(keep - CQ_ENTRY_SIZE, -1, -CQ_ENTRY_SIZE):
            phy, size, _ = CQ_ENTRY.unpack_from(data, at)
            if size != BLANK_ENTRY_SIZE_FIELD:
                self._max_phy_end = phy + size
                break
        self._min_offset = max(self._min_offset, first)
        return dropped

    def _clear(self, start: int, end: int) -> None:
        """Zero [start, end) of the file (bytes that hold data, so no space is needed), synced:
        no stale entry may look valid after the next crash."""
        fd = self._fds.dup(self, self._path)
        try:
            os.pwrite(fd, bytes(end - start), start)
            os.fdatasync(fd)
        finally:
            os.close(fd)

    # -- retention ------------------------------------------------------------------------------

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Raise ``min_offset`` to the first entry whose message is still in the CommitLog."""
        m = self._mapped
        if m is not None:
            m.correct_min_offset(min_phy_offset)
            return
        if self._from < 0:
            return
        lo = max(self._min_offset, self._from // CQ_ENTRY_SIZE)
        hi = self.max_offset
        found = self.entry(lo) if lo < hi else None
        if found is not None and found[0] >= min_phy_offset and found[1] != BLANK_ENTRY_SIZE_FIELD:
            self._min_offset = lo  # the common case, one read (at every start, for every queue)
            return
        while lo < hi:  # commit log offsets grow with queue offsets
            mid = (lo + hi) // 2
            found = self.entry(mid)
            if found is not None and (found[0] < min_phy_offset
                                      or found[1] == BLANK_ENTRY_SIZE_FIELD):
                lo = mid + 1
            else:
                hi = mid
        self._min_offset = lo

    def delete_expired(self, min_phy_offset: int, count_max: int = 10) -> int:
        """A compact queue has one file, and the last file is never deleted: only
        ``min_offset`` moves."""
        m = self._mapped
        if m is not None:
            return m.delete_expired(min_phy_offset, count_max)
        self.correct_min_offset(min_phy_offset)
        return 0

    def offset_by_time(self, timestamp_ms: int, store_timestamp_at: Callable[[int], int]) -> int:
        """First queue offset whose message was stored at or after ``timestamp_ms``."""
        m = self._mapped
        if m is not None:
            return m.offset_by_time(timestamp_ms, store_timestamp_at)
        return offset_by_time(self._min_offset, self.max_offset, self.entry, timestamp_ms,
                              store_timestamp_at)

    def close(self) -> None:
        m = self._mapped
        if m is not None:
            m.close()
        self._fds.evict(self)

    def destroy(self) -> None:
        m = self._mapped
        self._fds.evict(self)
        if m is not None:
            m.destroy()
            return
        self._file_ops.remove_tree(self._dir())


def _data_end(path: str, file_size: int, fit: int) -> int | None:
    """One past the last byte of the file that may hold data (0: all holes), rounded up to whole
    entries; None when non-zero bytes lie past the last whole entry of ``fit`` (bytes_max), or
    the file cannot be read (then the mapped access loads it and says why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        ranges = file_data_ranges(fd, 0, file_size)
        end = ranges[-1][1] if ranges else 0
        fit -= fit % CQ_ENTRY_SIZE
        if end > fit:
            # The file system's unit is a block (a page): the rest of the last one is zeros
            # unless the queue had switched to mapped (or a torn write left garbage there).
            if end - fit > _PAGE or any(os.pread(fd, end - fit, fit)):
                return None
            end = fit
    finally:
        os.close(fd)
    return -(-end // CQ_ENTRY_SIZE) * CQ_ENTRY_SIZE
