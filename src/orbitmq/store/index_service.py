"""IndexService: a store's key index files, in creation order, with rolling, querying, cleanup.

The file format and a single file's operations are in index_file.py.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orbitmq.errors import ClientError
from orbitmq.store.file_mode import make_dirs
from orbitmq.store.file_ops import StoreSpaceError
from orbitmq.store.index_file import (
    _FILE_NAME,
    _TMP_SUFFIX,
    PLANNED_ENTRY,
    IndexFile,
    _check_geometry,
    _CorruptHeader,
    _format_name,
    _parse_name,
    topic_key_hash,
)

__all__ = ["IndexService", "QueryOffsetResult"]

log = logging.getLogger(__name__)


@dataclass
class QueryOffsetResult:
    """Answer of ``IndexService.query_offsets``; ``index_last_update_*`` describe the newest entry."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phy_offset: int


class IndexService:
    """The index files of a store, in creation order, with rolling, querying and cleanup.

    One lock serializes the dispatch thread's ``build_index`` with queries and cleanup; ``flush``
    does its fsyncs outside it so that dispatch never waits for the disk.
    """

    def __init__(
        self,
        index_dir: str,
        hash_slot_num: int,
        index_num: int,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        """Args: ``clock`` returns wall time in ms and names new files (default: the system clock)."""
        _check_geometry(hash_slot_num, index_num)
        self._dir = index_dir
        self._hash_slot_num = hash_slot_num
        self._index_num = index_num
        self._clock = clock if clock is not None else _wall_clock_ms
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        self._last_name_ms = 0
        self._loaded = False

    def load(self, last_exit_ok: bool) -> None:
        """Open the files of ``index_dir`` (created if missing).

        After an abnormal exit (``last_exit_ok`` False), a file with an impossible header is deleted
        rather than failing the start, and a put torn by the crash is relinked; entries past the
        recovered commit log are removed by ``truncate_after``, which the store calls next.

        Raises:
            StoreError: a file's size does not match ``hash_slot_num``/``index_num``, or (after a
                clean exit) a header is damaged.
        """
        with self._lock:
            if self._loaded:
                raise ClientError("IndexService.load called twice")
            make_dirs(self._dir)
            names: list[str] = []
            for name in sorted(os.listdir(self._dir)):
                if name.endswith(_TMP_SUFFIX):  # a creation cut short by a crash
                    os.remove(os.path.join(self._dir, name))
                elif _FILE_NAME.fullmatch(name):
                    names.append(name)
            try:
                for name in names:
                    self._open_file(os.path.join(self._dir, name), last_exit_ok)
            except BaseException:
                for f in self._files:
                    f.close()
                self._files = []
                raise
            if names:
                self._last_name_ms = _parse_name(names[-1])
            self._loaded = True
            log.info(
                "index loaded dir=%s files=%d clean=%s", self._dir, len(self._files), last_exit_ok
            )

    def _open_file(self, path: str, last_exit_ok: bool) -> None:
        try:
            f = IndexFile(path, self._hash_slot_num, self._index_num)
        except _CorruptHeader as e:
            if last_exit_ok:
                raise
            log.warning("damaged index file deleted path=%s reason=%s", path, e)
            os.remove(path)
            return
        if f.entry_count == 0:  # made just before a stop: holds nothing, and an empty file in the
            f.destroy()  # list would only complicate every "newest entry" question
            return
        if not last_exit_ok:
            f.repair_torn_put()
        self._files.append(f)

    def build_index(
        self,
        topic: str,
        keys: list[str],
        uniq_key: str | None,
        phy_offset: int,
        store_timestamp_ms: int,
    ) -> None:
        """Index one message under ``topic#k`` for its UNIQ_KEY and each of its KEYS.

        Empty keys are skipped and keys sharing a hash are indexed once (the entries would be the
        same). A message at or before the newest indexed one is skipped, except for the keys it
        lacks, so that re-dispatching after recovery never indexes a message twice.

        Raises:
            StoreSpaceError: a new file or the space of an entry cannot be had (a full disk);
                the keys indexed before it stay, and calling again indexes the rest.
        """
        hashes: list[int] = []
        for key in [uniq_key, *keys] if uniq_key else keys:
            if key:
                key_hash = topic_key_hash(topic, key)
                if key_hash not in hashes:
                    hashes.append(key_hash)
        if not hashes:
            return
        with self._lock:
            if not self._loaded:
                raise ClientError("IndexService.build_index before load")
            last = self._last_indexed_phy()
            if last is not None and phy_offset <= last:
                if phy_offset < last:
                    return
                for key_hash in self._hashes_indexed_at(phy_offset):
                    if key_hash in hashes:
                        hashes.remove(key_hash)
            try:
                for key_hash in hashes:
                    f = self._files[-1] if self._files else None
                    if f is None or f.is_write_full:
                        f = self._new_file()
                    put = f.put_hash(key_hash, phy_offset, store_timestamp_ms)
                    assert put, "a file that is not full accepts a put"
            except OSError as e:
                raise StoreSpaceError(f"index of {self._dir}", e) from e

    def put_planned(self, items: list[Any]) -> None:
        """``build_index`` for a dispatch round planned in C (store/_native/dispatch_plan.c), in
        order: bytes of planned entries (key hash, phy offset, store time, hashed and
        deduplicated per message as build_index does), or a message whose keys Python splits
        ``(topic, keys, uniq key, phy offset, store time)`` as UTF-8 bytes.

        Raises:
            StoreSpaceError: as ``build_index``; calling again indexes the rest.
        """
        for item in items:
            if isinstance(item, bytes):
                self._put_planned(item)
            else:
                topic, keys, uniq, phy, ts = item
                self.build_index(topic.decode(), keys.decode().split(), uniq.decode() or None,
                                 phy, ts)

    def _put_planned(self, planned: bytes) -> None:
        count = len(planned) // PLANNED_ENTRY.size
        with self._lock:
            if not self._loaded:
                raise ClientError("IndexService.put_planned before load")
            done = 0
            last = self._last_indexed_phy()
            try:
                # A re-dispatch after recovery: what build_index skips, skipped here alike.
                while last is not None and done < count:
                    key_hash, phy, ts = PLANNED_ENTRY.unpack_from(planned, done * PLANNED_ENTRY.size)
                    if phy > last:
                        break
                    if phy == last and key_hash not in self._hashes_indexed_at(phy):
                        self._put_hash(key_hash, phy, ts)
                    done += 1
                while done < count:
                    f = self._files[-1] if self._files else None
                    if f is None or f.is_write_full:
                        f = self._new_file()
                    done = f.put_planned(planned, done)
            except OSError as e:
                raise StoreSpaceError(f"index of {self._dir}", e) from e

    def _put_hash(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> None:
        f = self._files[-1] if self._files else None
        if f is None or f.is_write_full:
            f = self._new_file()
        put = f.put_hash(key_hash, phy_offset, store_timestamp_ms)
        assert put, "a file that is not full accepts a put"

    def _new_file(self) -> IndexFile:
        name_ms = max(self._clock(), self._last_name_ms + 1)  # strictly increasing, even in one ms
        path = os.path.join(self._dir, _format_name(name_ms))
        while os.path.exists(path):
            name_ms += 1
            path = os.path.join(self._dir, _format_name(name_ms))
        self._last_name_ms = name_ms
        f = IndexFile(path, self._hash_slot_num, self._index_num)
        self._files.append(f)
        log.info("index file created path=%s files=%d", path, len(self._files))
        return f

    def _last_indexed_phy(self) -> int | None:
        for f in reversed(self._files):
            if f.entry_count:
                return f.end_phy_offset
        return None

    def _hashes_indexed_at(self, phy_offset: int) -> list[int]:
        """Key hashes of the entries of the message at ``phy_offset``, the newest entries."""
        found: list[int] = []
        for f in reversed(self._files):
            for n in range(f.entry_count, 0, -1):
                key_hash, phy, _, _ = f.read_entry(n)
                if phy != phy_offset:
                    return found
                found.append(key_hash)
        return found

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> QueryOffsetResult:
        """Commit-log offsets of messages that may carry ``key``, stored in [begin_ms, end_ms].

        Newest first, at most ``max_num``. Hashes collide: the caller checks the key on each message.
        """
        key_hash = topic_key_hash(topic, key)
        found: list[int] = []
        with self._lock:
            newest = next((f for f in reversed(self._files) if f.entry_count), None)
            for f in reversed(self._files):
                if len(found) >= max_num:
                    break
                if f.is_time_matched(begin_ms, end_ms):
                    found.extend(f.select_by_hash(key_hash, max_num - len(found), begin_ms, end_ms))
                if f.entry_count and f.begin_timestamp < begin_ms:
                    break  # older files end before this one begins
            if newest is None:
                return QueryOffsetResult(found, 0, 0)
            return QueryOffsetResult(found, newest.end_timestamp, newest.end_phy_offset)

    def truncate_after(self, phy_offset: int) -> None:
        """Forget messages at or past ``phy_offset``, where the recovered commit log now ends.

        Newer files are destroyed whole, the file that straddles the offset loses only its entries
        at or past it; ``max_phy_offset`` then tells how far the index still reaches.
        """
        with self._lock:
            if not self._loaded:
                raise ClientError("IndexService.truncate_after before load")
            while self._files:
                f = self._files[-1]
                if f.entry_count and f.begin_phy_offset < phy_offset:
                    if f.end_phy_offset >= phy_offset:
                        f.truncate_from(phy_offset)
                        log.info("index file truncated path=%s phy_offset=%d", f.path, phy_offset)
                    break
                self._files.pop()
                f.destroy()

    def delete_expired(self, min_phy_offset: int) -> None:
        """Destroy files whose messages all lie before ``min_phy_offset``; never the newest file."""
        with self._lock:
            expired = [f for f in self._files[:-1] if f.end_phy_offset < min_phy_offset]
            if not expired:
                return
            self._files = [f for f in self._files if f not in expired]
            for f in expired:
                f.destroy()

    def flush(self) -> None:
        """fsync every file written since its last flush, outside the lock."""
        with self._lock:
            files = list(self._files)
        for f in files:
            f.flush()  # a file destroyed meanwhile is closed, and flushing it is a no-op

    def release_cold_pages(self) -> None:
        """IndexFile.release_pages for every file (a closed one is skipped)."""
        with self._lock:
            files = list(self._files)
        for f in files:
            f.release_pages()

    @property
    def max_phy_offset(self) -> int:
        """Commit-log offset of the newest indexed message (its start); 0 when nothing is indexed."""
        with self._lock:
            last = self._last_indexed_phy()
        return 0 if last is None else last

    @property
    def files(self) -> list[IndexFile]:
        """A snapshot of the open files, oldest first (for tests and tooling)."""
        with self._lock:
            return list(self._files)

    def shutdown(self) -> None:
        """Flush and close every file; ``load`` may open them again."""
        with self._lock:
            for f in self._files:
                try:
                    f.flush()
                except OSError as e:  # closed all the same; recovery rebuilds past the checkpoint
                    log.error("index file not synced at shutdown path=%s err=%s", f.path, e)
                f.close()
            self._files = []
            self._loaded = False


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
