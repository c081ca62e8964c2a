"""Crash recovery with real processes (kill -9) and with bytes corrupted on disk."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orbitmq.config import FlushDiskType, StoreConfig, StoreType
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import GetMessageStatus, MessageInner, MessageStore, PutMessageStatus
from orbitmq.testing.store_crash_child import CRASH_TOPIC, crash_config, crash_message
from orbitmq.testing.store_put import put_durably

ROUNDS = 20
READY_TIMEOUT_S = 60.0
Ack = tuple[int, int, int, int, int]  # queue id, queue offset, commit offset, round, seq


class ChildOutput:
    """Reads the child's stdout on a thread so that every wait here has a bound."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            if not raw.endswith(b"\n"):
                break  # a line cut by the kill: never acknowledged to anyone
            line = raw.decode().strip()
            if line == "ready":
                self.ready.set()
            else:
                self.lines.append(line)

    def finish(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), "child output did not end after the kill"


def _run_and_kill(store_dir: str, round_no: int, tmp_path: Path,
                  store_type: StoreType = StoreType.DEFAULT) -> list[Ack]:
    rng = random.Random(round_no)
    err = open(tmp_path / f"child-{round_no}.err", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "orbitmq.testing.store_crash_child", store_dir, str(round_no),
         "3", store_type.value],
        stdout=subprocess.PIPE,
        stderr=err,
    )
    try:
        out = ChildOutput(proc)
        if not out.ready.wait(READY_TIMEOUT_S):
            proc.kill()
            pytest.fail(f"child not ready: {(tmp_path / f'child-{round_no}.err').read_text()}")
        time.sleep(rng.uniform(0.01, 0.4))  # the random moment of the kill
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        out.finish(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        assert proc.stdout is not None
        proc.stdout.close()
        err.close()
    acks = []
    for line in out.lines:
        tag, *fields = line.split()
        assert tag == "ack", line
        qid, qoff, phy, rnd, seq = map(int, fields)
        acks.append((qid, qoff, phy, rnd, seq))
    return acks


def _check_acked(store: MessageStore, acked: list[Ack]) -> None:
    for qid, qoff, phy, rnd, seq in acked:
        got = store.get_message("g", CRASH_TOPIC, qid, qoff, 1)
        assert got.status is GetMessageStatus.FOUND, (rnd, seq, got.status)
        msg = decode_stored_message(got.buffers[0])  # checks the body CRC
        want = crash_message(rnd, seq)
        assert msg.commit_log_offset == phy
        assert msg.body == want.body
        assert msg.properties == want.properties


def _check_every_message_and_tail(store: MessageStore) -> None:
    for (topic, qid), cq in store.consume_queue_table.items():
        offset = cq.min_offset
        while offset < cq.max_offset:
            got = store.get_message("g", topic, qid, offset, 32)
            assert got.status is GetMessageStatus.FOUND
            for raw in got.buffers:
                assert decode_stored_message(raw).queue_offset == offset
                offset += 1
    last = store.commit_log.mfq.last_file()
    assert last is not None
    assert not any(last.buf[last.wrote_position :]), "bytes left past the recovered end"


@pytest.mark.parametrize("store_type", list(StoreType))
def test_kill_9_under_sync_flush_keeps_every_acknowledged_message(
        tmp_path: Path, store_type: StoreType) -> None:
    store_dir = str(tmp_path / "store")
    acked: list[Ack] = []
    truncations = 0
    for round_no in range(ROUNDS):
        acked += _run_and_kill(store_dir, round_no, tmp_path, store_type)
        with MessageStore(crash_config(store_dir, store_type)) as store:
            report = store.recovery_report
            assert report is not None and not report.last_exit_ok
            truncations += report.truncated_from is not None
            _check_acked(store, acked)
            _check_every_message_and_tail(store)
            # Appends continue, and what is appended now must survive the next kills too.
            seq = 10_000_000 + round_no
            result = put_durably(store, [crash_message(1000 + round_no, seq)])
            assert result.status is PutMessageStatus.PUT_OK and result.append is not None
            assert store.wait_dispatched()
            acked.append(
                (seq % 4, result.append.queue_offset, result.append.wrote_offset, 1000 + round_no, seq)
            )
            _check_acked(store, acked[-1:])
            if acked:
                qid, qoff, phy, rnd, seq = random.Random(round_no).choice(acked)
                found = store.query_message(CRASH_TOPIC, f"r{rnd}-s{seq}", 4)
                assert [m.commit_log_offset for m in found] == [phy]
    print(f"acknowledged={len(acked)} torn tails truncated={truncations}")
    assert len(acked) > ROUNDS * 5, "the children acknowledged too little to test anything"


def _fill(store_dir: str, count: int) -> list[tuple[int, int, int]]:
    cfg = StoreConfig(
        store_path=store_dir,
        mapped_file_size_commitlog=16 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=512,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
    )
    placed = []
    with MessageStore(cfg) as store:
        for i in range(count):
            r = store.put([MessageInner("Corrupt", 0, bytes([i % 251]) * 200, {"KEYS": f"c{i}"})])
            assert r.append is not None
            placed.append((i, r.append.queue_offset, r.append.wrote_offset))
    return placed


@pytest.mark.parametrize("last_exit_ok", [True, False])
@pytest.mark.parametrize(
    ("field_at", "reason"),
    [(100, "body CRC mismatch"), (5, "bad magic code"), (1, "impossible total size")],
)
def test_corruption_in_the_last_segment_stops_recovery_there(
    tmp_path: Path, last_exit_ok: bool, field_at: int, reason: str
) -> None:
    store_dir = str(tmp_path / "store")
    placed = _fill(store_dir, 300)
    cfg = StoreConfig(
        store_path=store_dir,
        mapped_file_size_commitlog=16 * 1024,
        mapped_file_size_consume_queue=20 * 100,
        max_hash_slot_num=64,
        max_index_num=512,
    )
    seg_dir = Path(store_dir) / "commitlog"
    last_seg = sorted(seg_dir.iterdir())[-1]
    seg_start = int(last_seg.name)
    in_last = [p for p in placed if p[2] >= seg_start]
    victim_i, victim_qoff, victim_phy = in_last[len(in_last) // 2]
    with open(last_seg, "r+b") as f:
        at = victim_phy - seg_start + field_at
        f.seek(at)
        old = f.read(1)
        f.seek(at)
        f.write(bytes([old[0] ^ 0x5A]))
    if not last_exit_ok:
        (Path(store_dir) / "abort").write_bytes(b"")

    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert report is not None
        assert report.truncated_from == victim_phy
        assert report.reason.startswith(reason)
        assert report.corrupted_durable_data
        assert store.get_max_offset_in_queue("Corrupt", 0) == victim_qoff
        for i, qoff, _phy in placed[:victim_i]:
            got = store.get_message("g", "Corrupt", 0, qoff, 1)
            assert got.status is GetMessageStatus.FOUND
            assert decode_stored_message(got.buffers[0]).body == bytes([i % 251]) * 200
        gone = store.get_message("g", "Corrupt", 0, victim_qoff + 1, 1)
        assert gone.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
        assert store.query_message("Corrupt", f"c{victim_i + 1}", 4) == []
        r = store.put([MessageInner("Corrupt", 0, b"after", {})])
        assert r.status is PutMessageStatus.PUT_OK and r.append is not None
        assert r.append.queue_offset == victim_qoff and r.append.wrote_offset == victim_phy
        assert store.wait_dispatched()
        got = store.get_message("g", "Corrupt", 0, victim_qoff, 1)
        assert decode_stored_message(got.buffers[0]).body == b"after"
