"""A slave's store: the master's bytes at the master's offsets, checked whole before they are
written (issue 15 item 2), and the operator's truncation (item 6). Real stores on temp dirs, the
master's frames cut by the same code the HA server uses (MessageStore.replication_frame)."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.errors import StoreError
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import MessageStore
from orbitmq.store.replica_append import ReplicaAppendStatus
from orbitmq.store.truncate import truncate_store

SEGMENT = 64 * 1024


def _stores(tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    master = MessageStore(config(tmp_path / "m"), run_threads=False)
    slave = MessageStore(config(tmp_path / "s"), run_threads=False)
    master.start()
    slave.set_replica(True)
    slave.start()
    return master, slave


def _fill(master: MessageStore, count: int, seed: int = 1, topics: int = 3) -> None:
    rng = random.Random(seed)
    for i in range(count):
        size = rng.choice((10, 300, 3000, 9000))
        m = msg(f"T{i % topics}", i % 2, rng.randbytes(size), KEYS=f"k{i}")
        assert master.put([m]).status.name == "PUT_OK"
    master.wake()


def _replicate(master: MessageStore, slave: MessageStore, start: int = 0,
               batch_max: int = 8 * 1024) -> int:
    """Stream master -> slave from ``start``; returns the number of frames."""
    at, frames = start, 0
    while at < master.max_physical_offset():
        frame = master.replication_frame(at, batch_max)
        assert frame is not None, at
        data, nxt = frame
        result = slave.append_replicated(at, data)
        assert result.ok, result
        assert result.end_offset == nxt
        at, frames = nxt, frames + 1
    slave.wake()
    return frames


def _log(store: MessageStore) -> bytes:
    out = bytearray()
    for mf in store.commit_log.mfq.files:
        out += mf.view[: mf.wrote_position]
    return bytes(out)


def test_the_slave_holds_the_masters_bytes_at_the_masters_offsets(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        _fill(master, 200)
        assert len(master.commit_log.mfq.files) > 3  # segment rolls and blank entries included
        frames = _replicate(master, slave)
        assert frames > 10
        assert slave.max_physical_offset() == master.max_physical_offset()
        assert _log(slave) == _log(master)
        assert slave.wait_dispatched(5)
        for topic in ("T0", "T1", "T2"):
            for qid in (0, 1):
                mine = slave.get_message("g", topic, qid, 0, 1000)
                theirs = master.get_message("g", topic, qid, 0, 1000)
                assert [bytes(b) for b in mine.buffers] == [bytes(b) for b in theirs.buffers]
        assert slave.query_message("T1", "k7", 10)[0].keys == ["k7"]
        assert slave.commit_log.topic_queue_table == master.commit_log.topic_queue_table
    finally:
        master.shutdown()
        slave.shutdown()


def test_a_slave_refuses_puts_and_a_master_refuses_replicated_bytes(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        refused = slave.put([msg()])
        assert refused.status.name == "SERVICE_NOT_AVAILABLE" and "slave" in (refused.remark or "")
        _fill(master, 3)
        data, _ = master.replication_frame(0, 1 << 20) or (b"", 0)
        assert master.append_replicated(master.max_physical_offset(), data).status is \
            ReplicaAppendStatus.NOT_ACCEPTED
    finally:
        master.shutdown()
        slave.shutdown()


def _garble(data: bytes, how: str) -> bytes:
    b = bytearray(data)
    if how == "body":
        b[-20] ^= 0xFF  # a properties or body byte: CRC or properties rule
        b[120] ^= 0x01
    elif how == "magic":
        b[4] ^= 0xFF
    elif how == "physical":
        struct.pack_into(">q", b, 28, struct.unpack_from(">q", b, 28)[0] + 1)
    elif how == "truncated":
        del b[-3:]
    elif how == "size":
        struct.pack_into(">i", b, 0, len(b) + 100)
    return bytes(b)


@pytest.mark.parametrize("how", ["body", "magic", "physical", "truncated", "size"])
def test_a_garbled_frame_is_refused_whole_and_the_store_is_unchanged(tmp_path: Path,
                                                                     how: str) -> None:
    master, slave = _stores(tmp_path)
    try:
        _fill(master, 20)
        data, nxt = master.replication_frame(0, 1 << 20) or (b"", 0)
        result = slave.append_replicated(0, _garble(data, how))
        assert result.status is ReplicaAppendStatus.GARBLED and result.problem
        assert slave.max_physical_offset() == 0 and result.end_offset == 0
        assert slave.append_replicated(0, data).ok  # the genuine frame still goes
        assert slave.max_physical_offset() == nxt
    finally:
        master.shutdown()
        slave.shutdown()


def test_frames_must_continue_the_log_and_queue_offsets_must_follow(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        for i in range(5):  # one queue, one message per frame (batch_max below a message)
            assert master.put([msg("T", 0, b"x" * 100, KEYS=f"k{i}")]).status.name == "PUT_OK"
        first = master.replication_frame(0, 1)
        assert first is not None
        data, nxt = first
        mid = slave.append_replicated(SEGMENT // 2, data)  # an empty log starts at a segment start
        assert mid.status is ReplicaAppendStatus.OFFSET_MISMATCH
        assert slave.append_replicated(0, data).ok
        again = slave.append_replicated(0, data)  # the same bytes twice: not where the log ends
        assert again.status is ReplicaAppendStatus.OFFSET_MISMATCH and again.end_offset == nxt
        second = master.replication_frame(nxt, 1)
        assert second is not None
        third = master.replication_frame(second[1], 1)
        assert third is not None
        # The 3rd message placed where the 2nd belongs (its PHYSICALOFFSET patched, its CRC
        # intact): well formed, but its queue offset skips one.
        moved = bytearray(third[0])
        struct.pack_into(">q", moved, 28, nxt)
        skipped = slave.append_replicated(nxt, bytes(moved))
        assert skipped.status is ReplicaAppendStatus.GARBLED
        assert "queue offset 2" in (skipped.problem or "")
        assert slave.append_replicated(nxt, second[0]).ok
    finally:
        master.shutdown()
        slave.shutdown()


def test_the_tail_is_the_last_message_and_its_segments_end(tmp_path: Path) -> None:
    master, slave = _stores(tmp_path)
    try:
        assert slave.replica_tail() is None
        _fill(master, 120)
        _replicate(master, slave)
        tail = slave.replica_tail()
        assert tail is not None and tail.end == master.max_physical_offset()
        joined = b"".join(tail.entries)
        frame = master.replication_frame(tail.offset, 1 << 20)
        assert frame is not None and frame[0].startswith(joined)
        last = decode_stored_message(tail.entries[0])
        assert last.commit_log_offset == tail.offset
    finally:
        master.shutdown()
        slave.shutdown()


def test_truncate_cuts_at_an_entry_boundary_and_recovery_drops_queue_entries(
        tmp_path: Path) -> None:
    master, _slave = _stores(tmp_path)
    _slave.shutdown()
    cfg = master.config
    _fill(master, 120, topics=1)
    assert master.wait_dispatched(5)
    offsets = [o for o in range(master.get_max_offset_in_queue("T0", 0))]
    entry = master.queue_entry("T0", 0, offsets[20])
    assert entry is not None
    end_before = master.max_physical_offset()
    master.shutdown()
    report = truncate_store(cfg, entry[0] + 5)  # inside a message: cut at its start
    assert report.cut == entry[0] and report.old_end == end_before
    assert report.new_end == entry[0] and report.messages_dropped > 0
    again = MessageStore(cfg, run_threads=False)
    again.start()
    try:
        assert again.max_physical_offset() == entry[0]
        assert again.get_max_offset_in_queue("T0", 0) == 20
        assert again.put([msg("T0", 0)]).append.queue_offset == 20  # type: ignore[union-attr]
    finally:
        again.shutdown()
    assert truncate_store(cfg, 10**12).messages_dropped == 0  # past the end: nothing to do


def test_a_demoted_master_cut_back_takes_its_new_masters_stream_at_the_cut(tmp_path: Path) -> None:
    """Found by `make chaos` (seed 2026, controller mode: the master paused past its lease):
    an old master that appended a tail nobody acknowledged, then followed the new master, cut
    its log back, and refused every frame at the cut ("offsets only grow", its append mark
    still at the old end): it never rejoined the in-sync set."""
    old, new = _stores(tmp_path)
    try:
        _fill(old, 20, seed=3)
        cut = old.max_physical_offset()
        _replicate(old, new)  # the new master holds what the set acknowledged
        _fill(old, 15, seed=4)  # the old master's tail, never replicated
        new.set_replica(False)  # elected
        _fill(new, 10, seed=5)
        old.set_replica(True)  # steps down and follows
        report = old.truncate_replica(cut)
        assert report.cut == cut and report.messages_dropped == 15
        frames = _replicate(new, old, start=cut)
        assert frames >= 1
        assert _log(old) == _log(new)
        assert old.wait_dispatched(5)
        assert old.commit_log.topic_queue_table == new.commit_log.topic_queue_table
    finally:
        old.shutdown()
        new.shutdown()


def test_a_restarted_store_has_its_epochs_less_those_past_its_recovered_end(tmp_path: Path) -> None:
    """Controller mode's elections read the epoch list: a restart loads it from the file (an
    empty list would make the log look older than controller mode, to be cut to 0), without the
    epochs that start past the end recovery found (the store does not hold their bytes)."""
    store = MessageStore(config(tmp_path / "e"), run_threads=False)
    store.start()
    _fill(store, 20)
    end = store.max_physical_offset()
    store.epochs.replace([(1, 0), (2, end), (5, end + 4096)])
    store.shutdown()
    again = MessageStore(config(tmp_path / "e"), run_threads=False)
    again.start()
    try:
        assert again.max_physical_offset() == end
        assert again.epochs.entries == [(1, 0), (2, end)]
        assert again.epochs.load() == [(1, 0), (2, end)]  # written back
    finally:
        again.shutdown()
    (tmp_path / "e" / "store" / "epochs.json").write_text('{"epochs": [[2, 0], [1, 5]]}')
    broken = MessageStore(config(tmp_path / "e"), run_threads=False)
    with pytest.raises(StoreError, match="epoch file"):
        broken.start()
