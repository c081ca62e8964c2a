"""The compact consume queue access (store_type compact) on real files: writes and reads through
pread/pwrite, recovery's cut, retention's minimum, reopening, the switch to mapped files past
compact_queue_bytes_max, the descriptor cache's bound, stores restarted under the other type, and
a new queue's file: made on the dispatch thread with few system calls, its name durable before
the checkpoint passes its first message."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from pathlib import Path

import pytest
from store_fixtures import bodies, config, msg

from orbitmq.config import StoreType
from orbitmq.errors import ClientError
from orbitmq.store import MessageStore, fs_sync
from orbitmq.store.checkpoint import StoreCheckpoint
from orbitmq.store.compact_consume_queue import CompactConsumeQueue
from orbitmq.store.consume_queue import BLANK_ENTRY_SIZE_FIELD, CQ_ENTRY, CQ_ENTRY_SIZE
from orbitmq.store.fd_cache import FdCache
from orbitmq.store.file_mode import QueueDirs
from orbitmq.store.file_ops import OsFileOps, StoreSpaceError
from orbitmq.store.fs_sync import FS_SYNC_QUEUES_MIN
from orbitmq.store.mapped_consume_queue import MappedConsumeQueue
from orbitmq.store.status import GetMessageStatus

FILE_SIZE = 50 * CQ_ENTRY_SIZE


def _queue(root: Path, fds: FdCache, queue_id: int = 0, bytes_max: int = 10 * CQ_ENTRY_SIZE,
           topic: str = "T") -> CompactConsumeQueue:
    return CompactConsumeQueue(topic, queue_id, str(root), FILE_SIZE, OsFileOps(), fds, bytes_max)


def _fill(cq: CompactConsumeQueue, first: int, count: int) -> None:
    for i in range(first, first + count):
        assert cq.put(1000 + i * 100, 100, i, i)


def _all_stored(index: int, phy: int, size: int) -> bool:
    return True


def test_entries_are_written_and_read_without_a_mapping(tmp_path: Path) -> None:
    fds = FdCache(4)
    cq = _queue(tmp_path, fds)
    assert (cq.max_offset, cq.entry(0), cq.entries_from(0, 8)) == (0, None, None)
    _fill(cq, 0, 3)
    assert cq.mapped is None
    assert (cq.min_offset, cq.max_offset, cq.max_phy_end) == (0, 3, 1300)
    assert cq.entry(1) == (1100, 100, 1)
    assert cq.entry(3) is None
    raw = cq.entries_from(1, 8)
    assert raw is not None and list(CQ_ENTRY.iter_unpack(raw)) == [(1100, 100, 1), (1200, 100, 2)]
    entries_from_2 = cq.entries_from(0, 2)
    assert entries_from_2 is not None and len(entries_from_2) == 2 * CQ_ENTRY_SIZE
    assert not cq.put(1000, 100, 0, 0)  # a re-dispatch is skipped
    cq.put_run(3, CQ_ENTRY.pack(1300, 100, 3) + CQ_ENTRY.pack(1400, 100, 4))
    assert (cq.max_offset, cq.max_phy_end, cq.entry(4)) == (5, 1500, (1400, 100, 4))
    path = tmp_path / "T" / "0" / f"{0:020d}"
    assert path.stat().st_size == FILE_SIZE  # the mapped access's file, as it would make it
    assert path.stat().st_blocks * 512 <= 8192  # sparse
    assert cq.flush() == 5 * CQ_ENTRY_SIZE
    cq.sync_names()
    assert str(path) not in Path("/proc/self/maps").read_text()
    cq.close()
    assert len(fds) == 0


def test_a_gap_is_filled_with_blanks_and_a_queue_may_start_midway(tmp_path: Path) -> None:
    fds = FdCache(4)
    late = _queue(tmp_path, fds, queue_id=1)
    assert late.put(5000, 10, 0, 53)  # second file's entries: it starts at offset 50
    assert (late.min_offset, late.max_offset, late.roll_next_index(53)) == (53, 54, 100)
    assert late.entry(50) == (0, BLANK_ENTRY_SIZE_FIELD, 0)
    assert os.listdir(tmp_path / "T" / "1") == [f"{50 * CQ_ENTRY_SIZE:020d}"]
    gap = _queue(tmp_path, fds, queue_id=2)
    _fill(gap, 0, 2)
    assert gap.put(9000, 10, 0, 5)
    assert [gap.entry(i) for i in (2, 4)] == [(0, BLANK_ENTRY_SIZE_FIELD, 0)] * 2
    assert gap.max_offset == 6


def test_a_queue_switches_to_mapped_files_past_the_bound_and_keeps_everything(
        tmp_path: Path) -> None:
    fds = FdCache(4)
    cq = _queue(tmp_path, fds)
    _fill(cq, 0, 8)
    cq.flush()
    _fill(cq, 8, 2)  # 10 entries: 200 bytes, the bound itself
    assert cq.mapped is None
    assert cq.put(2000, 100, 10, 10)  # the 11th passes it
    mapped = cq.mapped
    assert isinstance(mapped, MappedConsumeQueue)
    assert len(fds) == 0  # its descriptor closed: the mapping serves it now
    mf = mapped.mfq.files[0]
    assert (mf.wrote_position, mf.flushed_position) == (11 * CQ_ENTRY_SIZE, 8 * CQ_ENTRY_SIZE)
    assert (cq.max_offset, cq.max_phy_end) == (11, 2100)
    assert [cq.entry(i) for i in (0, 9, 10)] == [(1000, 100, 0), (1900, 100, 9), (2000, 100, 10)]
    cq.put_run(11, b"".join(CQ_ENTRY.pack(3000 + i, 1, i) for i in range(45)))  # rolls a file
    assert cq.max_offset == 56 and len(mapped.mfq.files) == 2
    cq.flush()
    cq.sync_names()
    cq.close()
    reopened = _queue(tmp_path, fds)
    reopened.load()
    assert reopened.mapped is not None  # its data reaches past the bound: loaded mapped
    assert reopened.recover(10**9, _all_stored) == 0
    assert reopened.max_offset == 56


def test_a_run_that_passes_the_bound_goes_mapped_whole(tmp_path: Path) -> None:
    cq = _queue(tmp_path, FdCache(4))
    cq.put_run(0, b"".join(CQ_ENTRY.pack(100 * i, 100, 0) for i in range(12)))
    assert cq.mapped is not None
    assert cq.max_offset == 12 and cq.entry(11) == (1100, 100, 0)


def test_reopen_recover_cuts_entries_past_the_end_and_clears_them(tmp_path: Path) -> None:
    fds = FdCache(4)
    cq = _queue(tmp_path, fds)
    _fill(cq, 0, 6)
    cq.flush()
    cq.close()
    again = _queue(tmp_path, fds)
    again.load()
    assert again.mapped is None
    # Entries 4 and 5 point at or past the cut; entry 3's message is not there.
    assert again.recover(1400, lambda i, phy, size: i != 3) == 3
    assert (again.max_offset, again.max_phy_end) == (3, 1300)
    assert again.entry(3) is None
    assert again.put(7000, 10, 0, 3)  # appends continue at the cut
    third = _queue(tmp_path, fds)
    third.load()
    third.recover(10**9, _all_stored)
    assert third.max_offset == 4 and third.entry(3) == (7000, 10, 0)


def test_min_offset_follows_retention(tmp_path: Path) -> None:
    cq = _queue(tmp_path, FdCache(4))
    _fill(cq, 0, 6)
    cq.correct_min_offset(1250)  # messages below 1250 are gone
    assert cq.min_offset == 3
    assert cq.delete_expired(1450) == 0  # a compact queue's one file is never deleted
    assert cq.min_offset == 5
    assert cq.offset_by_time(3, lambda phy: (phy - 1000) // 100) == 5


def test_the_descriptor_cache_keeps_its_bound(tmp_path: Path) -> None:
    fds = FdCache(3)
    queues = [_queue(tmp_path, fds, queue_id=q) for q in range(10)]
    for round_ in range(2):
        for q, cq in enumerate(queues):
            assert cq.put(q * 1000 + round_, 1, q, round_)
            assert len(fds) <= 3
    for q, cq in enumerate(queues):
        assert cq.entry(1) == (q * 1000 + 1, 1, q)
        cq.flush()
        assert len(fds) <= 3
    assert fds.opens >= 20  # evicted ones were opened again
    queues[0].destroy()
    assert not (tmp_path / "T" / "0").exists()
    assert queues[0].entry(0) is None
    fds.close()
    assert len(fds) == 0
    with pytest.raises(ClientError):
        FdCache(0)


def _store(tmp_path: Path, store_type: StoreType, **changes: object) -> MessageStore:
    return MessageStore(config(tmp_path, store_type=store_type, compact_queue_bytes_max=200,
                               **changes), run_threads=False)


@pytest.mark.parametrize("first,then", [(StoreType.COMPACT, StoreType.DEFAULT),
                                        (StoreType.DEFAULT, StoreType.COMPACT)])
def test_a_store_restarts_under_the_other_type(tmp_path: Path, first: StoreType,
                                               then: StoreType) -> None:
    with _store(tmp_path, first) as store:
        for q in range(3):
            store.put([msg("S", q, f"{q}-{i}".encode()) for i in range(q * 7 + 1)])  # 1, 8, 15
        assert store.wait_dispatched()
    with _store(tmp_path, then) as store:
        for q in range(3):
            r = store.get_message("g", "S", q, 0, 32)
            assert bodies(r) == [f"{q}-{i}".encode() for i in range(q * 7 + 1)]
        store.put([msg("S", 0, b"more")])
        assert store.wait_dispatched()
        assert bodies(store.get_message("g", "S", 0, 1, 32)) == [b"more"]
        if then is StoreType.COMPACT:
            kinds = [store.consume_queue_table[("S", q)] for q in range(3)]
            assert all(isinstance(cq, CompactConsumeQueue) for cq in kinds)
            # 15 entries lie past the 10 a compact queue holds: loaded mapped
            assert [cq.mapped is not None for cq in kinds] == [False, False, True]  # type: ignore[union-attr]


def test_a_crash_under_compact_keeps_what_was_dispatched_and_cuts_the_rest(
        tmp_path: Path) -> None:
    store = _store(tmp_path, StoreType.COMPACT)
    store.start()
    store.put([msg("C", 0, f"m{i}".encode()) for i in range(4)])
    assert store.wait_dispatched()
    store.flush_consume_queue.flush_and_checkpoint()
    # A later entry written to the queue but whose message never reached the commit log (a
    # kill -9 between the two is what it stands for).
    cq = store.consume_queue_table[("C", 0)]
    assert cq.put(store.commit_log.max_offset + 10_000, 99, 0, 4)
    store.commit_log.flush()
    store.dispatcher.shutdown()
    store._release_lock()  # the process "dies": abort file stays, nothing closed cleanly
    with _store(tmp_path, StoreType.COMPACT) as again:
        report = again.recovery_report
        assert report is not None and not report.last_exit_ok
        assert report.queue_entries_dropped == 0  # nothing of "C" in the log past the cut
        assert again.queue_count() == 1 and not again.consume_queue_table  # loaded on first use
        r = again.get_message("g", "C", 0, 0, 32)
        assert report.queue_entries_dropped == 1
        assert bodies(r) == [f"m{i}".encode() for i in range(4)]
        assert again.get_message("g", "C", 0, 4, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE


def test_compact_needs_the_real_file_system(tmp_path: Path) -> None:
    class NotOs:  # any FileOps that is not OsFileOps (a simulated disk)
        pass

    with pytest.raises(ClientError, match="store_type compact"):
        MessageStore(config(tmp_path, store_type=StoreType.COMPACT),
                     file_ops=NotOs(), run_threads=False)  # type: ignore[arg-type]


def test_a_first_put_without_space_is_made_again_as_a_first_put(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    fds = FdCache(4)
    cq = _queue(tmp_path, fds)
    real = FdCache.pwrite

    def full(self: FdCache, *args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FdCache, "pwrite", full)
    with pytest.raises(StoreSpaceError) as failed:
        cq.put(500, 10, 0, 7)
    assert failed.value.no_space
    assert (cq.max_offset, cq.min_offset) == (0, 0)
    monkeypatch.setattr(FdCache, "pwrite", real)
    assert cq.put(500, 10, 0, 7)  # the dispatch's retry
    assert (cq.min_offset, cq.max_offset, cq.entry(7)) == (7, 8, (500, 10, 0))
    assert "gap" not in caplog.text


def test_a_failed_sync_is_tried_again_with_the_range_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cq = _queue(tmp_path, FdCache(4))
    _fill(cq, 0, 2)
    real = os.fdatasync

    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", eio)
    with pytest.raises(OSError):
        cq.flush()
    writes: list[int] = []
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "fdatasync", real)
    monkeypatch.setattr(os, "pwrite", lambda fd, data, at: writes.append(at) or real_pwrite(fd, data, at))
    assert cq.flush() == 2 * CQ_ENTRY_SIZE
    assert writes == [0]  # the unsynced range made dirty again before the sync
    assert cq.entry(1) == (1100, 100, 1)
    writes.clear()
    _fill(cq, 2, 1)
    assert cq.flush() == 3 * CQ_ENTRY_SIZE and writes == [40]  # the put's alone: synced well


def test_a_new_queues_first_run_is_one_write_after_its_blanks(tmp_path: Path) -> None:
    cq = _queue(tmp_path, FdCache(4))
    cq.put_run(53, CQ_ENTRY.pack(700, 7, 1) + CQ_ENTRY.pack(707, 7, 2))  # its file starts at 50
    assert (cq.min_offset, cq.max_offset, cq.max_phy_end) == (53, 55, 714)
    assert [cq.entry(i) for i in (50, 53, 54)] == [
        (0, BLANK_ENTRY_SIZE_FIELD, 0), (700, 7, 1), (707, 7, 2)]
    assert cq.mapped is None


def test_a_new_queues_file_is_made_with_its_directories_and_written_through_one_open(
        tmp_path: Path) -> None:
    """A queue's first message is where dispatch meets the file system: its topic's and its
    own directories are made with the root's mode, its file with the mode its directory gives,
    and the descriptor that created the file is the one the first write goes through."""
    root = tmp_path / "cq"
    root.mkdir(mode=0o750)
    os.chmod(root, 0o750)
    fds = FdCache(4)
    dirs = QueueDirs(str(root))
    queues = [CompactConsumeQueue("NewT", q, str(root), FILE_SIZE, OsFileOps(), fds, 200, dirs)
              for q in range(3)]
    for q, cq in enumerate(queues):
        assert cq.put(100 * q, 10, 0, 0)
    assert fds.opens == 0  # every first write went through the creating descriptor
    assert stat.S_IMODE((root / "NewT").stat().st_mode) == 0o750
    for q in range(3):
        assert stat.S_IMODE((root / "NewT" / str(q)).stat().st_mode) == 0o750
        path = root / "NewT" / str(q) / "00000000000000000000"
        assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.stat().st_size == FILE_SIZE
        assert queues[q].entry(0) == (100 * q, 10, 0)
    # A queue whose directory and file exist already (a crash between the two puts of a first
    # run, say) takes them over: nothing is lost and the size is the full one.
    again = CompactConsumeQueue("NewT", 0, str(root), FILE_SIZE, OsFileOps(), fds, 200, dirs)
    assert again.put(500, 10, 0, 1)  # a file starting at 0, as the first queue's
    assert again.entry(1) == (500, 10, 0)
    fds.close()


@pytest.mark.parametrize("queues", [3, FS_SYNC_QUEUES_MIN + 1])
def test_the_checkpoint_passes_a_new_queues_message_only_once_its_name_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, queues: int) -> None:
    """New queues' files are created on the dispatch thread without syncing their directory;
    the flush round syncs the names (each directory, or one syncfs for many queues) before it
    writes a checkpoint past their messages, and a failed sync keeps the checkpoint where it
    was: a restart re-dispatches those messages and makes their queues again."""
    store = _store(tmp_path, StoreType.COMPACT)
    store.start()
    try:
        store.flush_consume_queue.flush_and_checkpoint()
        before = store.flush_consume_queue.last
        assert before is not None
        for q in range(queues):
            assert store.put([msg(f"N{q // 8}", q % 8, b"first")]).ok
        assert store.wait_dispatched()
        events: list[str] = []
        real_sync_dir = OsFileOps.sync_dir
        real_syncfs = fs_sync._SYNCFS
        real_save = StoreCheckpoint.save

        def sync_dir(self: OsFileOps, path: str) -> None:
            events.append(os.path.relpath(path, store._cq_root))
            real_sync_dir(self, path)

        def syncfs(fd: int) -> int:
            events.append("syncfs")
            return real_syncfs(fd)  # type: ignore[operator, no-any-return]

        def save(self: StoreCheckpoint, file_ops: object, path: str) -> None:
            events.append("checkpoint")
            real_save(self, file_ops, path)  # type: ignore[arg-type]

        monkeypatch.setattr(OsFileOps, "sync_dir", sync_dir)
        if real_syncfs is not None:
            monkeypatch.setattr(fs_sync, "_SYNCFS", syncfs)
        monkeypatch.setattr(StoreCheckpoint, "save", save)

        def failing(self: OsFileOps, path: str) -> None:
            raise OSError(errno.EIO, "Input/output error (test)")

        if queues < FS_SYNC_QUEUES_MIN or real_syncfs is None:
            monkeypatch.setattr(OsFileOps, "sync_dir", failing)
            with pytest.raises(OSError):
                store.flush_consume_queue.flush_and_checkpoint()
            assert "checkpoint" not in events and store.flush_consume_queue.last is before
            monkeypatch.setattr(OsFileOps, "sync_dir", sync_dir)
        store.flush_consume_queue.flush_and_checkpoint()
        assert events[-1] == "checkpoint"
        if queues >= FS_SYNC_QUEUES_MIN and real_syncfs is not None:
            assert events == ["syncfs", "checkpoint"]  # one sync covers every name
        else:
            synced = set(events[:-1])
            assert {f"N{q // 8}/{q % 8}" for q in range(queues)} <= synced
        last = store.flush_consume_queue.last
        assert last is not None and last.logics_offset == store.commit_log.max_offset
    finally:
        store.shutdown()


def test_queue_dirs_make_whatever_is_missing_above_a_queue(tmp_path: Path) -> None:
    root = tmp_path / "store" / "consumequeue"
    dirs = QueueDirs(str(root))  # the root does not exist yet
    dirs.make(str(root / "T" / "0"))
    dirs.make(str(root / "T" / "0"))  # there already: nothing to do
    dirs.make(str(root / "T" / "1"))
    assert sorted(os.listdir(root / "T")) == ["0", "1"]
    for path in (root / "T", root / "T" / "0"):
        assert stat.S_IMODE(path.stat().st_mode) == dirs.dir_mode
    shutil.rmtree(root)  # gone after its mode was read: made again
    dirs.make(str(root / "U" / "3"))
    assert (root / "U" / "3").is_dir()
