"""store_type compact syncs many dirty queues with one syncfs (fs_sync.py): every queue written
is recorded synced and the checkpoint moves; a failed syncfs is loud and leaves each queue to
write its range again in its own next flush; under store_type default, many new mapped queue
files have their names synced by that one syncfs too."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.config import StoreType
from orbitmq.store import MessageStore
from orbitmq.store import fs_sync as module
from orbitmq.store.compact_consume_queue import CompactConsumeQueue
from orbitmq.store.file_ops import OsFileOps
from orbitmq.store.fs_sync import FS_SYNC_QUEUES_MIN
from orbitmq.store.mapped_consume_queue import MappedConsumeQueue

pytestmark = pytest.mark.skipif(module._SYNCFS is None, reason="no syncfs (not Linux)")

QUEUES = FS_SYNC_QUEUES_MIN + 36


def _store(tmp_path: Path) -> MessageStore:
    store = MessageStore(config(tmp_path, store_type=StoreType.COMPACT), run_threads=False)
    store.start()
    for q in range(QUEUES):
        assert store.put([msg(f"T{q // 8}", q % 8, b"x")]).ok
    assert store.wait_dispatched()
    return store


def _compact(store: MessageStore) -> list[CompactConsumeQueue]:
    queues = [cq for cq in store.consume_queue_table.values() if isinstance(cq, CompactConsumeQueue)]
    assert len(queues) == QUEUES
    return queues


def test_one_syncfs_records_every_dirty_queue_synced(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        queues = _compact(store)
        assert all(cq.fs_sync_mark() is not None for cq in queues)
        assert store.fs_sync is not None and store.fs_sync.sync(queues) == QUEUES
        assert all(cq.fs_sync_mark() is None for cq in queues)  # nothing left to sync
        assert store.fs_sync.sync(queues) == 0
        store.flush_consume_queue.flush_and_checkpoint()
        last = store.flush_consume_queue.last
        assert last is not None and last.logics_offset == store.commit_log.max_offset


def test_fewer_dirty_queues_than_the_minimum_sync_themselves(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        queues = _compact(store)
        assert store.fs_sync is not None
        assert store.fs_sync.sync(queues[:FS_SYNC_QUEUES_MIN - 1]) == 0
        assert all(cq.fs_sync_mark() is not None for cq in queues)


def test_a_failed_syncfs_raises_and_each_queue_rewrites_its_range_in_its_own_flush(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _store(tmp_path) as store:
        queues = _compact(store)
        monkeypatch.setattr(module, "_SYNCFS", lambda fd: -1)
        assert store.fs_sync is not None
        with pytest.raises(OSError, match="syncfs of the queues' file system"):
            store.fs_sync.sync(queues)
        # each now syncs itself, writing its unsynced range again first (compact flush)
        assert all(cq.fs_sync_mark() is None and cq._sync_failed for cq in queues)
        monkeypatch.undo()
        for cq in queues:
            cq.flush()
            cq.sync_names()
        assert not any(cq._sync_failed for cq in queues)
        assert all(cq.fs_sync_mark() is None for cq in queues)


def test_many_new_mapped_queue_files_have_their_names_synced_by_one_syncfs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """store_type default: a mapped queue's first file is made on the dispatch thread without
    syncing its directory; a round with many new ones syncs the file system once instead of
    each directory, and a failed syncfs leaves every name to be synced again."""
    store = MessageStore(config(tmp_path), run_threads=False)
    store.start()
    try:
        for q in range(QUEUES):
            assert store.put([msg(f"D{q // 8}", q % 8, b"x")]).ok
        assert store.wait_dispatched()
        queues = list(store.consume_queue_table.values())
        mapped = [cq for cq in queues if isinstance(cq, MappedConsumeQueue)]
        assert len(mapped) == QUEUES and all(cq.mfq.names_unsynced for cq in mapped)
        assert store.fs_sync is not None
        monkeypatch.setattr(module, "_SYNCFS", lambda fd: -1)
        with pytest.raises(OSError, match="syncfs"):
            store.fs_sync.sync(queues)
        assert all(cq.mfq.names_unsynced for cq in mapped)  # to be synced again
        monkeypatch.undo()
        dirs: list[str] = []
        real = OsFileOps.sync_dir
        monkeypatch.setattr(OsFileOps, "sync_dir",
                            lambda self, path: dirs.append(path) or real(self, path))
        store.flush_consume_queue.flush_and_checkpoint()
        assert not any(cq.mfq.names_unsynced for cq in mapped)
        assert not [d for d in dirs if "/consumequeue/" in d]  # no directory synced one by one
        last = store.flush_consume_queue.last
        assert last is not None and last.logics_offset == store.commit_log.max_offset
        # below the minimum, each new queue syncs its own directory, as before
        for q in range(3):
            assert store.put([msg("Few", q, b"x")]).ok
        assert store.wait_dispatched()
        store.flush_consume_queue.flush_and_checkpoint()
        assert sorted(d.rsplit("/", 2)[-2:][1] for d in dirs if "/Few/" in d) == ["0", "1", "2"]
    finally:
        store.shutdown()
