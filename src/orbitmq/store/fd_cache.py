"""A bounded cache of open file descriptors, for the compact consume queues' pread and pwrite.

A million small queues cannot each keep a descriptor (the process limit is far lower), and
opening the file for every 20-byte read would cost two system calls more than the read. So the
most recently used ``fds_max`` stay open, and the least recently used is closed when another is
needed.

Reads and writes run under the cache's lock: a descriptor closed by an eviction in another
thread could otherwise be reused by the next ``open`` for another file while a thread still
reads through its number, which would read (or worse, write) the wrong file. The calls made
under the lock are one pread or pwrite of a few KiB at most (page cache copies, microseconds);
a sync, which can take milliseconds, runs on a ``dup`` of the descriptor outside it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

from orbitmq.errors import ClientError

__all__ = ["FdCache", "FDS_MAX_DEFAULT"]

FDS_MAX_DEFAULT = 256  # descriptors kept open; the broker's sockets need the process's others


class FdCache:
    """Open descriptors of files keyed by their owner (a queue object: no path string is kept
    per file); ``path`` callables name the file when it must be opened again.

    Args:
        fds_max: most descriptors open at once (at least 1).
    """

    def __init__(self, fds_max: int = FDS_MAX_DEFAULT) -> None:
        if fds_max < 1:
            raise ClientError(f"fds_max must be at least 1, not {fds_max}")
        self.fds_max = fds_max
        self._fds: OrderedDict[Hashable, int] = OrderedDict()
        self._lock = threading.Lock()
        self.opens = 0  # descriptors opened so far (tests and stats)

    def __len__(self) -> int:
        return len(self._fds)

    def _fd(self, owner: Hashable, path: Callable[[], str]) -> int:
        """The owner's descriptor, opened (and the least recent one closed) when needed.
        Caller holds the lock."""
        fds = self._fds
        fd = fds.get(owner)
        if fd is not None:
            fds.move_to_end(owner)
            return fd
        fd = os.open(path(), os.O_RDWR | os.O_CLOEXEC)
        self.opens += 1
        while len(fds) >= self.fds_max:
            _, old = fds.popitem(last=False)
            os.close(old)
        fds[owner] = fd
        return fd

    def adopt(self, owner: Hashable, fd: int) -> None:
        """Keep ``fd``, just opened by the owner (a file it created), as its descriptor: the
        first write of a new file then costs no second open."""
        with self._lock:
            fds = self._fds
            old = fds.pop(owner, None)
            if old is not None:
                os.close(old)
            while len(fds) >= self.fds_max:
                _, evicted = fds.popitem(last=False)
                os.close(evicted)
            fds[owner] = fd

    def pread(self, owner: Hashable, path: Callable[[], str], size: int, at: int) -> bytes:
        """Up to ``size`` bytes at ``at`` of the owner's file (fewer only past its end).

        Raises:
            OSError: the file cannot be opened (deleted: FileNotFoundError) or read.
        """
        with self._lock:
            return os.pread(self._fd(owner, path), size, at)

    def pwrite(self, owner: Hashable, path: Callable[[], str], data: bytes, at: int) -> None:
        """All of ``data`` at ``at`` of the owner's file.

        Raises:
            OSError: no space (ENOSPC, EDQUOT: a sparse file's blocks are allocated by the
                write) or another failure; part of ``data`` may have been written.
        """
        view = memoryview(data)
        with self._lock:
            fd = self._fd(owner, path)
            while view:
                n = os.pwrite(fd, view, at)
                view = view[n:]
                at += n

    def dup(self, owner: Hashable, path: Callable[[], str]) -> int:
        """A descriptor of the owner's file of the caller's own, to sync outside the lock (the
        caller closes it).

        Raises:
            OSError: the file cannot be opened.
        """
        with self._lock:
            return os.dup(self._fd(owner, path))

    def evict(self, owner: Hashable) -> None:
        """Close the owner's descriptor, if open (its file is closed or about to be deleted)."""
        with self._lock:
            fd = self._fds.pop(owner, None)
            if fd is not None:
                os.close(fd)

    def close(self) -> None:
        """Close every descriptor."""
        with self._lock:
            fds, self._fds = self._fds, OrderedDict()
            for fd in fds.values():
                os.close(fd)
