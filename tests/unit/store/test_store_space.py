"""A store on a disk that fills up or fails its syncs (simulated): refusals with a reason, no write
into unallocated space, nothing acknowledged lost, and puts taken again once the cause is gone."""

from __future__ import annotations

import random

from store_fixtures import msg

from orbitmq.config import FlushDiskType, StoreConfig
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import GetMessageStatus, MessageStore, PutMessageStatus
from orbitmq.store.running_flags import RETRY_INTERVAL_S, Condition
from orbitmq.testing.faulty_files import PAGE_SIZE, FaultyFileOps, TearMode
from orbitmq.testing.store_put import put_durably

SEGMENT = 16 * PAGE_SIZE  # commit log segment: 64 KiB


def _config(flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> StoreConfig:
    return StoreConfig(
        store_path="/sim/store",
        mapped_file_size_commitlog=SEGMENT,
        mapped_file_size_consume_queue=20 * 1000,  # 5 pages, allocated as entries come
        flush_disk_type=flush,
        message_index_enable=False,  # the index writes real files, not through FileOps
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _store(fs: FaultyFileOps, clock: Clock, flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> MessageStore:
    return MessageStore(_config(flush), file_ops=fs, run_threads=False, monotonic=clock)


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    """Every body of a queue, in order (checking each message's CRC)."""
    out: list[bytes] = []
    while True:
        got = store.get_message("g", topic, queue_id, len(out), 32)
        if got.status is not GetMessageStatus.FOUND:
            return out
        out += [decode_stored_message(raw).body for raw in got.buffers]


def test_queue_without_space_stalls_dispatch_and_puts_until_space_returns() -> None:
    clock = Clock()
    fs = FaultyFileOps(capacity_bytes=SEGMENT + PAGE_SIZE)  # one segment and one queue page
    store = _store(fs, clock)
    store.start()
    assert put_durably(store, [msg("T", 0, b"a")]).ok
    store.run_services_once()
    assert _bodies(store, "T", 0) == [b"a"]
    # The segment has room, so the put is acknowledged; queue 1's first page finds no space.
    assert put_durably(store, [msg("T", 1, b"b")]).ok
    store.run_services_once()
    assert store.flags.holds(Condition.DISPATCH_STALLED)
    assert _bodies(store, "T", 1) == []  # not visible yet, and not lost
    refused = put_durably(store, [msg("T", 0, b"c")])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert refused.remark is not None and "consume queue and index writes wait for space" in refused.remark
    assert "T/1" in refused.remark
    fs.capacity_bytes = SEGMENT + 4 * PAGE_SIZE  # space freed
    store.run_services_once()
    assert _bodies(store, "T", 1) == []  # retried once a second, not in a busy loop
    clock.now += RETRY_INTERVAL_S
    store.run_services_once()
    assert _bodies(store, "T", 1) == [b"b"]
    assert store.flags.remark is None
    assert put_durably(store, [msg("T", 0, b"c")]).ok
    store.run_services_once()
    assert _bodies(store, "T", 0) == [b"a", b"c"]
    assert fs.unbacked_writes() == []
    store.shutdown()
    with _store(fs, clock) as again:
        assert (_bodies(again, "T", 0), _bodies(again, "T", 1)) == ([b"a", b"c"], [b"b"])


def test_commit_log_without_space_refuses_puts_and_takes_them_again() -> None:
    clock = Clock()
    fs = FaultyFileOps(capacity_bytes=SEGMENT + 2 * PAGE_SIZE)
    store = _store(fs, clock)
    store.start()
    acked: list[bytes] = []
    result = None
    for i in range(100):
        body = bytes([i]) * 1000
        result = put_durably(store, [msg("T", 0, body)])
        if not result.ok:
            break
        acked.append(body)
    assert result is not None and result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert result.remark is not None and "no space for a new commit log segment" in result.remark
    assert len(acked) > 40
    assert put_durably(store, [msg("T", 0, b"x")]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    fs.capacity_bytes = 3 * SEGMENT
    clock.now += RETRY_INTERVAL_S
    assert put_durably(store, [msg("T", 0, b"after")]).ok
    acked.append(b"after")
    store.run_services_once()
    assert _bodies(store, "T", 0) == acked
    assert fs.unbacked_writes() == []
    fs = fs.reboot(random.Random(7), TearMode.ANY_SECTORS)  # SYNC_FLUSH: acked means durable
    with _store(fs, clock) as again:
        assert _bodies(again, "T", 0) == acked


def test_failed_sync_is_never_success_and_its_data_is_written_by_the_next_one() -> None:
    clock = Clock()
    fs = FaultyFileOps()
    store = _store(fs, clock)
    store.start()
    assert put_durably(store, [msg("T", 0, b"first")]).ok
    fs.fail_syncs = 1  # EIO, and Linux leaves the failed pages clean (not written)
    second = b"second" * 500  # sectors that nothing written later touches again
    failed = put_durably(store, [msg("T", 0, second)])
    assert failed.status is PutMessageStatus.FLUSH_DISK_TIMEOUT  # appended, not durable
    refused = put_durably(store, [msg("T", 0, b"refused")])
    assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert refused.remark is not None and "syncing the commit log failed" in refused.remark
    store.run_services_once()
    assert store.flags.holds(Condition.FLUSH_FAILED)  # tried again once a second only
    clock.now += RETRY_INTERVAL_S
    # The retry syncs the failed range again: without making it dirty first, it would succeed
    # over ``second`` left clean, and "third" would be acknowledged behind a hole.
    store.run_services_once()
    assert put_durably(store, [msg("T", 0, b"third")]).ok
    assert store.flags.remark is None
    fs = fs.reboot(random.Random(3), TearMode.NONE)  # exactly what the syncs made durable
    with _store(fs, clock) as again:
        assert _bodies(again, "T", 0) == [b"first", second, b"third"]


def test_failed_async_flush_refuses_puts_until_a_flush_succeeds() -> None:
    clock = Clock()
    fs = FaultyFileOps()
    store = _store(fs, clock, FlushDiskType.ASYNC_FLUSH)
    store.start()
    assert store.put([msg("T", 0, b"one")]).ok
    fs.fail_syncs = 1
    store.async_flush.run_once()
    assert store.flags.holds(Condition.FLUSH_FAILED)
    assert store.put([msg("T", 0, b"two")]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.async_flush.run_once()  # before the retry interval: no sync tried
    assert store.commit_log.flushed_offset == 0
    clock.now += RETRY_INTERVAL_S
    store.async_flush.run_once()
    assert store.flags.remark is None and store.commit_log.flushed_offset > 0
    assert store.put([msg("T", 0, b"two")]).ok


def test_stopping_with_a_failing_disk_keeps_the_abort_file() -> None:
    clock = Clock()
    fs = FaultyFileOps()
    store = _store(fs, clock, FlushDiskType.ASYNC_FLUSH)
    store.start()
    assert store.put([msg("T", 0, b"one")]).ok
    fs.fail_syncs = 10
    store.shutdown()
    assert fs.exists("/sim/store/abort")  # the next start checks the store as after a crash
    assert fs.locks == {}
    fs.fail_syncs = 0
    with _store(fs, clock) as again:
        assert again.recovery_report is not None and not again.recovery_report.last_exit_ok
        assert _bodies(again, "T", 0) == [b"one"]
