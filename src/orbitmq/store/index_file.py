"""Key index of the store: RocketMQ's IndexFile layout, one ``mmap`` per file.

The index maps a message key (each KEYS entry and the UNIQ_KEY, as ``topic#key``) to the commit-log
offsets of the messages carrying it, so that QUERY_MESSAGE finds messages without scanning the log.

File layout, big-endian, the same as RocketMQ 4.x so that files can be read by either:

    header   40 B              begin timestamp i64 | end timestamp i64 | begin phy offset i64
                               | end phy offset i64 | used hash slot count i32 | index count i32
    slots    hash_slot_num x 4 B   number of the newest entry whose key hash falls in the slot (0: none)
    entries  index_num x 20 B      key hash i32 | phy offset i64 | seconds since begin timestamp i32
                                   | number of the previous entry of the same slot (0: end of chain)

Entries are numbered from 1 so that 0 can mean "none". The header's index count is the number of the
next entry (1 in an empty file) and the space of entry 0 is never used, so a file holds
``index_num - 1`` entries, as in RocketMQ.

Invariants the code relies on (the service guarantees them):
- entries are appended in non-decreasing phy offset order, so a chain runs from newer to older entries
  and ``prev < n`` always holds for entry ``n``; readers refuse any link that breaks this, which bounds
  every walk even over a damaged file;
- a put writes the entry, then the header, then the slot: a process killed in between leaves at worst
  one counted entry that its slot does not reach yet, which ``repair_torn_put`` links after a crash;
- values go onto the map as bytes packed beforehand, in one slice assignment, never through
  ``struct.pack_into``: CPython zero-fills the target of pack_into before it packs the fields one by
  one, so a kill -9 inside it left a header whose index count (the last field) read 0, a file the
  next start took for a never-written one and deleted with every entry in it (or a slot reading 0,
  its chain cut). A copy cut short leaves old and new bytes, never zeros: fields of the header as
  they were and as the put writes them, which recovery takes as a put torn before its header.

Space: the file is created sparse at its full logical size (420 MB by default) and gets blocks as it
is written: a slot table page when a key first hashes into it, until an eighth of the table's pages
have blocks, then the whole table at once (``SLOT_TABLE_WHOLE_AT``); the entry log in steps that
double with its use (up to 1 MiB). Keys hash at random, so a busy broker would otherwise allocate
all 4,883 pages of the default table one by one, each an ``fallocate`` in the dispatching thread
(the event loop's, for the sends it dispatches itself): on a fresh broker at 50,000 msgs/s,
4,258 calls in 8 s (strace), 20 of them over 1 ms and up to 35 ms, the thread waiting on reads
of the file system's block bitmaps (perf sched_switch); now 628, 5 over 1 ms. Every page is
allocated before anything is stored into it through the mapping (a store into a hole of a full
disk would kill the process with SIGBUS), so a full disk makes a put raise OSError with nothing
written.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import re
import struct
import threading
from datetime import UTC, datetime

from orbitmq.errors import ClientError, StoreError
from orbitmq.protocol.java_hash import java_string_hash
from orbitmq.store.file_mode import file_mode_in
from orbitmq.store.file_ops import allocate_range
from orbitmq.store.native import NATIVE

__all__ = [
    "PLANNED_ENTRY",
    "HEADER_SIZE",
    "HASH_SLOT_SIZE",
    "INDEX_ENTRY_SIZE",
    "java_string_hash",
    "index_key_hash",
    "build_key",
    "topic_key_hash",
    "IndexFile",
]

log = logging.getLogger(__name__)

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20

_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
_INT32_MAX = 0x7FFF_FFFF
_INT32_MIN = -0x8000_0000
HOT_ENTRIES = 64 * 1024  # newest entries left mapped by IndexFile.release_pages (1.25 MiB)
ENTRY_ALLOCATE_STEP_SIZE_MAX = 1024 * 1024  # the largest allocation step of the entry log
SLOT_TABLE_WHOLE_AT = 8  # once 1/8 of the header and slot pages have blocks, all of them get theirs
_PAGE = mmap.PAGESIZE
_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)
# A fault reads ahead 32 pages around it by default: in a sparse slot table those are holes, each
# then a zero page of page cache mapped into the broker (bench/queues_bench.py: 19 MB resident
# for 2,000 messages of two keys each; 5.4 MB with MADV_RANDOM).
_RANDOM: int | None = getattr(mmap, "MADV_RANDOM", None)
_FILE_NAME = re.compile(r"\d{17}")  # yyyyMMddHHmmssSSS
# A planned entry (dispatch's C plan): key hash, phy offset, store time; and index_put's answers.
_PLANNED = struct.Struct(">iqq")
_PLANNED_SIZE = _PLANNED.size
PLANNED_ENTRY = _PLANNED
_PUT_DONE, _PUT_FULL, _PUT_PAGE, _PUT_ENTRIES = 0, 1, 2, 3
_TMP_SUFFIX = ".tmp"


def index_key_hash(key: str) -> int:
    """The hash an entry stores: ``abs(hashCode)``; Integer.MIN_VALUE, whose abs overflows, gives 0."""
    h = java_string_hash(key)
    return 0 if h == _INT32_MIN else abs(h)


def topic_key_hash(topic: str, key: str) -> int:
    """``index_key_hash(build_key(topic, key))``, in C without the joined string when built."""
    return index_key_hash(build_key(topic, key))


if NATIVE is not None:
    topic_key_hash = NATIVE.index_key_hash  # noqa: F811


def build_key(topic: str, key: str) -> str:
    """The indexed form of a key: RocketMQ's ``topic#key``."""
    return f"{topic}#{key}"


def _check_geometry(hash_slot_num: int, index_num: int) -> None:
    if hash_slot_num < 1 or index_num < 2:  # entry 0 is never used: one fewer could hold nothing
        raise ClientError(f"need hash_slot_num >= 1, index_num >= 2: {hash_slot_num}, {index_num}")


class _CorruptHeader(StoreError):
    """The header of an index file is impossible (damage from a crash or from another writer)."""


class IndexFile:
    """One index file, written through ``mmap``.

    Opens ``path`` if it exists (its size must match the geometry), otherwise creates it. Not
    thread-safe: IndexService serializes every call except ``flush``, which may run beside writes.
    """

    def __init__(self, path: str, hash_slot_num: int, index_num: int) -> None:
        _check_geometry(hash_slot_num, index_num)
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self._entries_at = HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.file_size = self._entries_at + index_num * INDEX_ENTRY_SIZE
        self._io_lock = threading.Lock()  # flush() against close()
        self._closed = False
        self._dirty = False
        # Space known to have blocks: pages of header and slots (one flag each), and the entry log
        # up to a mark. Unknown for a file opened again: allocated anew (a no-op where it is).
        self._pages = bytearray(-(-self._entries_at // _PAGE))
        self._pages_allocated = 0  # pages flagged in _pages
        self._entries_allocated_to = self._entries_at
        self._fd = _open_or_create(path, self.file_size, hash_slot_num, index_num)
        mm = None
        try:
            self._mm = mm = mmap.mmap(self._fd, self.file_size)
            if _RANDOM is not None:  # slots and chains are read at random: no read-around
                mm.madvise(_RANDOM)
            self._read_header()
        except BaseException:
            if mm is not None:
                mm.close()
            os.close(self._fd)
            raise

    # -- header -------------------------------------------------------------------------------

    def _read_header(self) -> None:
        fields: tuple[int, int, int, int, int, int] = _HEADER.unpack_from(self._mm)
        begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = fields
        if index_count == 0:  # a file created but never written, as RocketMQ also accepts
            index_count = 1
        if (
            not 1 <= index_count <= self.index_num
            or not 0 <= slot_count <= self.hash_slot_num
            or (index_count > 1 and not 0 <= begin_phy <= end_phy)
        ):
            raise _CorruptHeader(
                f"index file {self.path}: impossible header index_count={index_count} "
                f"slot_count={slot_count} phy={begin_phy}..{end_phy}"
            )
        self._begin_ts, self._end_ts = begin_ts, end_ts
        self._begin_phy, self._end_phy = begin_phy, end_phy
        self._slot_count, self._index_count = slot_count, index_count

    def _ensure_page(self, at: int) -> None:
        """Blocks for the header or slot table page holding byte ``at``."""
        page = at // _PAGE
        if self._pages[page]:
            return
        pages = len(self._pages)
        if self._pages_allocated * SLOT_TABLE_WHOLE_AT >= pages:
            # the rest of the table in one call (pages with blocks already keep their data)
            allocate_range(self._fd, 0, min(pages * _PAGE, self.file_size))
            self._pages[:] = b"\x01" * pages  # in place: the C puts hold this very buffer
            self._pages_allocated = pages
            return
        start = page * _PAGE
        allocate_range(self._fd, start, min(start + _PAGE, self.file_size) - start)
        self._pages[page] = 1
        self._pages_allocated += 1

    def _ensure_entries(self, end: int) -> None:
        """Blocks for the entry log below byte ``end``, in steps about as large as what the log
        already uses (one page at least, ENTRY_ALLOCATE_STEP_SIZE_MAX at most)."""
        have = self._entries_allocated_to
        if end <= have:
            return
        step = min(max(have - self._entries_at, _PAGE), ENTRY_ALLOCATE_STEP_SIZE_MAX)
        target = min(-(-max(end, have + step) // _PAGE) * _PAGE, self.file_size)
        start = have - have % _PAGE
        allocate_range(self._fd, start, target - start)
        self._entries_allocated_to = target

    def _write_header(self) -> None:
        fields = (self._begin_ts, self._end_ts, self._begin_phy, self._end_phy)
        # Packed first, then copied: never pack_into onto the map (see the module docstring).
        self._mm[:HEADER_SIZE] = _HEADER.pack(*fields, self._slot_count, self._index_count)

    def _slot_at(self, key_hash: int) -> int:
        return HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE

    def _entry(self, n: int) -> tuple[int, int, int, int]:
        return _ENTRY.unpack_from(self._mm, self._entries_at + n * INDEX_ENTRY_SIZE)

    @property
    def begin_timestamp(self) -> int:
        """Store timestamp (ms) of the first entry; 0 in an empty file."""
        return self._begin_ts

    @property
    def end_timestamp(self) -> int:
        """Newest store timestamp (ms) indexed here; 0 in an empty file."""
        return self._end_ts

    @property
    def begin_phy_offset(self) -> int:
        """Commit-log offset of the first entry's message; 0 in an empty file."""
        return self._begin_phy

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the last entry's message (its start, not its end); 0 when empty."""
        return self._end_phy

    @property
    def hash_slot_count(self) -> int:
        """How many slots hold a chain (statistics only)."""
        return self._slot_count

    @property
    def entry_count(self) -> int:
        """How many entries the file holds (the header's index count minus one)."""
        return self._index_count - 1

    @property
    def is_write_full(self) -> bool:
        """True when no entry fits any more."""
        return self._index_count >= self.index_num

    # -- writing ------------------------------------------------------------------------------

    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Index ``key`` (already in ``topic#key`` form) at ``phy_offset``; False when the file is full."""
        return self.put_hash(index_key_hash(key), phy_offset, store_timestamp_ms)

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp_ms: int) -> bool:
        """``put_key`` with the hash already computed (the service hashes each key once)."""
        n = self._index_count
        if n >= self.index_num:
            return False
        assert 0 <= key_hash <= _INT32_MAX, key_hash
        assert n == 1 or phy_offset >= self._end_phy, "phy offsets must not decrease in a file"
        slot_at = self._slot_at(key_hash)
        entry_at = self._entries_at + n * INDEX_ENTRY_SIZE
        # Every page this put stores into gets its blocks first (OSError here: nothing written).
        if entry_at + INDEX_ENTRY_SIZE > self._entries_allocated_to:
            self._ensure_entries(entry_at + INDEX_ENTRY_SIZE)
        if not self._pages[0]:
            self._ensure_page(0)
        if not self._pages[slot_at // _PAGE]:
            self._ensure_page(slot_at)
        (head,) = _SLOT.unpack_from(self._mm, slot_at)
        if not 0 < head < n:  # empty, or garbage that must not become a link
            head = 0
        if n == 1:
            self._begin_ts, self._begin_phy = store_timestamp_ms, phy_offset
        # Seconds since the file's first entry, clamped into an i32 (a clock stepping back gives 0).
        diff_s = min(max((store_timestamp_ms - self._begin_ts) // 1000, 0), _INT32_MAX)
        mm = self._mm
        mm[entry_at : entry_at + INDEX_ENTRY_SIZE] = _ENTRY.pack(key_hash, phy_offset, diff_s, head)
        self._index_count = n + 1
        self._end_phy = phy_offset
        self._end_ts = max(self._end_ts, store_timestamp_ms)
        if head == 0:
            self._slot_count += 1
        self._write_header()
        mm[slot_at : slot_at + HASH_SLOT_SIZE] = _SLOT.pack(n)  # last: see the docstring on torn puts
        self._dirty = True
        return True

    def put_planned(self, planned: bytes, start: int) -> int:
        """``put_hash`` of each planned entry of ``planned`` (key hash i32, phy offset i64, store
        time i64, as dispatch plans them in C) from number ``start``, by the C speedups: the same
        writes in the same order. Returns the number of the first entry not put: the end, or
        the first that needs another file (this one is full).

        Raises:
            OSError: a page could not get its blocks (as ``put_hash``); the entries before it
                stay put.
        """
        assert NATIVE is not None, "dispatch plans entries only with the C speedups"
        count = len(planned) // _PLANNED_SIZE
        while start < count:
            state = (self._index_count, self._begin_ts, self._end_ts, self._begin_phy,
                     self._end_phy, self._slot_count)
            done, state, need, need_at = NATIVE.index_put(
                self._mm, self._entries_at, self.hash_slot_num, self.index_num, state,
                self._pages, self._entries_allocated_to, _PAGE, planned, start)
            (self._index_count, self._begin_ts, self._end_ts, self._begin_phy, self._end_phy,
             self._slot_count) = state
            if done > start:
                self._dirty = True
            start = done
            if need in (_PUT_DONE, _PUT_FULL):
                break
            if need == _PUT_PAGE:
                self._ensure_page(need_at)
            elif need == _PUT_ENTRIES:
                self._ensure_entries(need_at)
            else:  # an offset going back: put_hash says what is wrong
                self.put_hash(*_PLANNED.unpack_from(planned, start * _PLANNED_SIZE))
                start += 1
        return start

    def truncate_from(self, phy_offset: int) -> None:
        """Remove the entries of messages at or past ``phy_offset`` (a truncated commit log's end).

        Removed entries are unlinked newest first, each giving its slot back to its predecessor, which
        restores the chains exactly as they were before those puts.
        """
        cut = self._first_entry_at_or_past(phy_offset)
        if cut >= self._index_count:
            return
        self._ensure_page(0)
        for n in range(self._index_count - 1, cut - 1, -1):
            key_hash, _, _, prev = self._entry(n)
            slot_at = self._slot_at(key_hash)
            if _SLOT.unpack_from(self._mm, slot_at)[0] == n:
                self._ensure_page(slot_at)  # it holds n: it has blocks, this only records so
                prev = prev if 0 < prev < n else 0
                self._mm[slot_at : slot_at + HASH_SLOT_SIZE] = _SLOT.pack(prev)
                if prev == 0:
                    self._slot_count = max(self._slot_count - 1, 0)
        # The bytes of removed entries stay: nothing reads past the index count and puts overwrite them.
        self._index_count = cut
        if cut > 1:
            _, phy, diff_s, _ = self._entry(cut - 1)
            self._end_phy = phy
            self._end_ts = self._begin_ts + diff_s * 1000  # only the second is stored: round down
        else:
            self._begin_ts = self._end_ts = self._begin_phy = self._end_phy = 0
            self._slot_count = 0
        self._write_header()
        self._dirty = True

    def _first_entry_at_or_past(self, phy_offset: int) -> int:
        lo, hi = 1, self._index_count
        while lo < hi:  # binary search: phy offsets never decrease along entry numbers
            mid = (lo + hi) // 2
            if self._entry(mid)[1] < phy_offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def repair_torn_put(self) -> bool:
        """After a crash, link the last entry if the process died between the header and the slot.

        Returns True when a repair was made.
        """
        n = self._index_count - 1
        if n < 1:
            return False
        key_hash, _, _, prev = self._entry(n)
        if key_hash < 0:
            return False
        slot_at = self._slot_at(key_hash)
        (head,) = _SLOT.unpack_from(self._mm, slot_at)
        if head == n or head != prev:  # linked already, or not the state a torn put leaves
            return False
        self._ensure_page(slot_at)
        self._mm[slot_at : slot_at + HASH_SLOT_SIZE] = _SLOT.pack(n)
        self._dirty = True
        log.warning("index entry relinked after crash path=%s entry=%d", self.path, n)
        return True

    # -- reading ------------------------------------------------------------------------------

    def read_entry(self, n: int) -> tuple[int, int, int, int]:
        """Entry ``n`` (1-based) as (key hash, phy offset, seconds since begin, previous entry)."""
        if not 1 <= n < self._index_count:
            raise IndexError(f"entry {n} not in 1..{self._index_count - 1}")
        return self._entry(n)

    def is_time_matched(self, begin_ms: int, end_ms: int) -> bool:
        """Whether [begin_ms, end_ms] overlaps the file's [begin timestamp, end timestamp]."""
        return self._index_count > 1 and begin_ms <= self._end_ts and end_ms >= self._begin_ts

    def select_phy_offsets(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Offsets of entries with ``key``'s hash stored within [begin_ms, end_ms], newest first.

        Hashes collide, so callers check the key on each message. As in RocketMQ, an entry's time is
        known to the second: it counts as ``begin timestamp + whole seconds``.
        """
        return self.select_by_hash(index_key_hash(key), max_num, begin_ms, end_ms)

    def select_by_hash(self, key_hash: int, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """``select_phy_offsets`` with the hash already computed."""
        found: list[int] = []
        count = self._index_count
        if max_num <= 0 or count <= 1 or begin_ms > end_ms:
            return found
        mm, entries_at, begin_ts = self._mm, self._entries_at, self._begin_ts
        (n,) = _SLOT.unpack_from(mm, self._slot_at(key_hash))
        while 0 < n < count:
            entry_hash, phy, diff_s, prev = _ENTRY.unpack_from(
                mm, entries_at + n * INDEX_ENTRY_SIZE
            )
            if diff_s < 0:
                break
            entry_ms = begin_ts + diff_s * 1000
            if entry_hash == key_hash and begin_ms <= entry_ms <= end_ms:
                found.append(phy)
                if len(found) >= max_num:
                    break
            # Older entries are older still (timestamps do not go back); prev >= n is damage.
            if entry_ms < begin_ms or prev >= n:
                break
            n = prev
        return found

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Make the writes durable. Safe beside puts (another thread) and after close (no-op)."""
        with self._io_lock:
            if self._closed or not self._dirty:
                return
            self._dirty = False  # cleared first: a put racing the fsync marks the file dirty again
            # fsync on the descriptor covers writes through a shared mapping (Linux msync(MS_SYNC) is
            # the same call) and, unlike mmap.flush, lets other threads run meanwhile.
            try:
                os.fsync(self._fd)
            except OSError:
                # Tried again next round. Linux may have marked the failed pages clean: keys put
                # before it may then miss from the index after a crash (the messages do not).
                self._dirty = True
                raise

    def release_pages(self, hot_entries: int = HOT_ENTRIES) -> None:
        """Unmap this process's view of the entries older than the newest ``hot_entries`` (the
        page cache keeps them; a query maps them again): the slot table stays, the entry log
        no longer adds to the broker's resident size with every message indexed."""
        with self._io_lock:
            if self._closed or _DONTNEED is None:
                return
            start = -(-self._entries_at // mmap.PAGESIZE) * mmap.PAGESIZE
            end = self._entries_at + max(self._index_count - hot_entries, 0) * INDEX_ENTRY_SIZE
            end -= end % mmap.PAGESIZE
            if end > start:
                self._mm.madvise(_DONTNEED, start, end - start)  # shared mapping: nothing lost

    def close(self) -> None:
        """Unmap and close without flushing; idempotent."""
        with self._io_lock:
            if self._closed:
                return
            self._closed = True
            self._mm.close()
            os.close(self._fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        log.info("index file destroyed path=%s", self.path)


def _open_or_create(path: str, size: int, hash_slot_num: int, index_num: int) -> int:
    """Descriptor of ``path``, created at ``size`` bytes (sparse) if missing."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return _create(path, size)
    actual = os.fstat(fd).st_size
    if actual != size:
        os.close(fd)
        raise StoreError(
            f"index file {path} has {actual} bytes, expected {size} for hash_slot_num={hash_slot_num} "
            f"index_num={index_num} (were max_hash_slot_num or max_index_num changed?)"
        )
    return fd


def _create(path: str, size: int) -> int:
    # Built under a temporary name and renamed, so that a crash never leaves a short file behind
    # (a wrong size at load then means a changed configuration, not damage).
    tmp = path + _TMP_SUFFIX
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, file_mode_in(os.path.dirname(path)))
    try:
        os.ftruncate(fd, size)
        os.pwrite(fd, _HEADER.pack(0, 0, 0, 0, 0, 1), 0)
        os.fsync(fd)
        os.rename(tmp, path)
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)  # make the new name durable
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):  # e.g. no space for the header: no file left behind
            os.remove(tmp)
        raise
    return fd


def _format_name(ms: int) -> str:
    # UTC, unlike RocketMQ's local time: names then sort in creation order across DST changes.
    return datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _parse_name(name: str) -> int:
    seconds = datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC).timestamp()
    return int(seconds) * 1000 + int(name[14:17])

