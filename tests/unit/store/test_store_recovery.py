"""Recovery on real files: clean restarts, torn tails, lost checkpoints and queues."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from store_fixtures import bodies, config, msg

from orbitmq.store import GetMessageStatus, MessageStore, PutMessageStatus
from orbitmq.store.checkpoint import StoreCheckpoint


def _fill(cfg, count: int, queues: int = 3) -> list[bytes]:
    payloads = [os.urandom(50 + i * 13 % 900) for i in range(count)]
    with MessageStore(cfg) as store:
        for i, p in enumerate(payloads):
            assert store.put([msg("Rec", i % queues, p, KEYS=f"k{i}")]).ok
    return payloads


def _read_queue(store: MessageStore, queue_id: int) -> list[bytes]:
    out: list[bytes] = []
    offset = store.get_min_offset_in_queue("Rec", queue_id)
    while offset < store.get_max_offset_in_queue("Rec", queue_id):
        r = store.get_message("g", "Rec", queue_id, offset, 32)
        assert r.status is GetMessageStatus.FOUND
        out += bodies(r)
        offset = r.next_begin_offset
    return out


def test_clean_restart_trusts_the_checkpoint(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    payloads = _fill(cfg, 300)
    assert not os.path.exists(os.path.join(cfg.store_path, "abort"))
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None and report.last_exit_ok and report.checkpoint_valid
        assert report.truncated_from is None and report.messages_redispatched == 0
        assert report.scan_from == store.commit_log.mfq.files[-1].file_from_offset
        assert os.path.exists(os.path.join(cfg.store_path, "abort"))
        for q in range(3):
            assert _read_queue(store, q) == payloads[q::3]
        r = store.put([msg("Rec", 0, b"next")])
        assert r.append is not None and r.append.queue_offset == 100


def test_torn_tail_after_a_crash_is_cut_and_appends_continue(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    payloads = _fill(cfg, 200)
    seg_dir = Path(cfg.store_path) / "commitlog"
    last = sorted(seg_dir.iterdir())[-1]
    with MessageStore(cfg) as store:
        end = store.max_physical_offset()
    # A crash mid-append: half a message after the end, and the abort file left behind.
    with open(last, "r+b") as f:
        f.seek(end - int(last.name))
        f.write((400).to_bytes(4, "big") + bytes.fromhex("DAA320A7") + os.urandom(100))
    (Path(cfg.store_path) / "abort").write_bytes(b"")
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None and not report.last_exit_ok
        assert report.truncated_from == end and report.valid_end == end
        assert not report.corrupted_durable_data  # past the synced offset: a torn tail
        assert store.max_physical_offset() == end
        for q in range(3):
            assert _read_queue(store, q) == payloads[q::3]
        r = store.put([msg("Rec", 1, b"after")])
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        assert r.append.wrote_offset == end


def test_lost_checkpoint_and_queues_are_rebuilt_from_the_commit_log(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    payloads = _fill(cfg, 300)
    os.remove(os.path.join(cfg.store_path, "checkpoint"))
    shutil.rmtree(os.path.join(cfg.store_path, "consumequeue"))
    (Path(cfg.store_path) / "abort").write_bytes(b"")
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None and not report.checkpoint_valid
        assert report.scan_from == 0 and report.messages_redispatched == 300
        for q in range(3):
            assert _read_queue(store, q) == payloads[q::3]
        assert [m.body for m in store.query_message("Rec", "k7", 4)] == [payloads[7]]


class _HeaderWriteProbe:
    """An index header field whose conversion to bytes runs ``on_convert``: a callback in the
    middle of the header write of a put (see test_index_file for why that instant matters)."""

    def __init__(self, value: int, on_convert) -> None:
        self.value = value
        self.on_convert = on_convert

    def __index__(self) -> int:
        self.on_convert()
        return self.value


def test_a_kill_inside_an_index_header_write_keeps_every_key(tmp_path: Path) -> None:
    """The store as kill -9 leaves it in the middle of an index header write: every message is
    still readable through its queue and findable by its key after recovery."""
    cfg = config(tmp_path)
    crashed = tmp_path / "crashed"
    with MessageStore(cfg, run_threads=False) as store:
        placed = []
        for i in range(40):
            r = store.put([msg("Rec", i % 2, b"m%d" % i, KEYS=f"k{i}")])
            assert r.append is not None
            placed.append(r.append.wrote_offset)
        store.run_services_once()  # dispatched and checkpointed
        assert store.index is not None
        store.dispatcher._plan = None  # the Python writer (the C one copies a header at once)
        f = store.index.files[-1]
        f._slot_count = _HeaderWriteProbe(
            f._slot_count, lambda: shutil.copytree(cfg.store_path, crashed)
        )
        r = store.put([msg("Rec", 0, b"last", KEYS="k0")])  # k0's slot has a chain
        assert r.append is not None
        store.dispatcher.dispatch_available()
        f._slot_count = f._slot_count.value
    cfg_crashed = config(tmp_path, store_path=str(crashed))
    with MessageStore(cfg_crashed, run_threads=False) as store:
        report = store.recovery_report
        assert report is not None and not report.last_exit_ok
        assert report.redispatch_from == r.append.wrote_offset  # the checkpoint was before it
        for i, phy in enumerate(placed):
            got = store.get_message("g", "Rec", i % 2, i // 2, 1)
            assert got.status is GetMessageStatus.FOUND
            found = store.query_message("Rec", f"k{i}", 4)
            want = [r.append.wrote_offset, phy] if i == 0 else [phy]
            assert [m.commit_log_offset for m in found] == want, f"k{i}"


def test_torn_checkpoint_reads_as_missing(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    _fill(cfg, 50)
    path = Path(cfg.store_path) / "checkpoint"
    data = bytearray(path.read_bytes())
    assert StoreCheckpoint.decode(bytes(data)) is not None
    data[10] ^= 1
    path.write_bytes(bytes(data))
    assert StoreCheckpoint.decode(bytes(data)) is None
    with MessageStore(cfg) as store:
        assert store.recovery_report is not None and not store.recovery_report.checkpoint_valid
        assert store.get_max_offset_in_queue("Rec", 0) == 17


def test_queue_entries_past_the_log_end_are_dropped(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    payloads = _fill(cfg, 90)
    with MessageStore(cfg) as store:
        offsets = [store.queue_entry("Rec", 0, i) for i in range(30)]
    # Zero the commit log from message 20 of queue 0 on, as if those bytes never reached the disk.
    cut = offsets[20][0]  # type: ignore[index]
    seg_dir = Path(cfg.store_path) / "commitlog"
    for seg in sorted(seg_dir.iterdir()):
        start = int(seg.name)
        size = seg.stat().st_size
        if start + size <= cut:
            continue
        with open(seg, "r+b") as f:
            at = max(0, cut - start)
            f.seek(at)
            f.write(bytes(size - at))
    (Path(cfg.store_path) / "abort").write_bytes(b"")
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None and report.valid_end == cut
        assert store.get_max_offset_in_queue("Rec", 0) == 20
        assert _read_queue(store, 0) == payloads[0:60:3]
        assert report.queue_entries_dropped >= 10  # queue 0's: the others are not loaded yet
        assert store.load_queues() == 0  # every queue is cut when it is loaded
        assert report.queue_entries_dropped >= 10 * 3 - 2
