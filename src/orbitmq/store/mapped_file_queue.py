"""An ordered list of equal-sized segments addressed by one global offset.

Segments are named by their start offset (20 digits) and follow each other without gaps:
segment ``k`` starts at ``first.file_from_offset + k * file_size``, so finding the segment of an
offset is arithmetic. The list is replaced, never mutated, so readers can use a snapshot without a
lock while a writer appends a segment or the clean service drops the oldest.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from orbitmq.errors import StoreError
from orbitmq.store.file_ops import FileOps
from orbitmq.store.mapped_file import MappedFile, segment_name

__all__ = ["MappedFileQueue"]

log = logging.getLogger(__name__)


class MappedFileQueue:
    """Segments of one log (the commit log, or one consume queue).

    With ``sparse`` segments are created without blocks and the writer allocates ahead of itself
    (``MappedFile.ensure_allocated``): a consume queue then costs disk as it fills, not 6 MB
    per queue at its first message. With ``lazy_dir_sync`` a new segment's name is made durable
    by ``sync_names`` rather than at creation: consume queue segments are created by the
    dispatch thread, where one directory fsync per new queue (a journal commit, 1-2 ms each
    here) held every queue's dispatch back. The flush service calls it for every queue after
    syncing their data, so the fsyncs of a round come together (2,000 new queues: 0.2 s
    against 3.5 s interleaved with the data syncs) and before the checkpoint is written: the
    checkpoint never vouches for a queue whose file name could still be lost.
    """

    def __init__(self, directory: str, file_size: int, file_ops: FileOps, *,
                 sparse: bool = False, lazy_dir_sync: bool = False) -> None:
        self.directory = directory
        self.file_size = file_size
        self.file_ops = file_ops
        self.sparse = sparse
        self.lazy_dir_sync = lazy_dir_sync
        self._dir_unsynced = False  # a segment was created and its name not synced yet
        self.files: list[MappedFile] = []  # replaced on change, never mutated in place
        self.flushed_where = 0  # global offset up to which every byte is durable
        self._list_lock = threading.Lock()
        self._unclosed: list[MappedFile] = []  # destroyed while readers held views

    # -- loading --------------------------------------------------------------------------------

    def load(self) -> None:
        """Map the segments found on disk; every one counts as full until recovery says otherwise.

        A trailing file shorter than a segment (a creation cut short) is deleted.

        Raises:
            StoreError: a segment has the wrong size or the segments do not follow each other.
        """
        names = sorted(
            n for n in self.file_ops.listdir(self.directory) if len(n) == 20 and n.isdigit()
        )
        files: list[MappedFile] = []
        for i, name in enumerate(names):
            path = os.path.join(self.directory, name)
            size = self.file_ops.file_size(path)
            if size != self.file_size:
                if i == len(names) - 1 and size < self.file_size:
                    log.warning("incomplete last segment removed path=%s size=%d", path, size)
                    self.file_ops.remove(path)
                    break
                raise StoreError(
                    f"segment {path} has {size} bytes, expected {self.file_size} "
                    "(was the segment size changed?)"
                )
            start = int(name)
            if files and start != files[-1].file_from_offset + self.file_size:
                raise StoreError(f"segment {path} does not follow {files[-1].path}: a file is missing")
            mf = MappedFile.open(self.file_ops, path, start, self.file_size, create=False,
                                 sparse=self.sparse)
            mf.reset_positions(self.file_size)
            files.append(mf)
        self.files = files
        if files:
            self.flushed_where = files[-1].file_from_offset + self.file_size

    # -- addressing -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """Global offset one past the last byte written."""
        files = self.files
        if not files:
            return self.flushed_where
        last = files[-1]
        return last.file_from_offset + last.wrote_position

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding ``offset``, or None when it is outside every segment."""
        files = self.files
        if not files:
            return None
        index = (offset - files[0].file_from_offset) // self.file_size
        if 0 <= index < len(files):
            return files[index]
        return None

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def roll_next_offset(self, offset: int) -> int:
        """Start offset of the segment after the one holding ``offset``."""
        return offset + self.file_size - offset % self.file_size

    # -- writing --------------------------------------------------------------------------------

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The segment to append to, creating the next one when the last is full or none exists.

        Args:
            start_offset: where the first segment starts when the queue is empty (a multiple of
                the segment size is enforced by rounding down).

        Raises:
            OSError: the new file cannot be created (a sparse one is created without blocks:
                its writer still calls ``ensure_allocated``).
        """
        files = self.files
        if files and not files[-1].is_full:
            return files[-1]
        if files:
            start = files[-1].file_from_offset + self.file_size
        else:
            start = start_offset - start_offset % self.file_size
        self.file_ops.makedirs(self.directory)
        path = os.path.join(self.directory, segment_name(start))
        mf = MappedFile.open(self.file_ops, path, start, self.file_size, create=True,
                             sparse=self.sparse, sync_dir=not self.lazy_dir_sync)
        self._dir_unsynced = self.lazy_dir_sync
        with self._list_lock:
            self.files = [*self.files, mf]
        if not files:
            self.flushed_where = start
        return mf

    def flush(self) -> int:
        """Sync every segment with unsynced bytes; returns the new ``flushed_where``."""
        files = self.files
        if not files:
            return self.flushed_where
        start = self.find(self.flushed_where)
        index = 0 if start is None else files.index(start)
        where = self.flushed_where
        for mf in files[index:]:
            pos = mf.flush()
            where = mf.file_from_offset + pos
            if pos < mf.file_size:
                break
        if where > self.flushed_where:
            self.flushed_where = where
        return self.flushed_where

    def sync_names(self) -> None:
        """Make the names of segments created since the last call durable (``lazy_dir_sync``).

        Raises:
            OSError: the directory sync failed; the next call tries again.
        """
        if self._dir_unsynced:
            self._dir_unsynced = False
            try:
                self.file_ops.sync_dir(self.directory)
            except OSError:
                self._dir_unsynced = True
                raise

    @property
    def names_unsynced(self) -> bool:
        """Segments were created since the names were last synced."""
        return self._dir_unsynced

    def take_names_unsynced(self) -> bool:
        """True when segments were created since the names were last synced, and count them
        synced from now: for a sync of the whole file system about to start (fs_sync.py),
        which covers every name made before it. On its failure: ``mark_names_unsynced``."""
        if not self._dir_unsynced:
            return False
        self._dir_unsynced = False  # before the sync: a segment made meanwhile sets it again
        return True

    def mark_names_unsynced(self) -> None:
        """Have the next ``sync_names`` sync the directory (a segment created by another
        writer of the same directory, see MappedConsumeQueue.adopt)."""
        self._dir_unsynced = True

    def truncate(self, offset: int) -> int:
        """Drop everything at or past ``offset``: later segments are deleted, the one holding it is
        cleared from there (both positions set), so appends continue exactly at ``offset``.

        Returns a measure of the non-zero bytes discarded (cleared chunks plus deleted segments).
        """
        discarded = 0
        keep: list[MappedFile] = []
        drop: list[MappedFile] = []
        for mf in self.files:
            if mf.file_from_offset + self.file_size <= offset:
                keep.append(mf)
            elif mf.file_from_offset <= offset:
                pos = offset - mf.file_from_offset
                discarded += mf.zero_from(pos)
                mf.reset_positions(pos)
                keep.append(mf)
            else:
                drop.append(mf)
        with self._list_lock:
            self.files = keep
        for mf in drop:
            discarded += mf.file_size
            self._destroy(mf)
        self.flushed_where = min(self.flushed_where, offset) if keep else offset
        return discarded

    def delete_first_files(self, predicate: Callable[[MappedFile], bool], count_max: int) -> int:
        """Delete leading segments while ``predicate`` holds, never the last one; at most
        ``count_max``. Returns how many were deleted."""
        files = self.files
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if len(doomed) >= count_max or not predicate(mf):
                break
            doomed.append(mf)
        if not doomed:
            self.retry_unclosed()
            return 0
        with self._list_lock:
            self.files = self.files[len(doomed) :]
        for mf in doomed:
            self._destroy(mf)
        self.retry_unclosed()
        return len(doomed)

    def _destroy(self, mf: MappedFile) -> None:
        if not mf.destroy(self.file_ops):
            self._unclosed.append(mf)

    def retry_unclosed(self) -> None:
        """Unmap segments whose readers have let go since they were deleted."""
        if self._unclosed:
            self._unclosed = [mf for mf in self._unclosed if not mf.close()]

    def close(self) -> None:
        """Unmap every segment (files stay)."""
        with self._list_lock:
            files, self.files = self.files, []
        for mf in files:
            if not mf.close():
                self._unclosed.append(mf)

    def destroy(self) -> None:
        """Delete every segment and the directory."""
        with self._list_lock:
            files, self.files = self.files, []
        for mf in files:
            self._destroy(mf)
        self.file_ops.remove_tree(self.directory)
