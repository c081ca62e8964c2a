"""A corrupt message in a store's own commit log (docs/replication.md, "Corruption"): a slave
never serves it, counts and logs it, cuts its log there and takes the rest from its master
again; a master with ``check_crc_on_read`` never serves it either. Real stores on temp dirs, the
bytes damaged through the segment file (the store's mapping sees them, as a bad disk's), the
master's frames cut by the code the HA server uses."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.errors import StoreError
from orbitmq.protocol import stored
from orbitmq.store import MessageStore
from orbitmq.testing.corrupt import Damage, damage_segment, last_segment

TOPIC = "T"
COUNT = 120  # several 64 KiB segments of ~1.5 KiB messages


def _body(i: int) -> bytes:
    return (f"message-{i:05d}-".encode() * 100)[:1500]


def _stores(tmp_path: Path, **changes: object) -> tuple[MessageStore, MessageStore]:
    master = MessageStore(config(tmp_path / "m", **changes), run_threads=False)
    slave = MessageStore(config(tmp_path / "s", **changes), run_threads=False)
    master.start()
    slave.set_replica(True)
    slave.start()
    for i in range(COUNT):
        assert master.put([msg(TOPIC, 0, _body(i))]).status.name == "PUT_OK"
    master.wake()
    _replicate(master, slave, 0)
    return master, slave


def _replicate(master: MessageStore, slave: MessageStore, start: int) -> None:
    at = start
    while at < master.max_physical_offset():
        frame = master.replication_frame(at, 8 * 1024)
        assert frame is not None, at
        result = slave.append_replicated(at, frame[0])
        assert result.ok, result
        at = frame[1]
    slave.wake()
    assert slave.wait_dispatched(5)


def _read_all(store: MessageStore) -> tuple[list[bytes], int]:
    """Every body a reader gets from the start, pulling as a consumer does; the next offset."""
    out: list[bytes] = []
    offset = 0
    while True:
        result = store.get_message("g", TOPIC, 0, offset, 32, runs=True)
        for raw in result.buffers:  # a run may hold several messages: each must be intact
            for m in stored.iter_stored_messages(raw, check_crc=True):
                out.append(m.body)
        if result.next_begin_offset == offset:
            return out, offset
        offset = result.next_begin_offset


def _middle_segment(store: MessageStore) -> str:
    files = store.commit_log.mfq.files
    assert len(files) >= 3
    return files[len(files) // 2].path


@pytest.mark.parametrize("kind", ["body", "header"])
def test_a_slave_never_serves_a_flipped_message_and_repairs_from_its_master(
        tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    master, slave = _stores(tmp_path)
    try:
        damage = damage_segment(_middle_segment(slave), kind)  # under the live mapping
        with caplog.at_level(logging.ERROR, logger="orbitmq.store.corruption"):
            bodies, reached = _read_all(slave)
        # Everything before the damaged message, intact; nothing from it on.
        assert bodies == [_body(i) for i in range(damage.queue_offset)]
        assert reached == damage.queue_offset
        assert slave.corruption.counts == {"master": 0, "slave": 1}
        lines = [r.getMessage() for r in caplog.records if "corrupt message" in r.getMessage()]
        assert len(lines) == 1
        assert f"offset={damage.offset}" in lines[0] and slave.config.store_path in lines[0]
        assert ("body CRC mismatch" if kind == "body" else "physical offset") in lines[0]
        # The log was cut at the damaged message: the slave is behind its master now...
        assert slave.max_physical_offset() == damage.offset < master.max_physical_offset()
        assert slave.corruption.repair_pending(slave.max_physical_offset()) is not None
        # ...and takes the rest again from it, checked as it comes.
        _replicate(master, slave, slave.max_physical_offset())
        assert slave.max_physical_offset() == master.max_physical_offset()
        assert slave.corruption.repair_pending(slave.max_physical_offset()) is None
        assert _read_all(slave) == ([_body(i) for i in range(COUNT)], COUNT)
        assert slave.corruption.counts["slave"] == 1
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_damaged_message_in_a_run_cuts_the_answer_before_it(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        damage = damage_segment(_middle_segment(slave), "body")
        start = max(damage.queue_offset - 3, 0)
        result = slave.get_message("g", TOPIC, 0, start, 32, runs=True)
        assert result.message_count == damage.queue_offset - start
        assert sum(len(b) for b in result.buffers) == result.total_size
        assert result.next_begin_offset == damage.queue_offset
        again = slave.get_message("g", TOPIC, 0, damage.queue_offset, 32)
        assert again.buffers == [] and again.status.name == "OFFSET_OVERFLOW_ONE"
    finally:
        master.shutdown()
        slave.shutdown()


def _restart(store: MessageStore, *, replica: bool) -> MessageStore:
    again = MessageStore(store.config, run_threads=False)
    again.set_replica(replica)
    again.start()
    return again


def test_a_segment_truncated_mid_message_is_not_served_and_is_fetched_again(
        tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        slave.shutdown()
        path = last_segment(slave.config.store_path)
        assert path is not None
        damage = damage_segment(path, "truncate")
        slave = _restart(slave, replica=True)  # the short last segment is dropped at load
        assert slave.max_physical_offset() <= damage.offset
        bodies, reached = _read_all(slave)
        assert bodies == [_body(i) for i in range(reached)] and reached <= damage.queue_offset
        _replicate(master, slave, slave.max_physical_offset())
        assert _read_all(slave) == ([_body(i) for i in range(COUNT)], COUNT)
    finally:
        master.shutdown()
        slave.shutdown()


def test_recovery_cuts_a_tail_zeroed_mid_message_and_counts_durable_damage(
        tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        slave.shutdown()
        path = last_segment(slave.config.store_path)
        assert path is not None
        size = os.path.getsize(path)
        damage = damage_segment(path, "truncate")
        os.truncate(path, size)  # the file keeps its size: the bytes after the cut read zero
        slave = _restart(slave, replica=True)
        report = slave.recovery_report
        assert report is not None and report.valid_end == damage.offset
        assert report.corrupted_durable_data
        assert slave.corruption.counts["slave"] == 1
        _replicate(master, slave, slave.max_physical_offset())
        assert _read_all(slave) == ([_body(i) for i in range(COUNT)], COUNT)
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_master_serves_nothing_corrupt_with_check_crc_on_read(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path, check_crc_on_read=True)
    try:
        damage: Damage = damage_segment(_middle_segment(master), "body")
        bodies, reached = _read_all(master)
        assert bodies == [_body(i) for i in range(damage.queue_offset)]
        assert reached == damage.queue_offset
        assert master.corruption.counts == {"master": 1, "slave": 0}
        # A master has no copy to take: its log stays as it is, and reads keep stopping there.
        assert master.max_physical_offset() > damage.offset
        assert _read_all(master)[1] == damage.queue_offset
        assert master.corruption.counts["master"] == 1  # counted once
        # What it streams is checked by the slave: the damaged frame is never stored.
        slave_end = slave.max_physical_offset()
        assert slave_end == master.max_physical_offset()
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_refuses_a_frame_its_master_read_from_a_damaged_log(tmp_path: Path) -> None:
    master = MessageStore(config(tmp_path / "m"), run_threads=False)
    slave = MessageStore(config(tmp_path / "s"), run_threads=False)
    master.start()
    slave.set_replica(True)
    slave.start()
    try:
        for i in range(COUNT):
            assert master.put([msg(TOPIC, 0, _body(i))]).status.name == "PUT_OK"
        first = master.commit_log.mfq.files[0].path
        damage = damage_segment(first, "body", fraction=0.0)
        frame = master.replication_frame(0, 1 << 20)
        assert frame is not None
        result = slave.append_replicated(0, frame[0])
        assert result.status.name == "GARBLED" and "CRC" in (result.problem or "")
        assert slave.max_physical_offset() == 0 and damage.offset == 0
    finally:
        master.shutdown()
        slave.shutdown()


def test_damage_below_the_checkpoint_recovery_did_not_scan_is_found_by_a_read(
        tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        slave.shutdown()
        first = sorted((Path(slave.config.store_path) / "commitlog").iterdir())[0]
        damage = damage_segment(first, "body")
        slave = _restart(slave, replica=True)
        report = slave.recovery_report
        assert report is not None and report.scan_from > damage.offset  # not re-scanned
        assert report.truncated_from is None and slave.corruption.counts["slave"] == 0
        bodies, reached = _read_all(slave)
        assert bodies == [_body(i) for i in range(damage.queue_offset)]
        assert slave.corruption.counts["slave"] == 1
        assert slave.max_physical_offset() == damage.offset
        _replicate(master, slave, slave.max_physical_offset())
        assert _read_all(slave) == ([_body(i) for i in range(COUNT)], COUNT)
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_lookup_by_offset_on_a_slave_never_returns_a_corrupt_message(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        damage = damage_segment(_middle_segment(slave), "body")
        assert slave.look_message_by_offset(damage.offset) is None  # key and id lookups too
        assert slave.corruption.counts["slave"] == 1
        assert slave.max_physical_offset() == damage.offset  # cut, as a read's finding
        assert master.look_message_by_offset(damage.offset) is not None
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_corrupt_last_message_is_cut_before_the_slave_compares_it_with_its_master(
        tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        tail = slave.replica_tail()
        assert tail is not None
        path = slave.commit_log.mfq.find(tail.offset).path  # type: ignore[union-attr]
        damage = damage_segment(path, "body", fraction=1.0)  # the segment's last message
        assert damage.offset == tail.offset
        again = slave.replica_tail()  # what the HA client reports when it connects
        assert again is not None and again.offset < tail.offset
        assert slave.max_physical_offset() == tail.offset
        assert slave.corruption.counts["slave"] == 1
        _replicate(master, slave, slave.max_physical_offset())
        assert _read_all(slave) == ([_body(i) for i in range(COUNT)], COUNT)
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_pending_repair_survives_a_restart(tmp_path: Path) -> None:
    """A slave killed while it repairs is still repairing when it starts again (it lacks bytes
    it had acknowledged: controller mode must not elect it); the file goes once it is whole."""
    master, slave = _stores(tmp_path)
    try:
        damage = damage_segment(_middle_segment(slave), "body")
        _read_all(slave)
        old_end = master.max_physical_offset()
        assert slave.max_physical_offset() == damage.offset
        slave.shutdown()
        slave = _restart(slave, replica=True)
        assert slave.corruption.repair_until == old_end
        assert slave.corruption.repair_pending(slave.max_physical_offset()) is not None
        _replicate(master, slave, slave.max_physical_offset())
        assert slave.corruption.repair_pending(slave.max_physical_offset()) is None
        slave.shutdown()
        slave = _restart(slave, replica=True)
        assert slave.corruption.repair_until == 0
    finally:
        master.shutdown()
        slave.shutdown()
    (Path(slave.config.store_path) / "repair.json").write_text('{"until": -1}')
    with pytest.raises(StoreError, match="repair file"):
        _restart(slave, replica=True)
