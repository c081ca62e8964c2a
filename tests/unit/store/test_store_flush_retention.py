"""Flush services (group commit, timeouts, interval flush) and retention by age and disk use."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

from store_fixtures import Clock, CountingFileOps, config, mapped_queue, msg

from orbitmq.config import FlushDiskType
from orbitmq.store import GetMessageStatus, MessageStore, PutMessageStatus
from orbitmq.testing.store_put import put_durably

HOUR_MS = 3_600_000


def test_sync_flush_group_commit_covers_many_waiters_with_one_sync(tmp_path: Path) -> None:
    ops = CountingFileOps()
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, mapped_file_size_commitlog=1 << 20)
    results: list[PutMessageStatus] = []
    with MessageStore(cfg, file_ops=ops) as store:
        ops.sync_delay_s = 0.002  # a disk that takes a moment lets waiters pile up
        before = ops.syncs

        def writer() -> None:
            for _ in range(50):
                results.append(put_durably(store, [msg("G", 0, b"x" * 100)]).status)

        threads = [threading.Thread(target=writer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        commit_syncs = ops.syncs - before
        assert results == [PutMessageStatus.PUT_OK] * 400
        assert store.flushed_physical_offset() == store.max_physical_offset()
    assert commit_syncs < 400 / 2, f"{commit_syncs} syncs for 400 puts: no group commit"


def test_sync_flush_future_and_timeout(tmp_path: Path) -> None:
    ops = CountingFileOps()
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=100)
    with MessageStore(cfg, file_ops=ops) as store:
        ok = store.put([msg()])
        assert ok.status is PutMessageStatus.PUT_OK and ok.append is not None
        synced = store.durable_up_to(ok.append.end_offset)
        store.wake()  # the round runs here, in the caller's thread
        assert synced.result(5) is True
        ops.sync_delay_s = 1.0  # the disk stalls past the timeout
        slow = put_durably(store, [msg()])
        assert slow.status is PutMessageStatus.FLUSH_DISK_TIMEOUT  # appended, not durable in time
        late = store.put([msg()])
        assert late.append is not None
        late_synced = store.durable_up_to(late.append.end_offset)
        store.wake()  # the last sync was slow: the group commit thread takes this round
        assert late_synced.result(10) is False
        ops.release.set()


def test_async_flush_runs_on_its_interval(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path, flush_interval_commitlog_ms=10)) as store:
        r = store.put([msg()])
        assert r.status is PutMessageStatus.PUT_OK
        deadline = time.monotonic() + 5
        while store.flushed_physical_offset() < store.max_physical_offset():
            assert time.monotonic() < deadline, "the async flush never ran"
            time.sleep(0.005)


def _at_hour(hour: int) -> int:
    return int(datetime(2024, 5, 6, hour, 30).timestamp() * 1000)


def _fill_segments(store: MessageStore, clock: Clock, count: int) -> None:
    for i in range(count):
        assert store.put([msg("Old", i % 2, b"x" * 1000, KEYS=f"k{i}")]).ok
        clock.advance(30_000)
    assert store.wait_dispatched()


def test_retention_deletes_old_segments_at_the_delete_hour(tmp_path: Path) -> None:
    clock = Clock(_at_hour(0))
    cfg = config(tmp_path, file_reserved_time_hours=1.0, delete_when="04")
    ops = CountingFileOps()  # disk use 10 %: only the delete hour may trigger the clean-up
    with MessageStore(cfg, clock=clock, file_ops=ops, run_threads=False) as store:
        _fill_segments(store, clock, 200)  # ~200 KiB: four segments, 100 minutes
        files_before = len(store.commit_log.mfq.files)
        store.clean_service.run_once()
        assert len(store.commit_log.mfq.files) == files_before  # not the delete hour yet
        clock.now_ms = _at_hour(4) + 10 * HOUR_MS // 10  # 05:30, outside 04
        store.clean_service.run_once()
        assert len(store.commit_log.mfq.files) == files_before
        clock.now_ms = _at_hour(4) + 5 * 60_000
        store.clean_service.run_once()
        assert len(store.commit_log.mfq.files) == 1  # all but the segment being written
        min_phy = store.min_physical_offset()
        assert min_phy > 0
        low = store.get_min_offset_in_queue("Old", 0)
        assert low > 0
        r = store.get_message("g", "Old", 0, 0, 4)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, low)
        assert store.get_message("g", "Old", 0, low, 4).status is GetMessageStatus.FOUND
        assert store.query_message("Old", "k0", 4) == []
        assert store.query_message("Old", "k199", 4) != []
    with MessageStore(cfg, clock=clock, file_ops=ops) as store:  # the new minimum survives a restart
        assert store.min_physical_offset() == min_phy
        assert store.get_min_offset_in_queue("Old", 0) == low


def test_retention_keeps_young_segments_unless_the_disk_is_nearly_full(tmp_path: Path) -> None:
    clock = Clock(_at_hour(0))
    ops = CountingFileOps()
    cfg = config(tmp_path, file_reserved_time_hours=72.0, disk_max_used_space_ratio=0.75,
                 disk_space_clean_forcibly_ratio=0.85, disk_space_warning_level_ratio=0.90)
    with MessageStore(cfg, clock=clock, file_ops=ops, run_threads=False) as store:
        _fill_segments(store, clock, 200)
        files = len(store.commit_log.mfq.files)
        store.clean_expired_files()  # manual: ignores the hour, not the age
        assert len(store.commit_log.mfq.files) == files
        ops.disk_ratio = 0.80  # above disk_max_used_space_ratio: expired files only
        store.clean_service.run_once()
        assert len(store.commit_log.mfq.files) == files
        ops.disk_ratio = 0.88  # above the forcible ratio: the oldest go even if young
        store.clean_service.run_once()
        assert len(store.commit_log.mfq.files) == 1
        assert store.get_min_offset_in_queue("Old", 0) > 0
        ops.disk_ratio = 0.95  # above the warning level: puts are refused
        store.clean_service.run_once()
        assert store.put([msg()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        ops.disk_ratio = 0.5
        store.clean_service.run_once()
        assert store.put([msg()]).status is PutMessageStatus.PUT_OK


def test_removed_segments_give_removing_and_found_null(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path), run_threads=False) as store:
        for _ in range(300):
            store.put([msg("W", 0, b"y" * 700)])
        store.wait_dispatched()
        # The commit log loses its first segment before the queue's minimum is corrected.
        store.commit_log.mfq.delete_first_files(lambda mf: True, 1)
        r = store.get_message("g", "W", 0, 0, 4)
        assert r.status is GetMessageStatus.MESSAGE_WAS_REMOVING
        assert r.next_begin_offset > 0
        cq = mapped_queue(store.consume_queue_table[("W", 0)])
        cq.mfq.delete_first_files(lambda mf: True, 1)  # the queue's first segment goes too
        r = store.get_message("g", "W", 0, 0, 4)
        assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_FOUND_NULL, 50)
