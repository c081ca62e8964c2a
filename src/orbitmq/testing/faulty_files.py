"""An in-memory file system for the store that knows what an fsync made durable.

Every file has two images: ``volatile`` (what the running process reads and writes, i.e. the page
cache) and ``durable`` (what the disk holds). ``sync`` copies a range from the first to the second;
``write_file`` is a write plus fsync. A power cut is simulated by ``reboot``: a new file system
whose files hold their durable image, plus, as a real disk may after a crash, some of the sectors
written since the last sync (chosen by a seeded RNG, in any order). A cut can also strike in the
middle of the store's work: ``cut_after_ops`` makes the N-th durable operation raise ``PowerCut``.

Directory operations (create, delete) are durable at once; the store syncs directories anyway.
"""

from __future__ import annotations

import enum
import posixpath
import random

__all__ = ["PowerCut", "TearMode", "FaultyFileOps", "FaultyRegion", "SECTOR_SIZE"]

SECTOR_SIZE = 512


class PowerCut(BaseException):  # noqa: N818 - an event, not an error; BaseException so no
    """The simulated power went out (the store must not catch this)."""  # handler swallows it


class TearMode(enum.Enum):
    """What survives of the writes not covered by a sync."""

    NONE = "none"  # nothing: exactly the durable image
    LAST_PAGE = "last_page"  # some sectors of each file's last dirty 4 KiB page
    ANY_SECTORS = "any_sectors"  # any subset of dirty sectors (background writeback, any order)


class _File:
    __slots__ = ("volatile", "durable")

    def __init__(self, size: int) -> None:
        self.volatile = bytearray(size)
        self.durable = bytearray(size)


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
        self._file.durable[start:end] = self._file.volatile[start:end]

    def close(self) -> bool:
        return True


class FaultyFileOps:
    """The store's FileOps over memory, with power cuts.

    Args:
        cut_after_ops: raise PowerCut at this many durable operations (sync, write_file, file
            creation, removal); None for never.
        disk_used_ratio_value: what ``disk_used_ratio`` reports (to test retention by disk use).
    """

    def __init__(self, cut_after_ops: int | None = None, disk_used_ratio_value: float = 0.1):
        self.files: dict[str, _File] = {}
        self.small: dict[str, tuple[bytes, bytes]] = {}  # path -> (volatile, durable) contents
        self.dirs: set[str] = {"/"}
        self.ops = 0
        self.cut_after_ops = cut_after_ops
        self.disk_used_ratio_value = disk_used_ratio_value
        self.cut = False

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
        after = FaultyFileOps(disk_used_ratio_value=self.disk_used_ratio_value)
        after.dirs = set(self.dirs)
        for path, f in self.files.items():
            image = bytearray(f.durable)
            for sector in _surviving_sectors(f, rng, mode):
                at = sector * SECTOR_SIZE
                image[at : at + SECTOR_SIZE] = f.volatile[at : at + SECTOR_SIZE]
            g = _File(0)
            g.volatile, g.durable = image, bytearray(image)
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

    def open_region(self, path: str, size: int, *, create: bool) -> FaultyRegion:
        path = posixpath.normpath(path)
        if create:
            if path in self.files:
                raise FileExistsError(path)
            self.tick()
            self.makedirs(posixpath.dirname(path))
            self.files[path] = _File(size)
        f = self.files.get(path)
        if f is None:
            raise FileNotFoundError(path)
        if len(f.volatile) < size:
            raise OSError(f"{path} is shorter than {size} bytes")
        return FaultyRegion(self, f)

    def remove(self, path: str) -> None:
        path = posixpath.normpath(path)
        if path in self.files or path in self.small:
            self.tick()
        self.files.pop(path, None)
        self.small.pop(path, None)

    def remove_tree(self, path: str) -> None:
        path = posixpath.normpath(path)
        prefix = path + "/"
        for table in (self.files, self.small):
            for p in [p for p in table if p.startswith(prefix)]:
                del table[p]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

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
    dirty = [
        s
        for s in range(len(vol) // SECTOR_SIZE)
        if vol[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE] != dur[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE]
    ]
    if not dirty:
        return []
    if mode is TearMode.LAST_PAGE:
        page = dirty[-1] // 8
        candidates = [s for s in dirty if s // 8 == page]
    else:
        candidates = dirty
    return [s for s in candidates if rng.random() < 0.5]
