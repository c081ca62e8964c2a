"""One process (one MessageStore) per store directory: the lock file, on disk and simulated."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.config import FlushDiskType, StoreConfig
from orbitmq.store import MessageStore
from orbitmq.store.file_ops import OsFileOps, StoreLockedError
from orbitmq.store.message_store import check_store_free
from orbitmq.testing.faulty_files import FaultyFileOps, TearMode
from orbitmq.testing.store_put import put_durably


def _stamp(path: Path) -> tuple[int, int, bytes]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, path.read_bytes()


def test_a_second_store_on_the_directory_is_refused_and_touches_nothing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    store_dir = Path(cfg.store_path)
    first = MessageStore(cfg)
    first.start()
    try:
        assert first.put([msg()]).ok
        first.flush_consume_queue.run_once()
        abort, checkpoint = store_dir / "abort", store_dir / "checkpoint"
        before = (_stamp(abort), _stamp(checkpoint))
        assert (store_dir / "lock").read_text() == f"{os.getpid()}\n"

        second = MessageStore(cfg)
        with pytest.raises(StoreLockedError) as refused:
            second.start()
        text = str(refused.value)
        assert str(store_dir.resolve()) in text and f"process {os.getpid()}" in text
        assert "\n" not in text
        assert refused.value.holder_pid == os.getpid()
        second.shutdown()  # a store that never started stops without touching anything
        assert (_stamp(abort), _stamp(checkpoint)) == before
        assert not second.running and first.running
        assert first.put([msg()]).ok
    finally:
        first.shutdown()
    assert not (store_dir / "abort").exists()
    assert (store_dir / "lock").read_text() == ""  # no stale pid once released
    with MessageStore(cfg) as again:  # the lock went with the first store
        assert again.recovery_report is not None and again.recovery_report.last_exit_ok
        assert again.get_max_offset_in_queue("T", 0) == 2


def test_a_failed_start_releases_the_lock(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    with MessageStore(cfg) as store:
        assert store.put([msg()]).ok
    segment = next((Path(cfg.store_path) / "commitlog").iterdir())
    with open(segment, "r+b") as f:
        f.truncate(1000)
    (Path(cfg.store_path) / "commitlog" / "00000000000000999999").write_bytes(b"x")  # unusable
    for _ in range(2):  # refused for the files, not for a lock left behind by the first try
        with pytest.raises(Exception) as failed:
            MessageStore(cfg).start()
        assert not isinstance(failed.value, StoreLockedError)
    check_store_free(cfg.store_path)


def test_check_store_free(tmp_path: Path) -> None:
    check_store_free(str(tmp_path / "missing"))  # nothing there: free, and nothing created
    assert not (tmp_path / "missing").exists()
    cfg = config(tmp_path)
    with MessageStore(cfg), pytest.raises(StoreLockedError, match="is in use by process"):
        check_store_free(cfg.store_path)
    check_store_free(cfg.store_path)


def test_lock_file_left_by_a_dead_holder_does_not_block(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    (store_dir / "lock").write_text("999999\n")  # what a killed broker leaves: a pid, no flock
    with MessageStore(StoreConfig(store_path=str(store_dir), mapped_file_size_commitlog=65536)):
        assert (store_dir / "lock").read_text() == f"{os.getpid()}\n"


def test_os_lock_is_per_open_file_description(tmp_path: Path) -> None:
    ops = OsFileOps()
    path = str(tmp_path / "lock")
    held = ops.lock_exclusive(path)
    with pytest.raises(StoreLockedError):
        ops.lock_exclusive(path)
    held.release()
    held.release()  # idempotent
    ops.lock_exclusive(path).release()


def test_simulated_file_layer_locks_until_release_or_power_cut() -> None:
    fs = FaultyFileOps()
    cfg = StoreConfig(store_path="/sim/store", mapped_file_size_commitlog=8192,
                      mapped_file_size_consume_queue=320, message_index_enable=False,
                      flush_disk_type=FlushDiskType.SYNC_FLUSH)
    first = MessageStore(cfg, file_ops=fs, run_threads=False)
    first.start()
    assert put_durably(first, [msg()]).ok
    ops_before = fs.ops
    with pytest.raises(StoreLockedError):
        MessageStore(cfg, file_ops=fs, run_threads=False).start()
    assert fs.ops == ops_before  # refused before any durable operation (abort, checkpoint)
    assert fs.exists("/sim/store/abort")
    # The power goes out with the first store open: after the reboot nobody holds the lock.
    fs = fs.reboot(random.Random(1), TearMode.NONE)
    assert fs.locks == {}
    with MessageStore(cfg, file_ops=fs, run_threads=False) as store:
        assert store.recovery_report is not None and not store.recovery_report.last_exit_ok
        assert store.get_max_offset_in_queue("T", 0) == 1
        with pytest.raises(StoreLockedError):
            MessageStore(cfg, file_ops=fs, run_threads=False).start()
    assert fs.locks == {}
    MessageStore(cfg, file_ops=fs, run_threads=False).start()
