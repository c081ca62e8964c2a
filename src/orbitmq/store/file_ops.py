"""The file operations the store needs, behind a small protocol so that tests can swap the disk.

The real implementation maps segment files with ``mmap``; ``orbitmq.testing.faulty_files`` provides
one over byte buffers that remembers what an fsync made durable and can simulate a power cut.
A region's ``buf`` is written in place (slice assignment, ``struct.pack_into``) and read through
memoryviews; nothing the store writes is durable before ``sync`` covers it.

Space: a store through a mapping into a page the file system cannot back (a hole of a sparse file
on a full disk) is not an error the process can catch: the kernel kills it with SIGBUS. So every
byte the store writes through a region lies in space allocated beforehand: a region is created
fully allocated, or sparse and then ``allocate``-d ahead of the writer, and an allocation that
fails raises ``OSError`` (ENOSPC) before anything is written.

Locking: ``lock_exclusive`` takes an exclusive lock on a file for as long as the process holds the
returned handle (``flock``: the kernel drops it when the process dies, even by kill -9), so that two
processes never open one store.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import logging
import mmap
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any, Protocol

from orbitmq.errors import StoreError
from orbitmq.store.file_mode import file_mode_in, make_dirs

__all__ = [
    "MappedRegion",
    "FileLock",
    "FileOps",
    "OsFileOps",
    "OsRegion",
    "StoreLockedError",
    "StoreSpaceError",
    "SPACE_ERRNOS",
    "allocate_range",
    "file_data_ranges",
]

SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})  # the file system (or a quota) is full


class StoreLockedError(StoreError):
    """Another process holds the lock of a store directory.

    Attributes:
        path: the lock file.
        holder_pid: the pid the holder wrote into it, None when unreadable.
    """

    def __init__(self, path: str, holder_pid: int | None, message: str | None = None) -> None:
        self.path = path
        self.holder_pid = holder_pid
        who = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(message or f"{path} is locked by {who}")


class StoreSpaceError(StoreError):
    """A consume queue or index write could not get its space (or its file): nothing was written,
    and the same write can be tried again once space returns.

    Attributes:
        cause: the OSError underneath (ENOSPC, EDQUOT, EIO...).
    """

    def __init__(self, what: str, cause: OSError) -> None:
        self.cause = cause
        super().__init__(f"{what}: {cause.strerror or cause}")

    @property
    def no_space(self) -> bool:
        """True when the file system (or a quota) is full, not broken."""
        return self.cause.errno in SPACE_ERRNOS

log = logging.getLogger(__name__)


class MappedRegion(Protocol):
    """A fixed-size file opened for in-place writes."""

    buf: Any  # writable buffer: mmap.mmap or bytearray

    def sync(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable (msync/fsync); returns when they are.

        Raises:
            OSError: the write-back failed (EIO, ENOSPC). The kernel may then have marked the
                pages clean without writing them: call ``mark_dirty`` before syncing again.
        """

    def allocate(self, start: int, end: int) -> None:
        """Give bytes [start, end) of a sparse region real blocks, so that writes into them
        through ``buf`` cannot fault for lack of space (``end`` at most the region's size).
        The range holds no data yet (the writer has not reached it): an implementation may
        write zeros there.

        Raises:
            OSError: no space (ENOSPC, EDQUOT) or another failure; nothing was written.
        """

    def mark_dirty(self, start: int, end: int) -> None:
        """Make bytes [start, end) dirty again, so the next ``sync`` writes them: after a failed
        sync the kernel may consider them written (Linux marks pages clean when write-back fails)."""

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        """Ranges within [start, end) that may hold data; everything else is a hole and reads as
        zeros. Lets recovery skip the unallocated bulk of a sparse file without reading it
        (reading a hole through the mapping still costs a page fault per page)."""

    def close(self) -> bool:
        """Release the mapping; False if readers still hold views (retry later)."""


class FileLock(Protocol):
    """An exclusive lock held until ``release`` (or the holder's death)."""

    def release(self) -> None: ...


class FileOps(Protocol):
    """Directory and file operations of the store."""

    def makedirs(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]:
        """Names in ``path``; empty when it does not exist."""

    def exists(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int: ...

    def open_region(self, path: str, size: int, *, create: bool, sparse: bool = False,
                    sync_dir: bool = True) -> MappedRegion:
        """Map ``path``; with ``create`` make a new zero-filled file of ``size`` bytes first,
        with all its blocks allocated, or none with ``sparse`` (then ``allocate`` before writing).
        A new file's name is made durable at once, or, without ``sync_dir``, by the caller's
        ``sync_dir`` before it counts on the file surviving a power cut.

        Raises:
            OSError: the file cannot be created (e.g. no space left) or opened.
        """

    def sync_dir(self, path: str) -> None:
        """Make the entries of directory ``path`` (new or removed names) durable."""

    def lock_exclusive(self, path: str) -> FileLock:
        """Take an exclusive lock on ``path`` (created if missing) without waiting, and record
        this process's pid in it for whoever is refused.

        Raises:
            StoreLockedError: another holder has it.
            StoreError: the lock cannot be taken at all (the file cannot be created or locked).
        """

    def remove(self, path: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...

    def read_file(self, path: str) -> bytes | None:
        """Whole contents of a small file, or None when it does not exist."""

    def write_file(self, path: str, data: bytes) -> None:
        """Replace a small file's contents durably (write, fsync) before returning."""

    def disk_used_ratio(self, path: str) -> float:
        """Used fraction (0..1) of the file system holding ``path``."""


_MADV_POPULATE_WRITE = 23  # Linux 5.14+: fault pages in for writing, data unchanged


def _load_madvise() -> Callable[[int, int, int], int] | None:
    """libc's madvise through ctypes, which releases the GIL during the call (CPython's
    ``mmap.madvise`` keeps it): populating megabytes ahead of the writer then runs on the other
    core while the event loop goes on."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_madvise = _load_madvise()


def mapping_address(buf: mmap.mmap) -> int:
    """Where ``buf``'s mapping starts, for calls through ctypes (madvise, memset); the caller
    keeps the mapping open while it uses the address."""
    anchor = ctypes.c_char.from_buffer(buf)  # exports the buffer only briefly
    address = ctypes.addressof(anchor)
    del anchor
    return address


class OsRegion:
    """A segment file mapped with ``mmap``.

    ``sync`` is ``fdatasync``, not ``msync`` over the range: on Linux both write back the same
    dirty pages (pages written through a shared mapping are dirty in the page cache and fsync
    covers them), but CPython's ``mmap.flush`` keeps the GIL for the whole ``msync`` while
    ``os.fdatasync`` releases it. Under SYNC_FLUSH the group commit thread syncs all the time:
    with ``msync`` the event loop stood still for every disk round trip (no request decoded, no
    answer sent); with ``fdatasync`` it prepares the next group while the disk writes this one.
    The descriptor is opened per sync (two cheap syscalls next to a disk round trip) so that a
    broker with thousands of consume queue files does not hold thousands of descriptors; the
    segment a SYNC_FLUSH writer syncs after every few sends holds one (``hold_descriptor``):
    two syscalls, and two hand-overs of the GIL, less on a send's path.
    """

    __slots__ = ("path", "buf", "_addr", "_fd")

    def __init__(self, path: str, buf: mmap.mmap) -> None:
        self.path = path
        self.buf = buf
        self._addr = 0
        self._fd = -1  # held open by hold_descriptor, else opened per sync

    def hold_descriptor(self, hold: bool) -> None:
        """Keep a descriptor for ``sync`` open (True) or close it (False)."""
        if hold and self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR)
        elif not hold and self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def populate(self, start: int, end: int) -> bool:
        """Fault pages [start, end) in for writing (MADV_POPULATE_WRITE) without the GIL, so that
        the writer's later stores into them take no page fault: a first write into a page of a
        fresh segment costs 5-40 us of kernel time in the writing thread, populating the same
        range in advance about a quarter of it, in another thread. Data is left unchanged. The
        caller keeps the mapping open meanwhile (MappedFile's lock). False when unsupported."""
        if _madvise is None:
            return False
        if not self._addr:
            self._addr = mapping_address(self.buf)
        start -= start % mmap.PAGESIZE
        if end <= start:
            return True
        if _madvise(self._addr + start, end - start, _MADV_POPULATE_WRITE) != 0:
            log.debug("madvise(POPULATE_WRITE) failed errno=%d", ctypes.get_errno())
            return False
        return True

    def sync(self, start: int, end: int) -> None:
        if end <= start:
            return
        if self._fd >= 0:
            os.fdatasync(self._fd)  # the whole file: a superset of [start, end)
            return
        try:
            self._sync_by_path()  # the whole file: a superset of [start, end)
        except FileNotFoundError:  # deleted meanwhile: msync still reaches the mapped pages
            aligned = start - start % mmap.PAGESIZE
            self.buf.flush(aligned, end - aligned)

    def sync_apart(self) -> bool:
        """``fdatasync`` of the file through a descriptor opened for this call, for a thread
        other than the writer's (the page warming ahead of it); False, nothing done, unless
        the region holds a descriptor for the writer's syncs. Linux reports a failed
        write-back once to each open file: the writer's own held descriptor still gets the
        report of a failure this sync met (and MappedFile.flush then marks its range dirty
        again), where a descriptor opened for its next sync, after this one saw the error,
        would not."""
        if self._fd < 0:
            return False
        try:
            self._sync_by_path()
        except FileNotFoundError:  # deleted meanwhile: nothing ahead of a writer to sync
            return False
        return True

    def _sync_by_path(self) -> None:
        """``fdatasync`` through a descriptor opened for it (FileNotFoundError: the file is
        gone)."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def drop_cached(self, start: int, end: int) -> None:
        """Ask the kernel to drop the file's pages [start, end) from the page cache
        (POSIX_FADV_DONTNEED). Only clean pages that no process maps go; dirty ones stay until
        written back, so no data is lost, and a later read brings a page back from the disk."""
        start -= start % mmap.PAGESIZE
        if end <= start or not hasattr(os, "posix_fadvise"):
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:  # deleted meanwhile: its pages went with it
            return
        try:
            os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def allocate(self, start: int, end: int) -> None:
        """Zeros written with ``pwrite``: the file system reserves the blocks then or fails
        with ENOSPC, and the pages land in the page cache, so the writer's first store into
        each is a cheap fault. (posix_fallocate reserves as well, but then the first store
        through the mapping into a new file costs 1.5-15 ms here on ext4, once per file: 30 s
        for 2,000 new queues, against 0.3 s this way.)"""
        if end <= start:
            return
        fd = os.open(self.path, os.O_RDWR)  # per call, as sync: allocations come in steps
        try:
            _write_zeros(fd, start, end, fresh=True)
        finally:
            os.close(fd)

    def mark_dirty(self, start: int, end: int) -> None:
        start -= start % mmap.PAGESIZE
        if end > start:
            self.buf[start:end] = self.buf[start:end]  # a copy written back: every page dirty

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:  # deleted meanwhile: assume data everywhere
            return [(start, end)] if end > start else []
        try:
            return _data_ranges(fd, start, end)
        finally:
            os.close(fd)

    def close(self) -> bool:
        self.hold_descriptor(False)
        try:
            self.buf.close()
        except BufferError:  # a reader still holds a memoryview of it
            return False
        return True


def file_data_ranges(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """Ranges of [start, end) of an open file that may hold data (SEEK_DATA / SEEK_HOLE; the
    whole range where the file system cannot tell): the rest are holes and read as zeros."""
    return _data_ranges(fd, start, end)


def _data_ranges(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    at = start
    while at < end:
        try:
            data = os.lseek(fd, at, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole from here to the end of the file
                break
            return [*ranges, (at, end)]  # no SEEK_DATA: assume data
        if data >= end:
            break
        hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
        ranges.append((data, hole))
        at = hole
    return ranges


class OsFileLock:
    """A ``flock`` held through an open descriptor; ``release`` clears the pid and unlocks."""

    __slots__ = ("path", "_fd")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            os.ftruncate(fd, 0)  # no stale pid for a reader; the file itself stays
        except OSError:
            pass
        os.close(fd)  # closing the last descriptor drops the flock


class OsFileOps:
    """The real file system."""

    def makedirs(self, path: str) -> None:
        make_dirs(path)  # each with its parent's mode (store/file_mode.py)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)

    def open_region(self, path: str, size: int, *, create: bool, sparse: bool = False,
                    sync_dir: bool = True) -> OsRegion:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, file_mode_in(os.path.dirname(path)))
        try:
            if create and sparse:
                os.ftruncate(fd, size)  # a hole: reads give zeros, writes need ``allocate`` first
            elif create:
                _allocate(fd, 0, size, fresh=True)
            elif os.fstat(fd).st_size < size:
                raise OSError(errno.EINVAL, f"{path} is shorter than {size} bytes")
            buf = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                os.remove(path)
            raise
        os.close(fd)  # the mapping keeps its own reference to the file
        if create and sync_dir:
            _fsync_dir(os.path.dirname(path))
        return OsRegion(path, buf)

    def sync_dir(self, path: str) -> None:
        _fsync_dir(path)

    def lock_exclusive(self, path: str) -> OsFileLock:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode_in(os.path.dirname(path)))
        except OSError as e:
            raise StoreError(f"cannot open the lock file {path}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLockedError(path, holder) from None
        except OSError as e:
            os.close(fd)
            raise StoreError(f"cannot lock {path}: {e.strerror or e}") from None
        try:  # who holds it, for the message of whoever is refused; the lock works without it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            log.warning("cannot record the pid in the lock file path=%s err=%s", path, e)
        return OsFileLock(path, fd)

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def read_file(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def write_file(self, path: str, data: bytes) -> None:
        created = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode_in(os.path.dirname(path)))
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_dir(os.path.dirname(path))

    def disk_used_ratio(self, path: str) -> float:
        # df's Use%: used / (used + available to us). Blocks reserved for root (or otherwise not
        # available) count neither way, so a file system with a large reserve is not seen as full.
        st = os.statvfs(path)
        used = st.f_blocks - st.f_bfree
        usable = used + st.f_bavail
        if usable <= 0:
            return 0.0
        return used / usable


_ZERO_FILL = bytes(64 * 1024)
_ZERO_PAGE = bytes(mmap.PAGESIZE)


def allocate_range(fd: int, offset: int, length: int) -> None:
    """Blocks for [offset, offset + length) of an open file that may hold data (see _allocate).

    Raises:
        OSError: no space (ENOSPC, EDQUOT) or another failure.
    """
    _allocate(fd, offset, length)


def _allocate(fd: int, offset: int, length: int, *, fresh: bool = False) -> None:
    """Real blocks for [offset, offset + length): a write into a hole of a full disk would kill the
    process with SIGBUS, while posix_fallocate fails cleanly with ENOSPC (and later writes need no
    block allocation). Where the file system refuses fallocate (glibc already emulates it where
    the kernel lacks it), zeros are written instead, which allocates too: everywhere in a
    ``fresh`` file, else only over pages that read as zeros (holes), never over data."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
        _write_zeros(fd, offset, offset + length, fresh)


def _write_zeros(fd: int, start: int, end: int, fresh: bool) -> None:
    step = len(_ZERO_FILL) if fresh else len(_ZERO_PAGE)
    at = start if fresh else start - start % step
    while at < end:
        n = min(step, end - at)
        if (fresh or os.pread(fd, n, at) == _ZERO_PAGE[:n]) and os.pwrite(fd, _ZERO_FILL[:n], at) != n:
            raise OSError(errno.ENOSPC, "short write while allocating")
        at += n


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _fsync_dir(path: str) -> None:
    """Make a new directory entry durable, so that a power cut cannot lose a whole segment."""
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as e:  # some file systems refuse fsync on directories
        log.debug("directory fsync failed path=%s err=%s", path, e)
    finally:
        os.close(fd)
