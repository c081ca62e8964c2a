"""The file operations the store needs, behind a small protocol so that tests can swap the disk.

The real implementation maps segment files with ``mmap``; ``orbitmq.testing.faulty_files`` provides
one over byte buffers that remembers what an fsync made durable and can simulate a power cut.
A region's ``buf`` is written in place (slice assignment, ``struct.pack_into``) and read through
memoryviews; nothing the store writes is durable before ``sync`` covers it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["MappedRegion", "FileOps", "OsFileOps", "OsRegion"]

log = logging.getLogger(__name__)


class MappedRegion(Protocol):
    """A fixed-size file opened for in-place writes."""

    buf: Any  # writable buffer: mmap.mmap or bytearray

    def sync(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable (msync/fsync); returns when they are."""

    def close(self) -> bool:
        """Release the mapping; False if readers still hold views (retry later)."""


class FileOps(Protocol):
    """Directory and file operations of the store."""

    def makedirs(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]:
        """Names in ``path``; empty when it does not exist."""

    def exists(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int: ...

    def open_region(self, path: str, size: int, *, create: bool) -> MappedRegion:
        """Map ``path``; with ``create`` make a new zero-filled file of ``size`` bytes first.

        Raises:
            OSError: the file cannot be created (e.g. no space left) or opened.
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


class OsRegion:
    """A segment file mapped with ``mmap``.

    ``sync`` is ``fdatasync``, not ``msync`` over the range: on Linux both write back the same
    dirty pages (pages written through a shared mapping are dirty in the page cache and fsync
    covers them), but CPython's ``mmap.flush`` keeps the GIL for the whole ``msync`` while
    ``os.fdatasync`` releases it. Under SYNC_FLUSH the group commit thread syncs all the time:
    with ``msync`` the event loop stood still for every disk round trip (no request decoded, no
    answer sent); with ``fdatasync`` it prepares the next group while the disk writes this one.
    The descriptor is opened per sync (two cheap syscalls next to a disk round trip) so that a
    broker with thousands of consume queue files does not hold thousands of descriptors.
    """

    __slots__ = ("path", "buf", "_addr")

    def __init__(self, path: str, buf: mmap.mmap) -> None:
        self.path = path
        self.buf = buf
        self._addr = 0

    def populate(self, start: int, end: int) -> bool:
        """Fault pages [start, end) in for writing (MADV_POPULATE_WRITE) without the GIL, so that
        the writer's later stores into them take no page fault: a first write into a page of a
        fresh segment costs 5-40 us of kernel time in the writing thread, populating the same
        range in advance about a quarter of it, in another thread. Data is left unchanged. The
        caller keeps the mapping open meanwhile (MappedFile's lock). False when unsupported."""
        if _madvise is None:
            return False
        if not self._addr:
            anchor = ctypes.c_char.from_buffer(self.buf)  # exports the buffer only briefly
            self._addr = ctypes.addressof(anchor)
            del anchor
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
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:  # deleted meanwhile: msync still reaches the mapped pages
            aligned = start - start % mmap.PAGESIZE
            self.buf.flush(aligned, end - aligned)
            return
        try:
            os.fdatasync(fd)  # the whole file: a superset of [start, end)
        finally:
            os.close(fd)

    def close(self) -> bool:
        try:
            self.buf.close()
        except BufferError:  # a reader still holds a memoryview of it
            return False
        return True


class OsFileOps:
    """The real file system."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)

    def open_region(self, path: str, size: int, *, create: bool) -> OsRegion:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o644)
        try:
            if create:
                _allocate(fd, size)
            elif os.fstat(fd).st_size < size:
                raise OSError(errno.EINVAL, f"{path} is shorter than {size} bytes")
            buf = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            if create:
                os.remove(path)
            raise
        os.close(fd)  # the mapping keeps its own reference to the file
        if create:
            _fsync_dir(os.path.dirname(path))
        return OsRegion(path, buf)

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
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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


def _allocate(fd: int, size: int) -> None:
    # Real blocks up front: a write into a hole of a full disk would kill the process with SIGBUS,
    # while posix_fallocate fails cleanly with ENOSPC (and later writes need no block allocation).
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            os.ftruncate(fd, size)
        else:
            raise


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
