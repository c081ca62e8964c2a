"""The metadata store (store/metadata_db.py) on real files: upserts, deletes, reopening, a torn
write-ahead log, file modes, and the JSON export."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from orbitmq.errors import StoreError
from orbitmq.store.metadata_db import (
    CONSUMER_OFFSETS,
    DELAY_OFFSETS,
    TOPICS,
    VERSIONS,
    MetadataDB,
    Row,
    export_tables,
)


def _db(tmp_path: Path, **kw: bool) -> MetadataDB:
    return MetadataDB(str(tmp_path / "config" / "metadata.db"), **kw).open()


def test_upsert_delete_and_reopen(tmp_path: Path) -> None:
    db = _db(tmp_path)
    assert db.write([Row(TOPICS, "A", 0, '{"topicName": "A"}'), Row(TOPICS, "B", 0, '{"x": 1}'),
                     Row(CONSUMER_OFFSETS, "A@g", 0, 5), Row(CONSUMER_OFFSETS, "A@g", 3, 9)]) == 4
    db.write([Row(TOPICS, "B", 0, '{"x": 2}'), Row(CONSUMER_OFFSETS, "A@g", 0, 6)])  # upserts
    db.write([Row(TOPICS, "A", 0, None), Row(TOPICS, "never-there", 0, None)])  # deletes
    assert list(db.rows(TOPICS)) == [("B", 0, '{"x": 2}')]
    db.close()
    db = _db(tmp_path)
    assert list(db.rows(TOPICS)) == [("B", 0, '{"x": 2}')]
    assert list(db.rows(CONSUMER_OFFSETS)) == [("A@g", 0, 6), ("A@g", 3, 9)]
    assert db.count(DELAY_OFFSETS) == 0
    db.close()


def test_the_database_is_in_wal_mode_with_the_flush_modes_sync(tmp_path: Path) -> None:
    for sync_full, want in ((False, 1), (True, 2)):  # NORMAL, FULL
        db = MetadataDB(str(tmp_path / f"m{int(sync_full)}.db"), sync_full=sync_full).open()
        conn = db._connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == want
        db.close()


def test_a_failed_transaction_leaves_nothing_of_it(tmp_path: Path) -> None:
    db = _db(tmp_path)
    db.write([Row(TOPICS, "Kept", 0, "{}")])
    with pytest.raises(StoreError, match="unknown metadata kind"):
        db.write([Row(TOPICS, "Half", 0, "{}"), Row("no_such_kind", "x", 0, 1)])
    # A failure inside SQLite (a value it cannot bind) rolls the whole transaction back.
    with pytest.raises(StoreError, match="write failed"):
        db.write([Row(TOPICS, "Half", 0, "{}"), Row(TOPICS, "Bad", 0, object())])  # type: ignore[arg-type]
    assert [k for k, _, _ in db.rows(TOPICS)] == ["Kept"]
    db.write([Row(TOPICS, "After", 0, "{}")])  # the connection is usable again
    assert [k for k, _, _ in db.rows(TOPICS)] == ["After", "Kept"]
    db.close()


def test_a_torn_wal_tail_loses_only_the_torn_transaction(tmp_path: Path) -> None:
    """A copy of the files taken while the broker runs (what kill -9 leaves: the log not yet
    copied back), the log's last bytes garbled: every transaction before the torn one is read
    back, the torn one is gone whole, and the store takes writes again."""
    live = tmp_path / "live"
    db = _db(live)
    db._connection().execute("PRAGMA wal_autocheckpoint=0")  # keep every change in the log
    for i in range(20):
        db.write([Row(TOPICS, f"T{i:02d}", 0, f'{{"n": {i}}}'), Row(VERSIONS, TOPICS, 0, str(i))])
    wal = live / "config" / "metadata.db-wal"
    size_before_last = wal.stat().st_size
    db.write([Row(TOPICS, "Last", 0, '{"n": "last"}'), Row(VERSIONS, TOPICS, 0, "20")])
    crashed = tmp_path / "crashed" / "config"
    crashed.mkdir(parents=True)
    for name in ("metadata.db", "metadata.db-wal"):
        shutil.copyfile(live / "config" / name, crashed / name)
    db.close()
    torn = crashed / "metadata.db-wal"
    data = bytearray(torn.read_bytes())
    assert len(data) > size_before_last
    for i in range(len(data) - 100, len(data)):  # the last frame's tail: never fully written
        data[i] ^= 0xFF
    torn.write_bytes(bytes(data))
    db = _db(tmp_path / "crashed")
    names = [k for k, _, _ in db.rows(TOPICS)]
    assert names == [f"T{i:02d}" for i in range(20)]  # the torn transaction is gone, whole
    assert list(db.rows(VERSIONS)) == [(TOPICS, 0, "19")]
    db.write([Row(TOPICS, "Again", 0, "{}")])
    assert db.count(TOPICS) == 21
    db.close()


def test_the_files_have_the_stores_mode(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir(mode=0o700)
    old = os.umask(0o022)
    try:
        db = _db(tmp_path)
        db.write([Row(TOPICS, "A", 0, "{}")])
        for name in ("metadata.db", "metadata.db-wal", "metadata.db-shm"):
            assert stat.S_IMODE((config / name).stat().st_mode) == 0o600, name
        db.close()
    finally:
        os.umask(old)


def test_read_only_needs_an_existing_store_and_never_writes(tmp_path: Path) -> None:
    path = str(tmp_path / "config" / "metadata.db")
    with pytest.raises(StoreError, match="no metadata store"):
        MetadataDB(path, read_only=True).open()
    with _db(tmp_path) as db:
        db.write([Row(TOPICS, "A", 0, "{}")])
        with MetadataDB(path, read_only=True) as reader:  # beside the writer (WAL)
            assert [k for k, _, _ in reader.rows(TOPICS)] == ["A"]
            with pytest.raises(StoreError, match="write failed"):
                reader.write([Row(TOPICS, "B", 0, "{}")])


def test_a_database_of_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config" / "metadata.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        MetadataDB(str(path)).open()


def test_export_gives_each_table_in_its_json_files_shape(tmp_path: Path) -> None:
    with _db(tmp_path) as db:
        db.write([Row(TOPICS, "A", 0, '{"topicName": "A", "perm": 6}'),
                  Row(VERSIONS, TOPICS, 0, '{"timestamp": 5, "counter": 2}'),
                  Row(CONSUMER_OFFSETS, "A@g", 0, 12), Row(CONSUMER_OFFSETS, "A@g", 1, 3),
                  Row(DELAY_OFFSETS, "3", 0, 40)])
        out = export_tables(db)
        assert out == {
            "topics": {"topicConfigTable": {"A": {"topicName": "A", "perm": 6}},
                       "dataVersion": {"timestamp": 5, "counter": 2}},
            "subscriptionGroups": {"subscriptionGroupTable": {}},
            "consumerOffsets": {"offsetTable": {"A@g": {"0": 12, "1": 3}}},
            "delayOffsets": {"offsetTable": {"3": 40}},
        }
        assert list(export_tables(db, ["consumerOffsets"])) == ["consumerOffsets"]
        with pytest.raises(StoreError, match="unknown metadata table"):
            export_tables(db, ["users"])


def test_a_checkpoint_beside_the_writer_lets_the_log_start_over(tmp_path: Path) -> None:
    db = _db(tmp_path)
    wal = tmp_path / "config" / "metadata.db-wal"
    for i in range(300):
        db.write([Row(TOPICS, f"T{i:04d}", 0, "x" * 200)])
    grown = wal.stat().st_size
    log_pages, copied = db.checkpoint()
    assert log_pages > 0 and copied == log_pages  # nothing held it back
    for i in range(300):  # the log restarts from its beginning: it does not grow further
        db.write([Row(TOPICS, f"T{i:04d}", 0, "y" * 200)])
    assert wal.stat().st_size <= grown
    reader = MetadataDB(db.path, read_only=True).open()
    assert reader.count(TOPICS) == 300 and next(reader.rows(TOPICS))[2] == "y" * 200
    reader.close()
    db.close()
    with pytest.raises(StoreError, match="not open"):
        db.checkpoint()
