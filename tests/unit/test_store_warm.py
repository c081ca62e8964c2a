"""Pre-faulting the commit log ahead of the writer (store/warm.py, OsRegion.populate)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from store_fixtures import bodies, config, msg

from orbitmq.store import MessageStore
from orbitmq.store.file_ops import OsFileOps
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
