"""The lease checker (orbitmq.testing.chaos.lease_checker) on POP histories made by hand to show
each anomaly (a dropped ack, a duplicated read, overlapping leases, two OK acks), so that a clean
verdict from a real run means something; and a property: a correct POP history, however its
leases ran out, is judged clean, and each damage done to it is counted exactly once."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from orbitmq.testing.chaos.checker import SYNC_FLUSH, Outcome, Promise, Send
from orbitmq.testing.chaos.lease_checker import (
    AckAttempt,
    AckOutcome,
    Delivery,
    Disruption,
    check_leases,
)

G = "pop"
LEASE_S = 3.0
OK, REFUSED, UNKNOWN = AckOutcome.OK, AckOutcome.REFUSED, AckOutcome.UNKNOWN


def sends(n: int) -> list[Send]:
    return [Send("w1", i, Outcome.ACKED) for i in range(n)]


def deliver(value: str, at: float, handle: str = "", attempt: int = 1) -> Delivery:
    """Received by a receive sent 0.1 s before its answer at ``at``."""
    return Delivery(G, value, handle or f"{value}#{attempt}", at - 0.1, at, LEASE_S, attempt)


def ack(d: Delivery, at: float, outcome: AckOutcome = OK) -> AckAttempt:
    return AckAttempt(G, d.value, d.handle, at - 0.05, at, outcome)


def clean(n: int) -> tuple[list[Delivery], list[AckAttempt]]:
    ds = [deliver(f"w1-{i}", 1.0 + i) for i in range(n)]
    return ds, [ack(d, d.at_s + 0.2) for d in ds]


def test_a_clean_pop_history_is_ok() -> None:
    ds, acks = clean(3)
    verdict = check_leases(sends(3), ds, acks, SYNC_FLUSH)
    assert verdict.ok, verdict.text()
    assert verdict.counts()["acks_ok"] == 3 and verdict.counts()["lost"] == 0
    assert "verdict: OK" in verdict.text() and "at-least-once" in verdict.text()


def test_a_lease_that_ran_out_is_delivered_again_and_that_is_not_an_anomaly() -> None:
    first = deliver("w1-0", 1.0)
    second = deliver("w1-0", 1.0 + LEASE_S + 0.5, attempt=2)
    late = AckAttempt(G, "w1-0", first.handle, second.at_s + 0.1, second.at_s + 0.2, REFUSED)
    verdict = check_leases(sends(1), [first, second], [late, ack(second, second.at_s + 0.3)],
                           SYNC_FLUSH)
    assert verdict.ok, verdict.text()
    assert verdict.redelivered == 1 and verdict.acks_refused == 1


def test_a_dropped_ack_is_lost_and_a_never_delivered_value_too() -> None:
    ds, acks = clean(3)
    verdict = check_leases(sends(4), ds, acks[1:], SYNC_FLUSH)
    assert verdict.lost == ["pop/w1-0", "pop/w1-3"]
    assert verdict.lost_unacked == ["pop/w1-0"] and verdict.lost_never_delivered == ["pop/w1-3"]
    assert not verdict.ok and "2 acknowledged never acked" in verdict.violations[0]
    # an ack with no answer may have been applied: counted apart, not lost
    unknown = check_leases(sends(3), ds, [ack(ds[0], 1.2, UNKNOWN), *acks[1:]], SYNC_FLUSH)
    assert unknown.lost == [] and unknown.ack_unknown == ["pop/w1-0"] and unknown.ok
    # a run whose readers did not get to the end is not judged for lost
    assert check_leases(sends(4), ds, acks[1:], SYNC_FLUSH, drained=False).ok
    # an unacknowledged send never acked is not lost
    assert check_leases([*sends(3), Send("w1", 3, Outcome.UNKNOWN)], ds, acks, SYNC_FLUSH).ok
    # a value gone from the final log (a power cut took the log's tail) is the total-queue
    # checker's to judge: only what the drain found can be lost to the POP group
    in_log = check_leases(sends(4), ds, acks[1:], SYNC_FLUSH, in_log={"w1-0", "w1-1", "w1-2"})
    assert in_log.lost == ["pop/w1-0"] and in_log.lost_never_delivered == []


def test_a_duplicated_read_after_an_ok_ack_is_redelivered_after_ack() -> None:
    ds, acks = clean(2)
    again = deliver("w1-1", 9.0, attempt=2)
    verdict = check_leases(sends(2), [*ds, again], [*acks, ack(again, 9.1, REFUSED)], SYNC_FLUSH)
    assert len(verdict.redelivered_after_ack) == 1 and "w1-1" in verdict.redelivered_after_ack[0]
    assert verdict.overlapping_leases == [] and verdict.redelivered == 0
    assert not verdict.ok and "after an OK ack" in verdict.violations[0]


def test_a_receive_sent_while_the_ack_was_in_flight_is_not_redelivered_after_ack() -> None:
    d = deliver("w1-0", 1.0)
    slow_ack = AckAttempt(G, "w1-0", d.handle, 1.2, 6.0, OK)  # answered 4.8 s later
    # the lease ran out at 3.9 s, before the broker saw the ack: a delivery again is allowed
    again = Delivery(G, "w1-0", "h2", 5.0, 5.5, LEASE_S, 2)
    verdict = check_leases(sends(1), [d, again], [slow_ack], SYNC_FLUSH)
    assert verdict.ok, verdict.text()
    assert verdict.redelivered == 1


def test_two_deliveries_under_overlapping_leases() -> None:
    d = deliver("w1-0", 1.0)
    other = Delivery(G, "w1-0", "h2", 2.0, 2.1, LEASE_S, 1, consumer="c2")  # lease until 3.9 s
    verdict = check_leases(sends(1), [d, other], [ack(other, 2.5)], SYNC_FLUSH)
    assert len(verdict.overlapping_leases) == 1 and "until 3.900 s" in verdict.overlapping_leases[0]
    assert not verdict.ok and "unexpired lease" in verdict.violations[0]
    # the first lease acked before the second delivery: no overlap (the value came again, but
    # its receive was sent before the ack was answered)
    acked_first = [AckAttempt(G, "w1-0", d.handle, 1.5, 2.5, OK)]
    assert check_leases(sends(1), [d, other], acked_first, SYNC_FLUSH).overlapping_leases == []
    # a delivery just at the lease's end is no overlap
    at_end = Delivery(G, "w1-0", "h3", 3.8, d.lease_end_s, LEASE_S, 2)
    assert check_leases(sends(1), [d, at_end], [ack(at_end, 4.0)], SYNC_FLUSH).ok


def test_two_ok_acks_of_one_value_are_acked_twice() -> None:
    d = deliver("w1-0", 1.0)
    other = deliver("w1-0", 1.5, handle="h2")
    verdict = check_leases(sends(1), [d, other], [ack(d, 1.2), ack(other, 1.7)], SYNC_FLUSH)
    assert len(verdict.acked_twice) == 1 and len(verdict.overlapping_leases) == 0
    # (the second delivery's receive was sent at 1.4 s, the first ack answered at 1.2 s)
    assert len(verdict.redelivered_after_ack) == 1
    assert not verdict.ok
    # one ack in two groups is not twice
    g2 = [Delivery("g2", "w1-0", "x", 0.9, 1.0, LEASE_S)]
    g2_ack = [AckAttempt("g2", "w1-0", "x", 1.1, 1.2, OK)]
    assert check_leases(sends(1), [d, *g2], [ack(d, 1.2), *g2_ack], SYNC_FLUSH).ok


def test_a_fault_that_forgets_state_excuses_what_it_explains_and_only_that() -> None:
    ds, acks = clean(1)
    again = deliver("w1-0", 9.0, attempt=1)
    history = (sends(1), [*ds, again], [*acks, ack(again, 9.2)])
    failover = Disruption(4.0, 7.0, "failover at 4.00 s")
    verdict = check_leases(*history, SYNC_FLUSH, disruptions=[failover])
    assert verdict.ok, verdict.text()
    assert len(verdict.excused) == 2 and "failover at 4.00 s" in verdict.excused[0]
    # a kill that forgets no ack (SYNC_FLUSH) excuses nothing
    kill = Disruption(4.0, 7.0, "kill -9", leases=False, acks=False)
    assert not check_leases(*history, SYNC_FLUSH, disruptions=[kill]).ok
    # a fault outside the two events excuses nothing
    late = Disruption(10.0, 12.0, "later")
    assert not check_leases(*history, SYNC_FLUSH, disruptions=[late]).ok


def test_a_value_never_sent_is_unexpected() -> None:
    ds, acks = clean(1)
    stray = deliver("w9-9", 2.0)
    verdict = check_leases(sends(1), [*ds, stray], [*acks, ack(stray, 2.1)], SYNC_FLUSH)
    assert verdict.unexpected == ["w9-9"] and not verdict.ok


def test_an_async_promise_allows_its_bound_of_lost() -> None:
    ds, acks = clean(3)
    assert check_leases(sends(3), ds, acks[1:], Promise("ASYNC_FLUSH", lost_acknowledged_max=1)).ok


def test_the_text_bounds_its_examples() -> None:
    assert check_leases(sends(50), [], [], SYNC_FLUSH).lost == []  # no group named, none seen
    verdict = check_leases(sends(50), [], [], SYNC_FLUSH, groups=[G])
    text = verdict.text()
    assert "lost=50" in text and "(+30 more)" in text and "VIOLATED" in text


# -- a property over generated histories ----------------------------------------------------------
# Per value: the leases a consumer let run out (0..2) before it acked, and whether that ack's
# answer was lost (UNKNOWN) and the value came back once more to be acked again.
value_plan = st.tuples(st.integers(0, 2), st.booleans())


@given(st.lists(value_plan, min_size=1, max_size=25), st.data())
def test_a_correct_pop_history_is_clean_and_each_damage_counted_once(
        plans: list[tuple[int, bool]], data: st.DataObject) -> None:
    deliveries: list[Delivery] = []
    acks: list[AckAttempt] = []
    oks: list[AckAttempt] = []
    t = 1.0
    for i, (expired, answer_lost) in enumerate(plans):
        value = f"w1-{i}"
        attempt = 1
        for _ in range(expired):  # leased, never acked: comes again after the lease
            deliveries.append(Delivery(G, value, f"{value}#{attempt}", t, t + 0.1, LEASE_S,
                                       attempt))
            t += LEASE_S + 0.2
            attempt += 1
        d = Delivery(G, value, f"{value}#{attempt}", t, t + 0.1, LEASE_S, attempt)
        deliveries.append(d)
        if answer_lost:  # the ack had no answer and did not apply: the lease runs out
            acks.append(AckAttempt(G, value, d.handle, t + 0.2, t + 0.3, UNKNOWN))
            t += LEASE_S + 0.2
            attempt += 1
            d = Delivery(G, value, f"{value}#{attempt}", t, t + 0.1, LEASE_S, attempt)
            deliveries.append(d)
        good = AckAttempt(G, value, d.handle, t + 0.2, t + 0.3, OK)
        acks.append(good)
        oks.append(good)
        t += 0.5
    all_sends = sends(len(plans))
    verdict = check_leases(all_sends, deliveries, acks, SYNC_FLUSH)
    assert verdict.ok, verdict.text()
    assert verdict.redelivered == len(deliveries) - len(plans)
    assert verdict.counts()["acks_ok"] == len(plans)

    # drop one OK ack: exactly one lost (or, where an unanswered ack came first, one ack_unknown)
    dropped = data.draw(st.sampled_from(oks))
    without = check_leases(all_sends, deliveries, [a for a in acks if a is not dropped],
                           SYNC_FLUSH)
    assert len(without.lost) + len(without.ack_unknown) == 1
    assert without.acked_twice == without.redelivered_after_ack == without.overlapping_leases == []

    # the acked value handed out again after its ack: exactly one redelivered after ack
    later = Delivery(G, dropped.value, "again", t + 1.0, t + 1.1, LEASE_S, 9)
    again = check_leases(all_sends, [*deliveries, later], acks, SYNC_FLUSH)
    assert len(again.redelivered_after_ack) == 1 and len(again.overlapping_leases) == 0
    assert again.redelivered == verdict.redelivered and len(again.violations) == 1

    # a second consumer handed it inside the acked lease, before the ack was sent: one overlap
    last = next(d for d in reversed(deliveries) if d.handle == dropped.handle)
    inside = Delivery(G, dropped.value, "inside", last.at_s, last.at_s + 0.05, LEASE_S, 1, "c2")
    overlap = check_leases(all_sends, [*deliveries, inside], acks, SYNC_FLUSH)
    assert len(overlap.overlapping_leases) == 1 and overlap.redelivered_after_ack == []
    assert overlap.acked_twice == [] and len(overlap.violations) == 1

    # an OK ack sent twice for one handle: acked twice, once
    twice = check_leases(all_sends, deliveries, [*acks, dataclass_later(dropped)], SYNC_FLUSH)
    assert len(twice.acked_twice) == 1 and len(twice.violations) == 1


def dataclass_later(a: AckAttempt) -> AckAttempt:
    """The same ack sent again 0.1 s after the first was answered, and answered OK again."""
    return AckAttempt(a.group, a.value, a.handle, a.at_s + 0.1, a.at_s + 0.2, OK)


# -- the harness's side: which faults excuse, which deliveries the reader leaves to run out -------


def test_only_faults_that_may_forget_pop_state_become_disruptions() -> None:
    from types import SimpleNamespace

    from orbitmq.testing.chaos.clusters import StandaloneCluster
    from orbitmq.testing.chaos.harness import ClusterReport, lease_disruptions
    from orbitmq.testing.chaos.schedule import Fault, FaultKind
    from orbitmq.testing.chaos.timeline import FaultSpan

    schedule = [Fault(1.0, FaultKind.KILL, "standalone", 1.0),
                Fault(5.0, FaultKind.PAUSE, "standalone", 1.0),
                Fault(9.0, FaultKind.ISOLATE, "master", 1.0)]
    report = ClusterReport("standalone", 1, schedule, spans=[
        FaultSpan(1.0, 2.0, 2.5, "kill"), FaultSpan(5.0, 6.0, None, "pause"),
        FaultSpan(9.0, 10.0, 12.0, "isolate")])
    standalone = SimpleNamespace(pop_state_kept=StandaloneCluster.pop_state_kept)
    assert lease_disruptions(standalone, report) == [  # type: ignore[arg-type]
        Disruption(9.0, 12.0, "isolate")]
    failover = SimpleNamespace(pop_state_kept=frozenset())
    assert [d.what for d in lease_disruptions(failover, report)] == [  # type: ignore[arg-type]
        "kill", "pause", "isolate"]


def test_the_reader_leaves_the_first_lease_of_every_nth_value_to_run_out() -> None:
    from orbitmq.testing.chaos.rmq5_reader import skipped

    assert skipped("w1-24", 1, 25) and not skipped("w1-24", 2, 25)
    assert not skipped("w1-23", 1, 25) and not skipped("w1-24", 1, 0)
    assert not skipped("junk", 1, 25)


def test_a_value_stored_twice_is_two_messages_each_acked_once() -> None:
    from orbitmq.testing.chaos.pop_reader import handle_position

    assert handle_position("2.17.5") == "2.17" and handle_position("opaque") == ""
    copies = [Delivery(G, "w1-0", f"{q}.0.1", 0.9, 1.0, LEASE_S, position=f"{q}.0")
              for q in (0, 1)]
    acks = [AckAttempt(G, "w1-0", d.handle, 1.1, 1.2, OK, position=d.position) for d in copies]
    verdict = check_leases(sends(1), copies, acks, SYNC_FLUSH)
    assert verdict.ok, verdict.text()
    assert verdict.acked_twice == [] and verdict.overlapping_leases == []
    # one position acked twice is still twice, and says where
    again = AckAttempt(G, "w1-0", "0.0.1", 1.3, 1.4, OK, position="0.0")
    twice = check_leases(sends(1), copies, [*acks, again], SYNC_FLUSH)
    assert len(twice.acked_twice) == 1 and "w1-0@0.0" in twice.acked_twice[0]


def test_the_readers_lines_become_the_history_on_the_runs_clock(tmp_path: Path) -> None:
    from orbitmq.testing.chaos.pop_reader import PopReader
    from orbitmq.testing.chaos.workload import History

    history = History()
    reader = PopReader(tmp_path / "python", "127.0.0.1:1", "T", history, tmp_path)
    t0 = history.started
    reader._take({"k": "d", "v": "w1-0", "h": "1.7.3", "a": 2, "t0": t0 + 1.0, "t": t0 + 1.25,
                  "inv": 3})
    reader._take({"k": "a", "v": "w1-0", "h": "1.7.3", "t0": t0 + 1.5, "t": t0 + 1.75, "o": "ok"})
    reader._take({"k": "a", "v": "w1-1", "h": "0.1.1", "t0": t0 + 2.0, "t": t0 + 5.0,
                  "o": "unknown", "m": "AioRpcError: UNAVAILABLE"})
    reader._take({"k": "e", "t": t0 + 6.0, "e": "AioRpcError", "m": "down"})
    assert reader.deliveries == [Delivery("chaos-pop", "w1-0", "1.7.3", 1.0, 1.25, 3.0, 2,
                                          position="1.7")]
    assert reader.acks[0] == AckAttempt("chaos-pop", "w1-0", "1.7.3", 1.5, 1.75, OK,
                                        position="1.7")
    assert reader.acks[1].outcome is UNKNOWN and reader.receive_errors == {"AioRpcError": 1}
    assert reader.acked() == {"w1-0", "w1-1"}  # an ack with no answer may have been applied
