"""The power-loss layer itself (orbitmq.testing.lazyfs), mounted over FUSE: what a process did not
sync is gone after a power cut, what it synced is there; a mapping's pages count only once an
msync (or fdatasync) covered them; a torn cut keeps a prefix; a stall blocks within its bound; a
full disk answers ENOSPC.

Skipped, saying why, where the layer cannot mount (no /dev/fuse, no libfuse 3 or no mfusepy: the
pure-Python CI leg of a machine without them, a user without root or fusermount3).
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path

import pytest

from orbitmq.testing.lazyfs import SECTOR, LazyFs, lazyfs_problem

PROBLEM = lazyfs_problem()
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=f"no FUSE layer: {PROBLEM}"),
              pytest.mark.timeout(120)]

STALL_S = 1.5
STALL_BOUND_S = 10.0  # a stalled operation returns by then, or the layer is broken


def _write(path: Path, data: bytes, *, sync: bool, offset: int = 0) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def test_a_write_without_fsync_is_gone_after_a_power_cut(lazy: LazyFs) -> None:
    f = lazy.mount / "unsynced"
    _write(f, b"a" * 10_000, sync=False)
    assert f.read_bytes() == b"a" * 10_000  # readers see it while the power is on
    assert (lazy.backing / "unsynced").read_bytes() == b""  # the disk does not
    dropped = lazy.power_cut()
    assert dropped["dropped_bytes"] >= 10_000
    with pytest.raises(OSError) as e:  # the disk is gone until the power comes back
        _write(f, b"after the cut", sync=True)
    assert e.value.errno == errno.EIO
    lazy.remount()
    assert f.exists()  # the name was durable at once (metadata)
    assert f.read_bytes() == b""


def test_a_write_with_fsync_survives_and_what_follows_it_does_not(lazy: LazyFs) -> None:
    f = lazy.mount / "synced"
    _write(f, b"s" * 5000, sync=True)
    _write(f, b"u" * 3000, sync=False, offset=5000)
    _write(f, b"x" * 100, sync=False, offset=0)  # an unsynced overwrite of synced bytes
    assert f.read_bytes() == b"x" * 100 + b"s" * 4900 + b"u" * 3000
    lazy.power_cut()
    lazy.remount()
    assert f.read_bytes() == b"s" * 5000


def test_a_close_persists_nothing_but_a_clean_unmount_does(tmp_path: Path) -> None:
    fs = LazyFs(tmp_path / "disk", tmp_path / "mnt")
    try:
        (fs.mount / "closed").write_bytes(b"c" * 100)  # open, write, close
        assert (fs.backing / "closed").read_bytes() == b""
    finally:
        fs.close()
    assert (tmp_path / "disk" / "closed").read_bytes() == b"c" * 100


def _mapped(path: Path, size: int) -> tuple[int, mmap.mmap]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, size)
    return fd, mmap.mmap(fd, size)


def test_a_mapped_write_survives_after_msync_and_is_gone_without(lazy: LazyFs) -> None:
    size = 4 * mmap.PAGESIZE
    synced, unsynced = lazy.mount / "msynced", lazy.mount / "mapped"
    fd1, m1 = _mapped(synced, size)
    fd2, m2 = _mapped(unsynced, size)
    try:
        m1[0:6] = b"durabl"
        m1[mmap.PAGESIZE:mmap.PAGESIZE + 5] = b"page2"
        m1.flush()  # msync(MS_SYNC): WRITE then FSYNC reach the layer
        m2[0:5] = b"gone!"
        m1[2 * mmap.PAGESIZE:2 * mmap.PAGESIZE + 5] = b"later"  # after the msync: lost
        assert bytes(m2[0:5]) == b"gone!"
        lazy.power_cut()
    finally:
        for m in (m1, m2):
            m.close()
        os.close(fd1)
        os.close(fd2)
    lazy.remount()
    data = synced.read_bytes()
    assert len(data) == size  # the size came with ftruncate: durable at once
    assert data[0:6] == b"durabl" and data[mmap.PAGESIZE:mmap.PAGESIZE + 5] == b"page2"
    assert data[2 * mmap.PAGESIZE:2 * mmap.PAGESIZE + 5] == bytes(5)
    assert unsynced.read_bytes() == bytes(size)


def test_fdatasync_covers_the_pages_of_a_mapping(lazy: LazyFs) -> None:
    """The store syncs its mapped segments with fdatasync, not msync (store/file_ops.py)."""
    f = lazy.mount / "segment"
    fd, m = _mapped(f, 2 * mmap.PAGESIZE)
    try:
        m[100:105] = b"store"
        os.fdatasync(fd)
        lazy.power_cut()
    finally:
        m.close()
        os.close(fd)
    lazy.remount()
    assert f.read_bytes()[100:105] == b"store"


def test_a_torn_cut_keeps_a_sector_prefix_of_the_unsynced_pages(lazy: LazyFs) -> None:
    f = lazy.mount / "torn"
    data = bytes(range(256)) * 256  # 64 KiB, every sector different
    _write(f, data, sync=False)
    seed = 7
    torn = lazy.power_cut(tear_seed=seed)["torn"]
    assert torn["path"] == "/torn" and torn["unsynced_bytes"] == len(data)
    kept = torn["kept_bytes"]
    assert 0 < kept < len(data) and kept % SECTOR == 0, torn  # the seed tears in the middle
    lazy.remount()
    assert f.read_bytes() == data[:kept]


def _timed(fn: object) -> tuple[float, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()  # type: ignore[operator]
        except BaseException as e:  # reported to the test
            errors.append(e)

    began = time.monotonic()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(STALL_BOUND_S)
    assert not t.is_alive(), f"an operation stalled past {STALL_BOUND_S} s"
    return time.monotonic() - began, errors


def test_a_stall_blocks_every_operation_for_its_time_and_clear_ends_it(lazy: LazyFs) -> None:
    f = lazy.mount / "stalled"
    _write(f, b"before", sync=True)
    lazy.stall(STALL_S)
    took, errors = _timed(lambda: _write(f, b"during", sync=True))
    assert not errors, errors
    assert STALL_S * 0.8 <= took < STALL_BOUND_S, took
    lazy.stall(60)
    threading.Timer(0.3, lazy.clear).start()
    took, errors = _timed(lambda: _write(f, b"cleared", sync=True))
    assert not errors and took < 5.0, (took, errors)
    lazy.power_cut()
    lazy.remount()
    assert f.read_bytes() == b"cleared"


def test_a_full_disk_answers_enospc_until_cleared(lazy: LazyFs) -> None:
    f = lazy.mount / "full"
    _write(f, b"ok", sync=True)
    fd, m = _mapped(lazy.mount / "mapped-full", mmap.PAGESIZE)
    try:
        lazy.full()
        with pytest.raises(OSError) as e:
            _write(f, b"no room", sync=True)
        assert e.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as e:
            os.posix_fallocate(fd, 0, 16 * mmap.PAGESIZE)
        assert e.value.errno == errno.ENOSPC
        assert os.statvfs(lazy.mount).f_bavail == 0
        m[0:4] = b"page"  # into the page cache: the write-back is what fails
        with pytest.raises(OSError) as e:
            os.fdatasync(fd)
        assert e.value.errno in (errno.ENOSPC, errno.EIO)
        lazy.clear()
        _write(f, b"room again", sync=True)
        m[0:4] = b"page"  # dirty again (Linux marked the page clean when its write-back failed)
        os.fdatasync(fd)
        lazy.power_cut()
    finally:
        m.close()
        os.close(fd)
    lazy.remount()
    assert f.read_bytes() == b"room again"
    assert (lazy.mount / "mapped-full").read_bytes()[:4] == b"page"


def test_a_page_whose_write_back_failed_stays_cached_as_on_a_local_disk(lazy: LazyFs) -> None:
    """The kernel drops no clean page behind the writer's back (FUSE_CAP_AUTO_INVAL_DATA off):
    after a failed write-back the page is clean but holds the only copy of its data, which the
    store's retry writes again (MappedFile.flush); read back stale, it would leave a hole."""
    f = lazy.mount / "kept"
    fd, m = _mapped(f, 2 * mmap.PAGESIZE)
    try:
        m[0:4] = b"old!"
        os.fdatasync(fd)
        lazy.full()
        m[0:4] = b"new!"
        with pytest.raises(OSError):
            os.fdatasync(fd)
        lazy.clear()
        m[mmap.PAGESIZE:mmap.PAGESIZE + 4] = b"next"
        os.fdatasync(fd)  # the backing file's mtime moves on
        time.sleep(1.2)  # past the attribute timeout: the next stat asks the layer
        os.stat(f)
        assert os.pread(fd, 4, 0) == b"new!"
    finally:
        m.close()
        os.close(fd)
