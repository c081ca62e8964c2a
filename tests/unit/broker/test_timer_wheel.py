"""The timer's files (broker/timer/wheel_files.py): chains, checkpoint, recovery."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orbitmq.broker.timer.timer_service import timer_due_ms
from orbitmq.broker.timer.wheel_files import RECORD_SIZE, WheelFiles
from orbitmq.errors import BrokerError, StoreError


def _files(path: Path, slots: int = 1000) -> WheelFiles:
    files = WheelFiles(str(path), 100, slots)
    files.open()
    return files


def test_records_chain_per_tick_newest_first(tmp_path: Path) -> None:
    files = _files(tmp_path)
    files.append([(10, 1000, 0, 0, 50), (11, 1100, 50, 1, 60), (10, 1050, 110, 2, 70)])
    assert [r.queue_offset for r in files.chain(files.head(10))] == [2, 0]
    assert [r.queue_offset for r in files.chain(files.head(10), skip=1)] == [0]
    assert [r.phy_offset for r in files.chain(files.head(11))] == [50]
    assert files.head(12) == 0 and files.head(1010) == files.head(10)  # slots wrap around
    files.close()


def test_recovery_relinks_records_past_the_checkpoint_and_cuts_a_torn_one(tmp_path: Path) -> None:
    files = _files(tmp_path)
    files.append([(5, 500, 0, 0, 10)])
    files.checkpoint.enqueued = 1
    files.save_checkpoint()
    files.append([(5, 520, 10, 1, 10), (6, 600, 20, 2, 10)])
    files.set_head(5, 1)  # as if the wheel's later writes were lost in a crash
    files.set_head(6, 0)
    files.close()
    with open(tmp_path / "timerlog", "ab") as f:
        f.write(b"\x01" * (RECORD_SIZE - 3))  # a torn record
    again = _files(tmp_path)
    assert again.recover() == 3  # the enqueue goes on after the whole records
    assert [r.queue_offset for r in again.chain(again.head(5))] == [1, 0]
    assert [r.queue_offset for r in again.chain(again.head(6))] == [2]
    assert os.path.getsize(tmp_path / "timerlog") == 3 * RECORD_SIZE
    again.close()


def test_a_detached_chain_stays_detached_after_recovery(tmp_path: Path) -> None:
    files = _files(tmp_path)
    files.append([(7, 700, 0, 0, 10)])
    files.checkpoint.firing = {"tick": 7, "head": files.head(7), "done": 0}
    files.save_checkpoint()
    files.close()
    again = _files(tmp_path)
    again.recover()
    assert again.head(7) == 0 and again.checkpoint.firing is not None
    assert [r.queue_offset for r in again.chain(again.checkpoint.firing["head"])] == [0]
    again.close()


def test_the_wheel_geometry_may_not_change_under_pending_timers(tmp_path: Path) -> None:
    files = _files(tmp_path)
    files.save_checkpoint()
    files.close()
    with pytest.raises(StoreError, match="timer_precision_ms"):
        WheelFiles(str(tmp_path), 100, 2000).open()


def test_timer_properties_give_the_delivery_time() -> None:
    assert timer_due_ms({"TIMER_DELIVER_MS": "5000"}, 1000) == 5000
    assert timer_due_ms({"TIMER_DELAY_SEC": "3"}, 1000) == 4000
    assert timer_due_ms({"TIMER_DELAY_MS": "250"}, 1000) == 1250
    assert timer_due_ms({}, 1000) is None
    for bad in ("-1", "soon", "1e3", "9" * 30):
        with pytest.raises(BrokerError, match="not a non-negative whole number"):
            timer_due_ms({"TIMER_DELAY_SEC": bad}, 0)
