"""Disk use follows the data: consume queue and index files are sparse and get space as they fill."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from store_fixtures import CountingFileOps, msg

from orbitmq.config import StoreConfig
from orbitmq.store import MessageStore, index_file
from orbitmq.store.consume_queue import CQ_ENTRY_SIZE
from orbitmq.store.index_file import IndexFile
from orbitmq.store.mapped_file import ALLOCATE_STEP_SIZE_MAX

PAGE = 4096
DEFAULTS = StoreConfig()


def disk_use(root: Path, *, skip: Path | None = None) -> int:
    """What ``du`` counts: allocated blocks of every file and directory under ``root``."""
    total = 0
    for where, dirs, files in os.walk(root):
        if skip is not None and Path(where) == skip:
            dirs[:] = []
            continue
        total += os.stat(where).st_blocks * 512
        total += sum(os.stat(os.path.join(where, f)).st_blocks * 512 for f in files)
    return total


def _default_sizes(tmp_path: Path) -> StoreConfig:
    """RocketMQ's default consume queue (6,000,000 B) and index (420 MB) files; a small commit
    log segment, which is allocated in full and not what this measures."""
    return StoreConfig(store_path=str(tmp_path / "store"), mapped_file_size_commitlog=16 << 20)


def test_2000_queues_of_one_message_take_megabytes_beyond_the_commit_log(tmp_path: Path) -> None:
    cfg = _default_sizes(tmp_path)
    assert cfg.mapped_file_size_consume_queue == DEFAULTS.mapped_file_size_consume_queue
    assert (cfg.max_hash_slot_num, cfg.max_index_num) == (5_000_000, 20_000_000)
    store_dir = Path(cfg.store_path)
    with MessageStore(cfg) as store:
        for i in range(2000):  # 250 topics x 8 queues, each message with a key and a UNIQ_KEY
            put = store.put([msg(f"Topic{i // 8}", i % 8, b"m" * 100, KEYS=f"k{i}",
                                        UNIQ_KEY=f"{i:032X}")])
            assert put.ok, put
        assert store.wait_dispatched(30)
        assert len(store.consume_queue_table) == 2000
    used = disk_use(store_dir, skip=store_dir / "commitlog")
    queues = disk_use(store_dir / "consumequeue")
    print(f"2000 queues: {used / 1e6:.1f} MB beyond the commit log ({queues / 1e6:.1f} MB queues)")
    assert used < 100e6
    assert queues < 2000 * 3 * PAGE  # a page of entries, a directory and a share of the topic's
    with MessageStore(cfg) as store:  # loads, recovers and reads sparse files
        assert store.get_max_offset_in_queue("Topic249", 7) == 1
        assert [m.body for m in store.query_message("Topic100", "k803", 4)] == [b"m" * 100]
        assert store.put([msg("Topic0", 0)]).ok


def test_queue_space_is_allocated_in_doubling_steps(tmp_path: Path) -> None:
    cfg = _default_sizes(tmp_path)
    with MessageStore(cfg, run_threads=False) as store:
        assert store.put([msg("Q", 0)]).ok
        store.run_services_once()
        mf = store.consume_queue_table[("Q", 0)].mfq.files[0]
        path = Path(mf.path)
        assert path.stat().st_size == 6_000_000
        assert path.stat().st_blocks * 512 == PAGE == mf.allocated_to
        steps = [mf.allocated_to]
        for n in range(2, 3001):
            store.put([msg("Q", 0)])
            if n % 100 == 0:
                store.run_services_once()
                if mf.allocated_to != steps[-1]:
                    steps.append(mf.allocated_to)
                used = n * CQ_ENTRY_SIZE
                assert used <= mf.allocated_to <= 2 * used + PAGE  # never more than twice the use
        assert steps == [4096, 8192, 16384, 32768, 65536]  # each step as large as what is held
        assert path.stat().st_blocks * 512 == mf.allocated_to
        assert ALLOCATE_STEP_SIZE_MAX == 1 << 20  # the cap: one allocation per 52,428 entries


def test_a_crash_image_of_sparse_queues_recovers_their_ends(tmp_path: Path) -> None:
    cfg = _default_sizes(tmp_path)
    with MessageStore(cfg) as store:
        for i in range(600):
            assert store.put([msg("Crash", i % 2, b"%d" % i)]).ok
        assert store.wait_dispatched()
        store.flush_consume_queue.run_once()
        image = tmp_path / "image"  # the files as a kill -9 leaves them, holes kept as holes
        subprocess.run(["cp", "-a", "--sparse=always", cfg.store_path, str(image)], check=True)
    assert (image / "abort").exists()
    (image / "lock").write_text("")
    queue_file = image / "consumequeue" / "Crash" / "0" / f"{0:020d}"
    assert queue_file.stat().st_blocks * 512 < 4 * PAGE  # still sparse
    crashed = StoreConfig(store_path=str(image), mapped_file_size_commitlog=16 << 20)
    with MessageStore(crashed) as store:
        report = store.recovery_report
        assert report is not None and not report.last_exit_ok
        assert store.get_max_offset_in_queue("Crash", 0) == 300
        assert store.get_max_offset_in_queue("Crash", 1) == 300
        assert store.put([msg("Crash", 0, b"next")]).ok
        assert store.wait_dispatched()
        got = store.get_message("g", "Crash", 0, 299, 2)
        assert got.message_count == 2
    shutil.rmtree(image)


def test_index_file_space_follows_its_keys(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "20240101000000000"), 5_000_000, 20_000_000)
    try:
        st = os.stat(f.path)
        assert st.st_size == 40 + 5_000_000 * 4 + 20_000_000 * 20
        for i in range(100):
            assert f.put_key(f"T#k{i}", 1000 + i, 1_700_000_000_000)
        # header page, up to 100 slot pages, the entry log's first page
        assert os.stat(f.path).st_blocks * 512 <= 102 * PAGE
        found = f.select_phy_offsets("T#k42", 4, 0, 2**62)
        assert found == [1042]
    finally:
        f.destroy()


def test_an_index_slot_table_an_eighth_used_gets_the_rest_of_its_blocks_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys hash at random: page by page, a busy broker's table would take thousands of
    allocations, each in the dispatching thread."""
    calls: list[tuple[int, int]] = []
    real = index_file.allocate_range

    def counting(fd: int, offset: int, length: int) -> None:
        calls.append((offset, length))
        real(fd, offset, length)

    monkeypatch.setattr(index_file, "allocate_range", counting)
    slots = 64 * 1024  # 256 KiB of slots: with the header, 65 pages
    f = IndexFile(str(tmp_path / "20240101000000000"), slots, 1000)
    try:
        table_pages = -(-(40 + slots * 4) // PAGE)
        assert table_pages == 65
        rng = random.Random(7)  # message ids: keys that hash all over the table
        keys = [f"T#{rng.getrandbits(128):032X}" for _ in range(100)]  # ~51 of 65 pages
        for i, key in enumerate(keys):
            assert f.put_key(key, 1000 + i, 1_700_000_000_000)
        whole = [c for c in calls if c == (0, table_pages * PAGE)]
        assert len(whole) == 1, calls
        assert calls.index(whole[0]) <= 10  # the 9th page (9 x 8 >= 65) was the last alone
        assert len(calls) <= 12  # those, the whole table, and the entry log's first steps
        assert os.stat(f.path).st_blocks * 512 >= table_pages * PAGE
        for i, key in enumerate(keys):  # nothing stored before the whole allocation was lost
            assert f.select_phy_offsets(key, 4, 0, 2**62) == [1000 + i]
    finally:
        f.destroy()


class _Recording(CountingFileOps):
    """Records directory syncs and checkpoint writes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    def sync_dir(self, path: str) -> None:
        self.events.append(f"dir {Path(path).parent.name}/{Path(path).name}")
        super().sync_dir(path)

    def write_file(self, path: str, data: bytes) -> None:
        self.events.append(Path(path).name)
        super().write_file(path, data)


def test_new_queue_names_are_synced_by_the_flush_before_the_checkpoint(tmp_path: Path) -> None:
    ops = _Recording()
    with MessageStore(_default_sizes(tmp_path), file_ops=ops, run_threads=False) as store:
        ops.events.clear()
        for q in range(3):
            assert store.put([msg("Names", q)]).ok
        store.dispatcher.run_once()
        assert ops.events == []  # dispatch created three queue files without waiting on fsyncs
        store.flush_consume_queue.run_once()
        assert ops.events == ["dir Names/0", "dir Names/1", "dir Names/2", "checkpoint"]
        ops.events.clear()
        assert store.put([msg("Names", 0)]).ok
        store.run_services_once()
        assert ops.events == ["checkpoint"]  # no new file: no directory sync
