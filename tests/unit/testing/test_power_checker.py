"""The power-loss side of the chaos checker: an ASYNC_FLUSH promise (Promise.log_tail_loss)
holds what a cut took from the log to the bound the harness computed, and counts what follows
from a lost tail (reads of messages then gone, their offsets written again) without calling it
a violation, while two values at an offset that are both still in the log stay one; and the
bound itself (orbitmq.testing.chaos.power.async_loss_bound)."""

from __future__ import annotations

from orbitmq.testing.chaos.checker import Outcome, Promise, Read, Send, check
from orbitmq.testing.chaos.power import Cut, async_loss_bound

Q = "broker-a:0"


def _sends(n: int, at_s: float = 0.0) -> list[Send]:
    return [Send("w1", i, Outcome.ACKED, queue=Q, at_s=at_s + i) for i in range(n)]


def _history() -> tuple[list[Send], list[Read]]:
    """w1-0..4 acknowledged; the live group read all five; a cut took w1-3 and w1-4 from the
    log; w1-5 and w1-6, sent after the restart, took offsets 3 and 4; the drain read the log."""
    sends = _sends(7)
    live = [Read("live", Q, i, f"w1-{i}") for i in range(5)]
    drained = [Read("drain", Q, i, f"w1-{v}") for i, v in enumerate([0, 1, 2, 5, 6])]
    return sends, live + drained


def test_a_lost_tail_within_the_bound_is_ok_and_counted() -> None:
    sends, reads = _history()
    verdict = check(sends, reads, Promise("ASYNC_FLUSH", lost_acknowledged_max=2,
                                          log_tail_loss=True), drained_groups=["drain", "live"])
    assert verdict.ok, verdict.text()
    assert verdict.log_lost == ["w1-3", "w1-4"]
    assert set(verdict.divergent) == {f"{Q}:3", f"{Q}:4"} and not verdict.divergent_in_log
    assert "gone from the log" in verdict.text() and "2 of at most 2" in verdict.text()


def test_a_lost_tail_over_the_bound_is_a_violation() -> None:
    sends, reads = _history()
    verdict = check(sends, reads, Promise("ASYNC_FLUSH", lost_acknowledged_max=1,
                                          log_tail_loss=True), drained_groups=["drain", "live"])
    assert not verdict.ok
    assert verdict.violations == ["2 acknowledged gone from the log (at most 1 allowed)"]


def test_the_same_history_breaks_a_sync_flush_promise() -> None:
    sends, reads = _history()
    verdict = check(sends, reads, Promise("SYNC_FLUSH"), drained_groups=["drain", "live"])
    assert not verdict.ok
    assert any("skipped by drain" in v for v in verdict.violations)
    assert any("offsets with two values" in v for v in verdict.violations)


def test_two_values_at_an_offset_both_in_the_log_stay_a_violation() -> None:
    sends = _sends(3)
    reads = [Read("drain", Q, 0, "w1-0"), Read("drain", Q, 1, "w1-1"), Read("drain", Q, 2, "w1-2"),
             Read("live", Q, 1, "w1-2")]  # a reader saw w1-2 where the log holds w1-1
    verdict = check(sends, reads, Promise("ASYNC_FLUSH", lost_acknowledged_max=5,
                                          log_tail_loss=True), drained_groups=["drain"])
    assert not verdict.ok
    assert verdict.violations == ["1 offsets with two values still in the log"]


def test_the_bound_counts_the_acks_in_the_window_before_each_cut_and_up_to_the_kill() -> None:
    sends = _sends(20)  # acknowledged at 0, 1, ..., 19 s
    sends.append(Send("w1", 99, Outcome.UNKNOWN, at_s=5.5))  # not acknowledged: not counted
    cuts = [Cut(cut_at_s=5.2, killed_at_s=6.1, dropped={}), Cut(14.0, 14.0, {})]
    # window 1.5 s: (3.7, 6.1] holds 4, 5, 6; (12.5, 14.0] holds 13, 14
    assert async_loss_bound(sends, cuts, 1.5) == 5
    assert async_loss_bound(sends, [], 1.5) == 0
