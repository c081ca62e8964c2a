"""An in-memory file system for the store that knows what an fsync made durable.

Every file has two images: ``volatile`` (what the running process reads and writes, i.e. the page
cache) and ``durable`` (what the disk holds). ``sync`` copies a range from the first to the second;
``write_file`` is a write plus fsync. A power cut is simulated by ``reboot``: a new file system
whose files hold their durable image, plus, as a real disk may after a crash, some of the sectors
written since the last sync (chosen by a seeded RNG, in any order). A cut can also strike in the
middle of the store's work: ``cut_after_ops`` makes the N-th durable operation raise ``PowerCut``.

Directory operations (create, delete) are durable at once; the store syncs directories anyway.

A disk that fills up and fails: ``capacity_bytes`` bounds the pages files may allocate (a segment
created in full takes all its pages, a sparse one none until ``allocate``); beyond it creation and
allocation raise ENOSPC. A store into a page that was never allocated would have been a SIGBUS on a
real full disk; it cannot be caught when it happens (the buffer is plain memory), so
``unbacked_writes`` finds such pages afterwards (non-zero bytes where no block was allocated).
``fail_syncs`` makes the next N syncs raise EIO the way Linux fails them: the dirty sectors of the
range are left "clean" without reaching the disk, and a later sync skips them unless they were
written again or ``mark_dirty`` was called.

Locks: ``lock_exclusive`` keeps a table of held locks in the FaultyFileOps, the simulated kernel: a
second lock of the same path is refused until ``release``; ``reboot`` (the power went out, every
process with it) starts with none. Lock files hold no data here, and taking one is not a durable operation
(simulations that count operations are not shifted by it).
"""

from __future__ import annotations

import enum
import errno
import mmap
import os
import posixpath
import random

from orbitmq.store.file_ops import StoreLockedError

__all__ = ["PowerCut", "TearMode", "FaultyFileOps", "FaultyRegion", "FaultyLock", "SECTOR_SIZE",
           "PAGE_SIZE"]

SECTOR_SIZE = 512
PAGE_SIZE = mmap.PAGESIZE


class PowerCut(BaseException):  # noqa: N818 - an event, not an error; BaseException so no
    """The simulated power went out (the store must not catch this)."""  # handler swallows it


class TearMode(enum.Enum):
    """What survives of the writes not covered by a sync."""

    NONE = "none"  # nothing: exactly the durable image
    LAST_PAGE = "last_page"  # some sectors of each file's last dirty 4 KiB page
    ANY_SECTORS = "any_sectors"  # any subset of dirty sectors (background writeback, any order)


class _File:
    __slots__ = ("volatile", "durable", "allocated", "dropped")

    def __init__(self, size: int, *, allocated: bool = True) -> None:
        self.volatile = bytearray(size)
        self.durable = bytearray(size)
        self.allocated = bytearray(b"\x01" if allocated else b"\x00") * _pages(size)
        self.dropped: dict[int, bytes] = {}  # sector -> contents a failed sync left "clean"


def _pages(size: int) -> int:
    return -(-size // PAGE_SIZE)


class FaultyRegion:
    """A mapped region over a simulated file."""

    __slots__ = ("_ops", "_file", "buf")

    def __init__(self, ops: FaultyFileOps, f: _File) -> None:
        self._ops = ops
        self._file = f
        self.buf = f.volatile

    def sync(self, start: int, end: int) -> None:
        self._ops.tick()
        start -= start % SECTOR_SIZE
        f = self._file
        if self._ops.fail_syncs > 0:
            self._ops.fail_syncs -= 1
            for sector in range(start // SECTOR_SIZE, -(-end // SECTOR_SIZE)):
                at = sector * SECTOR_SIZE
                if f.volatile[at : at + SECTOR_SIZE] != f.durable[at : at + SECTOR_SIZE]:
                    f.dropped[sector] = bytes(f.volatile[at : at + SECTOR_SIZE])
            raise OSError(errno.EIO, "Input/output error (simulated)")
        if not f.dropped:
            f.durable[start:end] = f.volatile[start:end]
            return
        for at in range(start, end, SECTOR_SIZE):
            sector, stop = at // SECTOR_SIZE, min(at + SECTOR_SIZE, end)
            kept = f.dropped.get(sector)
            if kept is not None and kept == f.volatile[at : at + SECTOR_SIZE]:
                continue  # clean in the kernel's eyes: not written, though never on disk
            f.dropped.pop(sector, None)
            f.durable[at:stop] = f.volatile[at:stop]

    def allocate(self, start: int, end: int) -> None:
        f = self._file
        assert not any(f.volatile[start:end]), "allocate over data (the range must be unwritten)"
        first, last = start // PAGE_SIZE, _pages(min(end, len(f.volatile)))
        missing = [page for page in range(first, last) if not f.allocated[page]]
        self._ops.take_pages(len(missing))
        for page in missing:
            f.allocated[page] = 1

    def data_ranges(self, start: int, end: int) -> list[tuple[int, int]]:
        f = self._file
        ranges: list[tuple[int, int]] = []
        for page in range(start // PAGE_SIZE, _pages(min(end, len(f.volatile)))):
            if not f.allocated[page]:
                continue
            lo, hi = max(page * PAGE_SIZE, start), min((page + 1) * PAGE_SIZE, end)
            if ranges and ranges[-1][1] == lo:
                ranges[-1] = (ranges[-1][0], hi)
            else:
                ranges.append((lo, hi))
        return ranges

    def mark_dirty(self, start: int, end: int) -> None:
        f = self._file
        for sector in range(start // SECTOR_SIZE, -(-end // SECTOR_SIZE)):
            f.dropped.pop(sector, None)

    def close(self) -> bool:
        return True


class FaultyLock:
    """A lock in FaultyFileOps's table."""

    def __init__(self, ops: FaultyFileOps, path: str) -> None:
        self._ops = ops
        self.path = path

    def release(self) -> None:
        self._ops.locks.pop(self.path, None)


class FaultyFileOps:
    """The store's FileOps over memory, with power cuts.

    Args:
        cut_after_ops: raise PowerCut at this many durable operations (sync, write_file, file
            creation, removal); None for never.
        disk_used_ratio_value: what ``disk_used_ratio`` reports (to test retention by disk use).
        capacity_bytes: space for the pages of mapped files (see the module docstring); None
            for no limit. ``used_bytes`` is what they hold now; small files are not counted.

    Attributes:
        fail_syncs: how many of the next syncs fail with EIO (see the module docstring).
        locks: held locks, path -> holder pid.
    """

    def __init__(self, cut_after_ops: int | None = None, disk_used_ratio_value: float = 0.1,
                 capacity_bytes: int | None = None):
        self.files: dict[str, _File] = {}
        self.small: dict[str, tuple[bytes, bytes]] = {}  # path -> (volatile, durable) contents
        self.dirs: set[str] = {"/"}
        self.ops = 0
        self.cut_after_ops = cut_after_ops
        self.disk_used_ratio_value = disk_used_ratio_value
        self.cut = False
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.fail_syncs = 0
        self.locks: dict[str, int] = {}

    # -- space ----------------------------------------------------------------------------------

    def take_pages(self, count: int) -> None:
        """Account ``count`` newly allocated pages; ENOSPC (and nothing taken) past capacity."""
        need = count * PAGE_SIZE
        if self.capacity_bytes is not None and self.used_bytes + need > self.capacity_bytes:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        self.used_bytes += need

    def unbacked_writes(self) -> list[tuple[str, int]]:
        """(path, page) of every page holding data that was never allocated: on a real full
        disk the store into it would have killed the process (SIGBUS)."""
        found = []
        for path, f in self.files.items():
            for page, allocated in enumerate(f.allocated):
                if not allocated and any(f.volatile[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]):
                    found.append((path, page))
        return found

    # -- the power ------------------------------------------------------------------------------

    def tick(self) -> None:
        """Count one durable operation; raise PowerCut if this is the chosen one."""
        if self.cut:
            raise PowerCut("the power is already out")
        self.ops += 1
        if self.cut_after_ops is not None and self.ops >= self.cut_after_ops:
            self.cut = True
            raise PowerCut(f"power cut at operation {self.ops}")

    def reboot(self, rng: random.Random, mode: TearMode = TearMode.ANY_SECTORS) -> FaultyFileOps:
        """The file system as found after the power comes back."""
        after = FaultyFileOps(disk_used_ratio_value=self.disk_used_ratio_value,
                              capacity_bytes=self.capacity_bytes)
        after.dirs = set(self.dirs)
        after.used_bytes = self.used_bytes
        for path, f in self.files.items():
            image = bytearray(f.durable)
            for sector in _surviving_sectors(f, rng, mode):
                at = sector * SECTOR_SIZE
                image[at : at + SECTOR_SIZE] = f.volatile[at : at + SECTOR_SIZE]
            g = _File(0)
            g.volatile, g.durable, g.allocated = image, bytearray(image), bytearray(f.allocated)
            after.files[path] = g
        for path, (volatile, durable) in self.small.items():
            kept = volatile if mode is not TearMode.NONE and rng.random() < 0.5 else durable
            after.small[path] = (kept, kept)
        return after

    # -- FileOps --------------------------------------------------------------------------------

    def makedirs(self, path: str) -> None:
        path = posixpath.normpath(path)
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def listdir(self, path: str) -> list[str]:
        path = posixpath.normpath(path)
        names = {
            posixpath.basename(p)
            for p in [*self.files, *self.small, *self.dirs]
            if posixpath.dirname(p) == path and p != path
        }
        return sorted(names)

    def exists(self, path: str) -> bool:
        path = posixpath.normpath(path)
        return path in self.files or path in self.small or path in self.dirs

    def file_size(self, path: str) -> int:
        path = posixpath.normpath(path)
        if path in self.small:
            return len(self.small[path][0])
        return len(self.files[path].volatile)

    def open_region(self, path: str, size: int, *, create: bool, sparse: bool = False,
                    sync_dir: bool = True) -> FaultyRegion:
        path = posixpath.normpath(path)
        if create:
            if path in self.files:
                raise FileExistsError(path)
            taken = 0 if sparse else _pages(size)
            self.take_pages(taken)  # posix_fallocate: ENOSPC before the file exists
            try:
                self.tick()
            except PowerCut:
                self.used_bytes -= taken * PAGE_SIZE
                raise
            self.makedirs(posixpath.dirname(path))
            self.files[path] = _File(size, allocated=not sparse)
        f = self.files.get(path)
        if f is None:
            raise FileNotFoundError(path)
        if len(f.volatile) < size:
            raise OSError(f"{path} is shorter than {size} bytes")
        return FaultyRegion(self, f)

    def sync_dir(self, path: str) -> None:
        """Directory operations are durable at once here (see the module docstring)."""

    def lock_exclusive(self, path: str) -> FaultyLock:
        path = posixpath.normpath(path)
        if path in self.locks:
            raise StoreLockedError(path, self.locks[path])
        self.locks[path] = os.getpid()
        return FaultyLock(self, path)

    def remove(self, path: str) -> None:
        path = posixpath.normpath(path)
        if path in self.files or path in self.small:
            self.tick()
        self._drop(self.files.pop(path, None))
        self.small.pop(path, None)

    def remove_tree(self, path: str) -> None:
        path = posixpath.normpath(path)
        prefix = path + "/"
        for p in [p for p in self.files if p.startswith(prefix)]:
            self._drop(self.files.pop(p))
        for p in [p for p in self.small if p.startswith(prefix)]:
            del self.small[p]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

    def _drop(self, f: _File | None) -> None:
        if f is not None:
            self.used_bytes -= sum(f.allocated) * PAGE_SIZE

    def read_file(self, path: str) -> bytes | None:
        found = self.small.get(posixpath.normpath(path))
        return None if found is None else found[0]

    def write_file(self, path: str, data: bytes) -> None:
        path = posixpath.normpath(path)
        old = self.small.get(path, (b"", b""))
        self.small[path] = (bytes(data), old[1])  # written, not yet synced
        self.tick()
        self.small[path] = (bytes(data), bytes(data))

    def disk_used_ratio(self, path: str) -> float:
        return self.disk_used_ratio_value


def _surviving_sectors(f: _File, rng: random.Random, mode: TearMode) -> list[int]:
    if mode is TearMode.NONE:
        return []
    vol, dur = f.volatile, f.durable
    if vol == dur:
        return []
    dirty = [  # sectors a failed sync left "clean" are never written back
        s
        for s in range(len(vol) // SECTOR_SIZE)
        if vol[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE] != dur[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE]
        and f.dropped.get(s) != vol[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE]
    ]
    if not dirty:
        return []
    if mode is TearMode.LAST_PAGE:
        page = dirty[-1] // 8
        candidates = [s for s in dirty if s // 8 == page]
    else:
        candidates = dirty
    return [s for s in candidates if rng.random() < 0.5]
