"""Store behaviour behind the hot-path work: group commit futures, inline flushes, page release.

- Requests submitted before a sync round share one Future (a Future per put cost ~10 us) and
  each still hears whether its own bytes became durable in time.
- A blocking SYNC_FLUSH put (put, durable_up_to, wake) syncs in its own thread when no round is
  under way; under ASYNC_FLUSH the group commit runs only when someone asks.
- Releasing cold pages (madvise) keeps every byte readable and shrinks the mapped resident size.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.config import FlushDiskType
from orbitmq.store import GetMessageStatus, MessageStore
from orbitmq.store.flush import GroupCommitService
from orbitmq.testing.store_put import put_durably


class FakeLog:
    """A commit log stand-in that records syncs and can fail them."""

    def __init__(self) -> None:
        self.written = 0
        self.syncs = 0
        self.fail = False

    def flush(self) -> int:
        self.syncs += 1
        if self.fail:
            raise OSError("disk gone")
        return self.written


def test_requests_before_a_round_share_one_future_and_one_sync() -> None:
    log = FakeLog()
    service = GroupCommitService(log, timeout_ms=5000)  # type: ignore[arg-type]
    log.written = 300
    first, second = service.submit(100), service.submit(300)
    assert first is second and service.pending == 2 and service.has_work()
    service.run_once()
    assert first.result(0) is True and log.syncs == 1 and not service.has_work()
    third = service.submit(400)  # beyond what the next sync can cover
    assert third is not first
    service.run_once()
    assert third.result(0) is False


def test_a_failed_sync_answers_the_whole_group_false() -> None:
    log = FakeLog()
    service = GroupCommitService(log, timeout_ms=5000)  # type: ignore[arg-type]
    log.written, log.fail = 100, True
    future = service.submit(50)
    service.run_once()
    assert future.result(0) is False


def test_a_late_round_answers_false_after_the_deadline() -> None:
    now = [0.0]
    log = FakeLog()
    service = GroupCommitService(log, timeout_ms=1000, monotonic=lambda: now[0])  # type: ignore[arg-type]
    log.written = 10
    future = service.submit(10)
    now[0] = 2.0  # the disk took two seconds
    service.run_once()
    assert future.result(0) is False


def test_a_caller_runs_the_round_unless_one_is_under_way() -> None:
    log = FakeLog()
    service = GroupCommitService(log, timeout_ms=5000)  # type: ignore[arg-type]
    log.written = 200
    waiting = service.submit(150)
    with service._round_lock:  # a round under way: the caller leaves the request to it
        assert service.try_run_once() is False
    assert not waiting.done()
    assert service.try_run_once() is True
    assert waiting.result(0) is True and log.syncs == 1


def test_without_periodic_rounds_only_requests_make_a_sync() -> None:
    log = FakeLog()
    service = GroupCommitService(log, timeout_ms=5000, periodic=False)  # type: ignore[arg-type]
    log.written = 100
    service.run_once()  # nobody asked: ASYNC_FLUSH syncs at its own pace, not here
    assert log.syncs == 0
    asked = service.submit(100)
    service.run_once()
    assert asked.result(0) is True and log.syncs == 1


def test_blocking_sync_puts_flush_in_the_callers_thread(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commitlog=1 << 20)
    with MessageStore(cfg) as store:
        synced_in: list[int] = []
        flush = store.commit_log.flush

        def recording() -> int:
            synced_in.append(threading.get_ident())
            return flush()

        store.commit_log.flush = recording  # type: ignore[method-assign]
        for i in range(20):
            assert put_durably(store, [msg("S", 0, b"%d" % i)]).ok
            assert store.flushed_physical_offset() >= store.max_physical_offset()
        # One writer: its own thread syncs (the group commit thread may take a round too).
        assert threading.get_ident() in synced_in


def test_async_flush_store_syncs_when_asked(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path, flush_interval_commitlog_ms=60_000)) as store:
        result = store.put([msg("A", 0, b"x")])
        assert result.append is not None and store.flushed_physical_offset() == 0
        assert put_durably(store, [msg("A", 0, b"y")]).ok
        assert store.flushed_physical_offset() == store.max_physical_offset()


def _rss_file_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    return 0


def test_released_pages_stay_readable_and_leave_the_resident_set(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=16 << 20, message_index_enable=True,
                 max_hash_slot_num=1024, max_index_num=8192)
    body = os.urandom(4000)
    with MessageStore(cfg, run_threads=False) as store:
        for i in range(2000):  # ~8 MiB in one segment
            assert store.put([msg("P", i % 2, body, KEYS=f"k{i}")]).ok
        store.run_services_once()
        store.commit_log.flush()
        before = _rss_file_kb()
        store.commit_log.release_cold_pages(hot_bytes=0)
        for cq in store.consume_queue_table.values():
            cq.release_cold_pages(hot_bytes=0)
        assert store.index is not None
        store.index.release_cold_pages()
        if os.path.exists("/proc/self/status"):
            assert before - _rss_file_kb() >= 4 * 1024  # at least 4 of the ~8 MiB unmapped
        got = store.get_message("g", "P", 1, 0, 32)
        assert got.status is GetMessageStatus.FOUND and len(got.buffers) == 32
        assert all(bytes(b).find(body) > 0 for b in got.buffers)
        assert [m.body for m in store.query_message("P", "k1999", 4)] == [body]


def test_released_unsynced_pages_are_still_written_by_the_sync(tmp_path: Path) -> None:
    """Pages released before their flush (ASYNC_FLUSH at a high rate) keep their data dirty in
    the page cache. An O_DIRECT read writes a range's dirty pages back and then reads the disk:
    had releasing lost the dirty state, it would read the segment's preallocated zeros."""
    if not sys.platform.startswith("linux"):
        pytest.skip("unsynced pages are released on Linux only")
    cfg = config(tmp_path, mapped_file_size_commitlog=16 << 20, flush_interval_commitlog_ms=60_000)
    body = os.urandom(4000)
    with MessageStore(cfg, run_threads=False) as store:
        for _ in range(1000):  # 4.1 MB, none of it flushed
            assert store.put([msg("P", 0, body)]).ok
        assert store.flushed_physical_offset() == 0
        before = _rss_file_kb()
        store.commit_log.release_cold_pages(hot_bytes=0)
        assert before - _rss_file_kb() >= 2 * 1024  # unmapped though not synced
        path, size = store.commit_log.mfq.files[0].path, 5 << 20
        with open(path, "rb") as f:
            buffered = f.read(size)
        assert buffered.count(body) == 1000
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        except OSError:
            pytest.skip("no O_DIRECT on this file system")
        try:
            aligned = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT wants
            assert os.preadv(fd, [aligned], 0) == size
        except OSError:
            pytest.skip("no O_DIRECT reads on this file system")
        finally:
            os.close(fd)
        assert aligned[:size] == buffered
