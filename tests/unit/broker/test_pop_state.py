"""POP state (broker/pop/inflight.py) and its log (pop_log.py): hand out, ack, expiry, replay."""

from __future__ import annotations

from pathlib import Path

from orbitmq.broker.pop.inflight import Change, PopState
from orbitmq.broker.pop.pop_log import PopLog, decode_line, encode_change
from orbitmq.broker.pop.pop_service import PopRefused, make_handle, parse_handle


def _state_with_log(tmp_path: Path) -> tuple[PopState, PopLog]:
    log = PopLog(str(tmp_path), sync_each_ack=False, compact_bytes=1 << 20)
    list(log.open())
    return PopState(log.add), log


def _replayed(tmp_path: Path) -> PopState:
    log = PopLog(str(tmp_path), sync_each_ack=False, compact_bytes=1 << 20)
    state = PopState()
    for change in log.open():
        state.apply(change)
    state.rebuild_heaps()
    log.close()
    return state


def test_hand_out_ack_and_committed_offset(tmp_path: Path) -> None:
    state, log = _state_with_log(tmp_path)
    qs = state.queue("G", "T", 0, lambda: 5)
    a = state.hand_out("G", "T", qs, 0, 5, 1, 1_000)
    state.hand_out("G", "T", qs, 0, 6, 1, 2_000)
    state.move_cursor("G", "T", qs, 0, 7)
    assert qs.committed() == 5 and state.inflight_count == 2
    assert state.remove("G", "T", 0, 5) is a
    assert qs.committed() == 6
    assert state.remove("G", "T", 0, 5) is None  # an ack twice changes nothing
    log.flush()
    log.close()
    replayed = _replayed(tmp_path)
    rq = replayed.groups[("G", "T")].queues[0]
    assert list(rq.inflight) == [6] and rq.next_offset == 7 and replayed.inflight_count == 1
    assert replayed.next_gen > rq.inflight[6].gen  # handles given before are never given again


def test_expired_messages_come_back_once_and_stale_heap_items_are_skipped(tmp_path: Path) -> None:
    state, _ = _state_with_log(tmp_path)
    qs = state.queue("G", "T", 0, lambda: 0)
    state.hand_out("G", "T", qs, 0, 0, 1, 100)
    state.hand_out("G", "T", qs, 0, 1, 1, 100)
    state.hand_out("G", "T", qs, 0, 2, 1, 5_000)
    state.remove("G", "T", 0, 1)  # acked: its heap item is stale
    state.reschedule("G", "T", 0, 0, 200, new_gen=True)  # changed: its first heap item is stale
    assert [h.offset for h in state.take_expired("G", "T", 150, 10)] == []
    assert [h.offset for h in state.take_expired("G", "T", 250, 10)] == [0]
    assert [h.offset for h in state.take_expired("G", "T", 250, 10)] == []  # consumed


def test_fifo_queue_is_locked_while_one_message_is_invisible(tmp_path: Path) -> None:
    state, _ = _state_with_log(tmp_path)
    qs = state.queue("G", "T", 0, lambda: 0)
    state.hand_out("G", "T", qs, 0, 0, 1, 1_000)
    state.hand_out("G", "T", qs, 0, 1, 1, 3_000)
    assert qs.locked(500) and qs.locked(2_000) and not qs.locked(3_000)


def test_log_cuts_a_torn_tail_and_compacts_to_the_state(tmp_path: Path) -> None:
    state, log = _state_with_log(tmp_path)
    qs = state.queue("G", "T", 1, lambda: 0)
    for offset in range(50):
        state.hand_out("G", "T", qs, 1, offset, 1, 10_000)
    for offset in range(49):
        state.remove("G", "T", 1, offset)
    log.flush()
    before = log.size
    log.compact(state.snapshot())
    assert log.size < before and log.compactions == 1
    log.close()
    with open(tmp_path / "inflight.log", "ab") as f:
        f.write(b"A\tG\tT\t1\t4")  # torn: no newline
    replayed = _replayed(tmp_path)
    assert list(replayed.groups[("G", "T")].queues[1].inflight) == [49]


def test_log_lines_round_trip_and_garbage_is_not_a_change() -> None:
    state = PopState()
    qs = state.queue("G", "T", 3, lambda: 0)
    entry = state.hand_out("G", "T", qs, 3, 9, 2, 77, 99, "client@1")
    line = encode_change(Change("S", "G", "T", 3, 9, entry))
    assert decode_line(line[:-1]) == Change("S", "G", "T", 3, 9, entry)
    assert decode_line("S\tG\tT\tx\t1") is None and decode_line("Z\tG") is None


def test_receipt_handles_are_checked_where_they_are_parsed() -> None:
    assert parse_handle(make_handle(2, 40, 7)) == (2, 40, 7)
    for bad in ("", "1.2", "1.2.x", "-1.2.3", "1.2.3.4", "9" * 70, "1.99999999999999999999.1"):
        try:
            parse_handle(bad)
        except PopRefused:
            continue
        raise AssertionError(f"{bad!r} accepted")
