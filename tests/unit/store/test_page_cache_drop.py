"""Commit log pages that every consumer group has read leave the page cache (MessageStore.
_drop_read_pages, ConsumerOffsetManager.unread_floor): real segment files, residency read back
with mincore(2)."""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.config import ConfigError, StoreConfig
from orbitmq.store import GetMessageStatus, MessageStore
from orbitmq.store import message_store as message_store_module

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="page cache residency is read with Linux's mincore")

MiB = 1 << 20
BODY = os.urandom(4000)
COUNT = 2000  # ~8.1 MiB of commit log in one 16 MiB segment


def _resident(path: str, start: int, end: int) -> float:
    """The share of the file's pages [start, end) in the page cache: mincore(2) on a fresh
    mapping reports the page cache's state without faulting anything in."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    start -= start % mmap.PAGESIZE
    pages = (end - start + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = ctypes.create_string_buffer(pages)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), end - start, offset=start) as view:
        anchor = ctypes.c_char.from_buffer(view)
        rc = libc.mincore(ctypes.addressof(anchor), end - start, vec)
        del anchor  # the mapping closes only once nothing exports it
    assert rc == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec.raw) / pages


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The newest 1 MiB kept (page_cache_keep_mb=1, no 64 MiB mapped floor) and a floor asked
    for every 1 MiB appended, so that a few MiB show what a broker does over gigabytes. Skips
    where the file system is the page cache itself (tmpfs keeps its pages)."""
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(MiB))
    with open(probe, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, MiB, os.POSIX_FADV_DONTNEED)
    if _resident(str(probe), 0, MiB) > 0.5:
        pytest.skip(f"{tmp_path} keeps its pages in memory whatever is asked (tmpfs)")
    monkeypatch.setattr(message_store_module, "HOT_BYTES", 0)
    monkeypatch.setattr(message_store_module, "RELEASE_STEP_BYTES", MiB)


def _filled(tmp_path: Path, **changes: object) -> MessageStore:
    cfg = config(tmp_path, **{"mapped_file_size_commitlog": 16 * MiB, "page_cache_keep_mb": 1,
                               **changes})
    store = MessageStore(cfg, run_threads=False)
    store.start()
    for i in range(COUNT):
        assert store.put([msg("P", i % 2, BODY)]).ok
    store.run_services_once()  # dispatch
    store.commit_log.flush()
    return store


def _segment(store: MessageStore) -> str:
    files = store.commit_log.mfq.files
    assert len(files) == 1
    return files[0].path


def test_pages_every_group_has_read_leave_the_page_cache_and_read_back(
        tmp_path: Path, small_steps: None) -> None:
    with _filled(tmp_path) as store:
        end = store.max_physical_offset()
        store.unread_floor = lambda: end  # every group has read everything
        path = _segment(store)
        assert _resident(path, 0, end) == 1.0
        store.release_cold_pages()
        assert _resident(path, 0, end - 2 * MiB) < 0.05
        assert _resident(path, end - MiB + mmap.PAGESIZE, end) == 1.0  # the newest MiB stays
        got = store.get_message("g", "P", 1, 0, 32)  # read back from the disk
        assert got.status is GetMessageStatus.FOUND and len(got.buffers) == 32
        assert all(bytes(b).find(BODY) > 0 for b in got.buffers)


def test_pages_a_group_has_still_to_read_stay(tmp_path: Path, small_steps: None) -> None:
    with _filled(tmp_path) as store:
        offsets = ConsumerOffsetManager(str(tmp_path / "store"), store)
        store.unread_floor = offsets.unread_floor
        offsets.commit("all-read", "P", 0, store.get_max_offset_in_queue("P", 0))
        offsets.commit("all-read", "P", 1, store.get_max_offset_in_queue("P", 1))
        offsets.commit("behind", "P", 1, 500)  # queue 1's 500th message, about 4 MiB in
        entry = store.queue_entry("P", 1, 500)
        assert entry is not None
        floor = entry[0]
        assert offsets.unread_floor() == floor
        path, end = _segment(store), store.max_physical_offset()
        store.release_cold_pages()
        assert _resident(path, 0, floor - 64 * 1024) < 0.05
        assert _resident(path, floor + mmap.PAGESIZE, end) == 1.0


def test_unread_floor_of_groups(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=MiB)
    with MessageStore(cfg, run_threads=False) as store:
        for i in range(40):
            assert store.put([msg("A", i % 2, b"x" * 100)]).ok
            assert store.put([msg("B", 0, b"y" * 100)]).ok
        store.run_services_once()
        offsets = ConsumerOffsetManager(str(tmp_path / "store"), store)
        assert offsets.unread_floor() == store.max_physical_offset()  # no group: none to read
        offsets.commit("g1", "A", 0, 20)  # read all of A's queue 0: nothing pending there
        assert offsets.unread_floor() == store.max_physical_offset()
        offsets.commit("g2", "B", 0, 7)
        b7 = store.queue_entry("B", 0, 7)
        assert b7 is not None and offsets.unread_floor() == b7[0]
        offsets.commit("g1", "A", 1, 3)
        a3 = store.queue_entry("A", 1, 3)
        assert a3 is not None and a3[0] < b7[0] and offsets.unread_floor() == a3[0]
        offsets.commit("g3", "gone", 0, 5)  # a topic the store does not hold
        assert offsets.unread_floor() == a3[0]


def test_nothing_is_dropped_without_a_floor_when_turned_off_or_before_the_sync(
        tmp_path: Path, small_steps: None) -> None:
    with _filled(tmp_path) as store:  # no unread_floor: the store alone cannot know readers
        path, end = _segment(store), store.max_physical_offset()
        store.release_cold_pages()
        assert _resident(path, 0, end) == 1.0
    with _filled(tmp_path / "off", page_cache_keep_mb=0) as store:
        store.unread_floor = store.max_physical_offset
        path, end = _segment(store), store.max_physical_offset()
        store.release_cold_pages()
        assert _resident(path, 0, end) == 1.0
    cfg = config(tmp_path / "dirty", mapped_file_size_commitlog=16 * MiB, page_cache_keep_mb=1,
                 flush_interval_commitlog_ms=60_000)
    with MessageStore(cfg, run_threads=False) as store:
        for _ in range(COUNT):
            assert store.put([msg("P", 0, BODY)]).ok
        store.dispatcher.dispatch_available(COUNT, wait=False)  # dispatched, not synced
        store.unread_floor = store.max_physical_offset
        path, end = _segment(store), store.max_physical_offset()
        assert store.dispatched_offset() == end and store.flushed_physical_offset() == 0
        store.release_cold_pages()
        assert _resident(path, 0, end) == 1.0  # unsynced: never dropped


def test_a_floor_that_fails_is_logged_and_drops_nothing(
        tmp_path: Path, small_steps: None, caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> int:
        raise KeyError("a queue deleted meanwhile")

    with _filled(tmp_path) as store:
        store.unread_floor = broken
        path, end = _segment(store), store.max_physical_offset()
        with caplog.at_level(logging.ERROR):
            store.release_cold_pages()
        assert "none dropped from the page cache" in caplog.text
        assert _resident(path, 0, end) == 1.0


def test_page_cache_keep_mb_is_range_checked() -> None:
    with pytest.raises(ConfigError, match="page_cache_keep_mb"):
        StoreConfig(page_cache_keep_mb=-1)
    assert StoreConfig(page_cache_keep_mb=0).page_cache_keep_mb == 0
