"""Pre-faulting the commit log ahead of the writer (store/warm.py, OsRegion.populate)."""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from store_fixtures import bodies, config, msg

from orbitmq.config import FlushDiskType
from orbitmq.store import MessageStore, hot_pages, warm
from orbitmq.store.file_ops import OsFileOps
from orbitmq.store.hot_pages import HUGE_PAGE, HotPages
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.warm import PageWarmService
from orbitmq.testing.faulty_files import FaultyFileOps

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE")


def _resident_kib(path: str) -> int:
    """Rss of this process's mapping of ``path`` (/proc/self/smaps), in KiB."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(path):
            for follow in lines[i + 1 :]:
                if follow.startswith("Rss:"):
                    return int(follow.split()[1])
    raise AssertionError(f"{path} is not mapped")


@linux
def test_populate_maps_pages_without_changing_a_byte(tmp_path: Path) -> None:
    path = str(tmp_path / "seg")
    mf = MappedFile.open(OsFileOps(), path, 0, 4 << 20, create=True)
    try:
        data = os.urandom(10_000)
        mf.append(data)  # written, not synced: populate must leave it alone
        before = _resident_kib(path)
        assert mf.populate(0, 2 << 20)
        assert _resident_kib(path) >= before + 1800
        assert bytes(mf.slice(0, len(data))) == data
        assert bytes(mf.slice(len(data), 1 << 20)) == bytes(1 << 20)
        mf.append(b"after")
        assert bytes(mf.slice(len(data), 5)) == b"after"
    finally:
        mf.close()
    assert not mf.populate(0, 4096), "a closed segment is never touched"


@linux
def test_the_service_keeps_a_window_ahead_of_the_writer(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=8 << 20)
    with MessageStore(cfg, run_threads=False) as store:
        warm = PageWarmService(store.commit_log, ahead=1 << 20)
        assert store.put([msg(body=b"x" * 1000)]).status.name == "PUT_OK"
        warm.run_once()
        mf = store.commit_log.mfq.files[-1]
        assert warm.enabled and _resident_kib(mf.path) >= 1000
        assert warm.wake_at == mf.wrote_position + (1 << 20) - (1 << 19)  # half the window used
        while store.commit_log.max_offset < warm.wake_at:  # bounded: ~480 puts
            store.put([msg(body=b"y" * 1000)])
        warm.run_once()
        assert warm.wake_at >= (1 << 20) and _resident_kib(mf.path) >= 1500
        # every message written while the service warmed is intact
        store.run_services_once()
        got: list[bytes] = []
        while len(got) < store.get_max_offset_in_queue("T", 0):
            got += bodies(store.get_message("g", "T", 0, len(got), 32))
        assert got[0] == b"x" * 1000 and got[1:] == [b"y" * 1000] * (len(got) - 1)
        assert len(got) > 450  # 512 KiB of 1 KiB messages


def _anonymous_mappings() -> int:
    """How many anonymous mappings this process has (/proc/self/maps lines with no path)."""
    return sum(1 for line in Path("/proc/self/maps").read_text().splitlines()
               if len(line.split()) == 5)


@linux
def test_hot_pages_touch_whole_huge_pages_and_keep_none() -> None:
    hot = HotPages()
    before = _anonymous_mappings()
    assert hot.supply(0) == 0
    assert hot.supply(1) == HUGE_PAGE
    assert hot.supply(5 << 20) == 6 << 20  # rounded up to whole huge pages
    assert hot.supply(hot_pages.SUPPLY_STEP_MAX * 2 + 1) == hot_pages.SUPPLY_STEP_MAX * 2 + HUGE_PAGE
    assert _anonymous_mappings() <= before, "every map it made is gone again"


def test_hot_pages_without_memory_stop_trying_and_say_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*args: object, **kwargs: object) -> mmap.mmap:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    hot = HotPages()
    monkeypatch.setattr(hot_pages.mmap, "mmap", refuse)
    with caplog.at_level("WARNING", logger="orbitmq.store.hot_pages"):
        assert hot.supply(4 << 20) == 0
    assert not hot.enabled and "hot pages for the commit log unavailable" in caplog.text
    assert hot.supply(4 << 20) == 0


class _CountingHotPages(HotPages):
    """Records what the warming asked for, and supplies it for real."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def supply(self, nbytes: int) -> int:
        self.asked.append(nbytes)
        return super().supply(nbytes)


@linux
def test_async_warming_supplies_hot_memory_for_its_window_and_readahead_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round supplies what the window and the readahead past it will take, beyond what
    earlier rounds supplied: the memory is touched once, not once a round."""
    made: list[_CountingHotPages] = []
    monkeypatch.setattr(warm, "HotPages", lambda: made.append(_CountingHotPages()) or made[-1])
    cfg = config(tmp_path, mapped_file_size_commitlog=32 << 20)
    with MessageStore(cfg, run_threads=False) as store:
        service = PageWarmService(store.commit_log, ahead=1 << 20)
        hot = made[-1]
        assert store.put([msg(body=b"x" * 1000)]).ok
        mf = store.commit_log.mfq.files[-1]
        start = mf.wrote_position
        service.run_once()
        assert hot.asked == [(1 << 20) + warm.HOT_LEAD]  # from where the writer is
        hot_to = start + 5 * HUGE_PAGE  # 9 MiB rounded up to whole huge pages
        while store.commit_log.max_offset < service.wake_at:  # half a window: ~520 puts
            assert store.put([msg(body=b"y" * 1000)]).ok
        service.run_once()
        assert len(hot.asked) == 1, "the first supply still covers the window and its readahead"
        while mf.wrote_position < start + (2 << 20):  # the lead's last huge page now needed
            assert store.put([msg(body=b"z" * 30_000)]).ok
        service.run_once()
        assert hot.asked[1:] == [mf.wrote_position + (1 << 20) + warm.HOT_LEAD - hot_to]
        store.run_services_once()
        assert bodies(store.get_message("g", "T", 0, 0, 1)) == [b"x" * 1000]


@linux
def test_sync_flush_warming_supplies_no_hot_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its segment stays in 4 KiB pages (SmallFolios), which come from smaller free blocks."""
    made: list[_CountingHotPages] = []
    monkeypatch.setattr(warm, "HotPages", lambda: made.append(_CountingHotPages()) or made[-1])
    with _sync_store(tmp_path) as store:
        service = PageWarmService(store.commit_log, sync_ahead=True)
        assert store.put([msg(body=b"x" * 1000)]).ok
        service.run_once()
        assert made == []


def test_a_region_that_cannot_populate_turns_the_service_off(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with MessageStore(cfg, file_ops=FaultyFileOps(), run_threads=False) as store:
        store.put([msg()])
        warm = PageWarmService(store.commit_log)
        warm.run_once()
        assert not warm.enabled
        warm.run_once()  # and stays quiet


def test_page_release_is_woken_by_the_bytes_appended_not_only_by_its_interval(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``wake`` wakes the PageReleaseService once per RELEASE_STEP_BYTES appended: at a few
    hundred MB/s its 200 ms interval alone let written pages pile up (soak_bench)."""
    from orbitmq.store import message_store

    monkeypatch.setattr(message_store, "RELEASE_STEP_BYTES", 1 << 20)
    cfg = config(tmp_path, mapped_file_size_commitlog=4 << 20)
    with MessageStore(cfg) as store:
        woken: list[int] = []
        monkeypatch.setattr(store.page_release, "wakeup_if_waiting",
                            lambda: woken.append(store.commit_log.max_offset))
        for _ in range(100):  # ~3.2 MiB
            store.put([msg("R", 0, b"r" * 32_000)])
            store.wake()
        assert len(woken) == 4  # at the first wake, then past 1, 2 and 3 MiB more
        assert all(b - a >= 1 << 20 for a, b in zip(woken, woken[1:], strict=False))


def _in_a_thread_within(timeout_s: float, fn: Callable[..., object], **kwargs: object) -> None:
    worker = threading.Thread(target=fn, kwargs=kwargs)
    worker.start()
    worker.join(timeout=timeout_s)
    assert not worker.is_alive(), f"{fn} waited"


@linux
def test_releasing_and_warming_go_on_while_a_sync_holds_the_segment(tmp_path: Path) -> None:
    """A sync of a busy segment takes 100 ms and more: the appender unmapping what it has just
    written, and the warm thread populating ahead of it, do not wait for it."""
    cfg = config(tmp_path, mapped_file_size_commitlog=16 << 20)
    body = os.urandom(4000)
    with MessageStore(cfg, run_threads=False) as store:
        for _ in range(2000):  # ~8 MiB, mapped by the writes
            assert store.put([msg(body=body)]).ok
        mf = store.commit_log.mfq.files[-1]
        before = _resident_kib(mf.path)
        with mf._io_lock:  # what MappedFile.flush holds through its sync
            _in_a_thread_within(10, store.commit_log.release_cold_pages, hot_bytes=0, newest=True)
            assert _resident_kib(mf.path) <= before - 4096
            ahead = mf.wrote_position
            _in_a_thread_within(10, mf.populate, start=ahead, end=ahead + (1 << 20))
            assert _resident_kib(mf.path) >= 1000


@linux
def test_the_appenders_release_passes_a_segment_being_warmed(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=16 << 20)
    with MessageStore(cfg, run_threads=False) as store:
        for _ in range(2000):
            assert store.put([msg(body=b"w" * 4000)]).ok
        mf = store.commit_log.mfq.files[-1]
        before = _resident_kib(mf.path)
        with mf._map_lock:  # what a populate step holds
            _in_a_thread_within(10, store.commit_log.release_cold_pages, hot_bytes=0, newest=True)
            assert _resident_kib(mf.path) >= before - 64, "released under a populate step"
        store.commit_log.release_cold_pages(hot_bytes=0)  # the release thread's call waits its turn
        assert _resident_kib(mf.path) <= before - 4096


_FIEMAP = 0xC020660B  # FS_IOC_FIEMAP
_EXTENT_UNWRITTEN = 0x800
_EXTENT_LAST = 0x1


def _unwritten(path: str) -> list[tuple[int, int]]:
    """The file's [start, end) ranges allocated but never written (fallocate's), by FIEMAP;
    skips the test where the file system cannot tell."""
    ranges: list[tuple[int, int]] = []
    start, count = 0, 64
    with open(path, "rb") as f:
        while True:
            request = bytearray(struct.pack("=QQIIII", start, 2**64 - 1 - start, 0, 0, count, 0))
            request += bytes(56 * count)
            try:
                fcntl.ioctl(f.fileno(), _FIEMAP, request)
            except OSError as e:
                pytest.skip(f"no FIEMAP here: {e}")
            mapped = struct.unpack_from("=I", request, 20)[0]
            last = 0
            for i in range(mapped):
                logical, _, length = struct.unpack_from("=QQQ", request, 32 + 56 * i)
                flags = struct.unpack_from("=I", request, 32 + 56 * i + 40)[0]
                if flags & _EXTENT_UNWRITTEN:
                    ranges.append((logical, logical + length))
                last = flags
                start = logical + length
            if mapped < count or last & _EXTENT_LAST:
                return ranges


def _sync_store(tmp_path: Path) -> MessageStore:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                 mapped_file_size_commitlog=16 << 20)
    return MessageStore(cfg, run_threads=False)


@linux
def test_under_sync_flush_the_window_ahead_is_written_before_the_writer_gets_there(
        tmp_path: Path) -> None:
    """The sends of a lone producer find their blocks written (zeros, synced): their own syncs
    write their page and have no block to record as written (warm.py)."""
    with _sync_store(tmp_path) as store:
        assert store.page_warm.sync_ahead and store.page_warm.ahead == warm.SYNC_AHEAD
        assert store.put([msg(body=b"x" * 1000)]).ok
        mf = store.commit_log.mfq.files[-1]
        if not _unwritten(mf.path):
            pytest.skip("this file system allocates no unwritten blocks")
        flushed = mf.flushed_position
        store.page_warm.run_once()
        window_end = mf.wrote_position + warm.SYNC_AHEAD
        unwritten = _unwritten(mf.path)
        assert unwritten and all(start >= window_end - 4096 for start, _ in unwritten)
        assert unwritten[-1][1] == mf.file_size  # past the window, as fallocate left it
        assert mf.flushed_position == flushed, "durability is the flushes' to claim"
        store.run_services_once()
        assert bodies(store.get_message("g", "T", 0, 0, 32)) == [b"x" * 1000]


@linux
def test_a_fast_writer_gets_no_synced_window(tmp_path: Path) -> None:
    """Groups of many producers' sends record the blocks once a sync: zeros synced ahead of
    them would only double the bytes written."""
    now = [100.0]
    with _sync_store(tmp_path) as store:
        service = PageWarmService(store.commit_log, sync_ahead=True, clock=lambda: now[0])
        assert store.put([msg(body=b"x" * 1000)]).ok
        mf = store.commit_log.mfq.files[-1]
        if not _unwritten(mf.path):
            pytest.skip("this file system allocates no unwritten blocks")
        mf.hold_descriptor(True)  # what SmallFolios does for the writer's syncs
        service.run_once()  # the first round has no rate to go by: it warms
        window_end = _unwritten(mf.path)[0][0]
        assert window_end >= mf.wrote_position + warm.SYNC_AHEAD - 4096
        while mf.wrote_position < window_end + (2 << 20):  # 3 MiB in 10 ms: 300 MB/s
            assert store.put([msg(body=b"y" * 30_000)]).ok
        now[0] += 0.01
        service.run_once()
        # nothing synced ahead of a fast writer (the kernel may write back its own pages)
        last_start, last_end = _unwritten(mf.path)[-1]
        assert last_start <= -(-mf.wrote_position // 4096) * 4096 and last_end == mf.file_size
        assert service.wake_at == mf.file_from_offset + mf.wrote_position + 8 * warm.SYNC_AHEAD
        now[0] += 10.0  # slow again: a few bytes in 10 s
        assert store.put([msg(body=b"z" * 1000)]).ok
        service.run_once()
        assert _unwritten(mf.path)[0][0] >= mf.wrote_position + warm.SYNC_AHEAD - 4096
        mf.hold_descriptor(False)


@linux
def test_a_failed_sync_ahead_has_the_writers_next_flush_write_its_range_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed write-back leaves the pages it tried clean, the writer's unsynced ones among
    them: the writer's next flush marks its range dirty again before it syncs."""
    from orbitmq.store import file_ops

    with _sync_store(tmp_path) as store:
        assert store.put([msg(body=b"x" * 1000)]).ok
        mf = store.commit_log.mfq.files[-1]
        mf.hold_descriptor(True)

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "write-back failed")

        monkeypatch.setattr(file_ops.os, "fdatasync", failing)
        with pytest.raises(OSError):
            store.page_warm.run_once()
        monkeypatch.undo()
        dirtied: list[tuple[int, int]] = []
        region = type(mf._region)
        mark_dirty = region.mark_dirty
        monkeypatch.setattr(region, "mark_dirty", lambda self, start, end: (
            dirtied.append((start, end)), mark_dirty(self, start, end)))
        assert mf.flush() == mf.wrote_position
        assert dirtied == [(0, mf.wrote_position)]
        mf.hold_descriptor(False)
