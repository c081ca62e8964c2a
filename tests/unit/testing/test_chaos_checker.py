"""The chaos checker (orbitmq.testing.chaos.checker) on histories made by hand to show each anomaly
(a dropped ack, a duplicated read, a swapped order...), so that a clean verdict from a real run
means something; and a property: a history of a correct queue, however its sends ended, is
judged clean, and each damage done to it is counted exactly once."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orbitmq.testing.chaos.checker import (
    SYNC_MASTER,
    Outcome,
    Promise,
    Read,
    Send,
    check,
    parse_value,
    value_of,
)

A, F, U = Outcome.ACKED, Outcome.FAILED, Outcome.UNKNOWN
Q0, Q1 = "broker-a:0", "broker-a:1"


def acked(writer: str, counter: int, queue: str = Q0, key: str | None = None) -> Send:
    return Send(writer, counter, A, queue=queue, offset=None, key=key)


def drain(log: dict[str, list[str]], group: str = "drain") -> list[Read]:
    """Every position of ``log`` (queue -> values in offset order) read once by ``group``."""
    return [Read(group, q, i, v) for q, values in sorted(log.items()) for i, v in enumerate(values)]


def test_a_clean_history_is_ok() -> None:
    sends = [acked("w1", n) for n in range(3)]
    verdict = check(sends, drain({Q0: ["w1-0", "w1-1", "w1-2"]}), SYNC_MASTER,
                    drained_groups=["drain"])
    assert verdict.ok, verdict.text()
    assert verdict.counts()["acknowledged"] == 3 and verdict.counts()["lost"] == 0
    assert "verdict: OK" in verdict.text() and "SYNC_MASTER" in verdict.text()


def test_values_round_trip_with_dashes_in_the_writer() -> None:
    assert parse_value(value_of("sdk-w-3", 17)) == ("sdk-w-3", 17)
    assert parse_value("garbage") is None and parse_value("w-x") is None


def test_a_dropped_ack_is_lost_and_split_prefix_middle_postfix() -> None:
    sends = [acked("w1", n) for n in range(6)]
    # w1-0 (before the first read), w1-2 (between reads), w1-5 (after the last) never read
    reads = drain({Q0: ["w1-1", "w1-3", "w1-4"]})
    verdict = check(sends, reads, SYNC_MASTER)
    assert not verdict.ok
    assert verdict.lost == ["w1-0", "w1-2", "w1-5"]
    assert verdict.lost_prefix == ["w1-0"]
    assert verdict.lost_middle == ["w1-2"]
    assert verdict.lost_postfix == ["w1-5"]
    assert "3 acknowledged lost" in verdict.violations[0]


def test_lost_is_split_per_writer_and_queue() -> None:
    # w1-1 went to queue 1, where nothing of w1 was read: a tail there, not a hole in queue 0
    sends = [acked("w1", 0, Q0), acked("w1", 1, Q1), acked("w1", 2, Q0)]
    verdict = check(sends, drain({Q0: ["w1-0", "w1-2"]}), SYNC_MASTER)
    assert verdict.lost_postfix == ["w1-1"] and verdict.lost_middle == []


def test_an_async_promise_allows_its_bound() -> None:
    sends = [acked("w1", n) for n in range(4)]
    reads = drain({Q0: ["w1-0", "w1-1"]})
    assert check(sends, reads, Promise("ASYNC_MASTER", lost_acknowledged_max=2)).ok
    assert not check(sends, reads, Promise("ASYNC_MASTER", lost_acknowledged_max=1)).ok


def test_a_read_never_sent_is_unexpected() -> None:
    verdict = check([acked("w1", 0)], drain({Q0: ["w1-0", "w9-7", "junk"]}), SYNC_MASTER)
    assert verdict.unexpected == ["junk", "w9-7"]
    assert not verdict.ok


def test_a_duplicated_read_is_counted_not_a_violation_of_at_least_once() -> None:
    sends = [acked("w1", 0), acked("w1", 1)]
    reads = drain({Q0: ["w1-0", "w1-1"]}, "g") + [Read("g", Q0, 0, "w1-0")]
    verdict = check(sends, reads, SYNC_MASTER)
    assert verdict.redelivered == {f"g@{Q0}:0": 1}
    assert verdict.duplicated == 1 and verdict.ok
    strict = Promise("EXACTLY_ONCE", duplicates_allowed=False)
    assert not check(sends, reads, strict).ok


def test_one_read_per_group_is_not_a_duplicate() -> None:
    sends = [acked("w1", 0)]
    reads = drain({Q0: ["w1-0"]}, "g1") + drain({Q0: ["w1-0"]}, "g2")
    verdict = check(sends, reads, SYNC_MASTER, drained_groups=["g1", "g2"])
    assert verdict.duplicated == 0 and verdict.ok


def test_a_value_stored_at_two_offsets_is_stored_twice() -> None:
    verdict = check([acked("w1", 0)], drain({Q0: ["w1-0", "w1-0"]}), SYNC_MASTER)
    assert verdict.stored_twice == {"w1-0": [f"{Q0}:0", f"{Q0}:1"]}
    assert verdict.duplicated == 1


def test_an_unacknowledged_send_that_was_read_is_recovered() -> None:
    sends = [acked("w1", 0), Send("w1", 1, U), Send("w1", 2, F, detail="BrokerError(14: x)"),
             Send("w1", 3, U)]
    verdict = check(sends, drain({Q0: ["w1-0", "w1-1", "w1-2"]}), SYNC_MASTER)
    assert verdict.recovered == ["w1-1", "w1-2"]
    assert verdict.failed_read == ["w1-2"]
    assert dict(verdict.failed_read_details) == {"BrokerError(14: x)": 1}
    assert "failed-but-read answers" in verdict.text()
    assert verdict.ok  # an unanswered send may be stored; w1-3 never read is not lost either
    assert verdict.counts()["unknown"] == 2 and verdict.counts()["failed"] == 1


def test_two_values_at_one_offset_diverge() -> None:
    sends = [acked("w1", 0), Send("w1", 1, U), acked("w1", 2)]
    # the live group read w1-1 at offset 1 before a failover; the log now has w1-2 there
    reads = [Read("live", Q0, 0, "w1-0"), Read("live", Q0, 1, "w1-1")] + drain(
        {Q0: ["w1-0", "w1-2"]})
    verdict = check(sends, reads, SYNC_MASTER)
    assert verdict.divergent == {f"{Q0}:1": ["w1-1", "w1-2"]}
    assert not verdict.ok


def test_a_group_that_skipped_a_message_missed_it() -> None:
    sends = [acked("w1", n) for n in range(3)]
    reads = drain({Q0: ["w1-0", "w1-1", "w1-2"]}) + [Read("live", Q0, 0, "w1-0"),
                                                     Read("live", Q0, 2, "w1-2")]
    verdict = check(sends, reads, SYNC_MASTER, drained_groups=["drain", "live"])
    assert verdict.missed == {"live": ["w1-1"]}
    assert verdict.lost == [] and not verdict.ok
    # a group not declared drained is not held to it
    assert check(sends, reads, SYNC_MASTER, drained_groups=["drain"]).ok


def test_a_swapped_order_of_one_key_is_out_of_order() -> None:
    orderly = Promise("SYNC_MASTER", orderly=True)
    sends = [acked("w1", 0, key="k"), acked("w1", 1, key="k"), acked("w1", 2, key="j")]
    swapped = check(sends, drain({Q0: ["w1-1", "w1-0", "w1-2"]}), orderly)
    assert swapped.out_of_order == [f"k: w1-0@{Q0}:1 then w1-1@{Q0}:0"]
    assert not swapped.ok
    assert check(sends, drain({Q0: ["w1-0", "w1-1", "w1-2"]}), orderly).ok
    # one key in two queues is out of order too
    split = check(sends, drain({Q0: ["w1-0", "w1-2"], Q1: ["w1-1"]}), orderly)
    assert len(split.out_of_order) == 1
    # the order is not checked unless promised
    assert check(sends, drain({Q0: ["w1-1", "w1-0", "w1-2"]}), SYNC_MASTER).ok


def test_the_text_lists_examples_and_bounds_them() -> None:
    sends = [acked("w1", n) for n in range(50)]
    verdict = check(sends, [], SYNC_MASTER)
    text = verdict.text()
    assert "lost=50" in text and "(+30 more)" in text and "VIOLATED" in text


# -- a property over generated histories ----------------------------------------------------------
history = st.lists(
    st.tuples(st.integers(0, 3),  # writer
              st.sampled_from([A, A, A, F, U]),
              st.booleans(),  # an unacknowledged send was stored anyway
              st.integers(0, 2)),  # queue
    max_size=60)


@given(history, st.data())
def test_a_correct_queue_is_clean_and_each_damage_counted_once(
        ops: list[tuple[int, Outcome, bool, int]], data: st.DataObject) -> None:
    counters = [0, 0, 0, 0]
    sends: list[Send] = []
    log: dict[str, list[str]] = {f"b:{q}": [] for q in range(3)}
    for writer, outcome, stored, q in ops:
        queue = f"b:{q}"
        send = Send(f"w{writer}", counters[writer], outcome,
                    queue=queue if outcome is A else None)
        counters[writer] += 1
        sends.append(send)
        if outcome is A or (outcome is U and stored):
            log[queue].append(send.value)
    reads = drain(log)
    clean = check(sends, reads, SYNC_MASTER, drained_groups=["drain"])
    assert clean.ok, clean.text()
    assert clean.lost == [] and clean.unexpected == [] and clean.duplicated == 0
    assert len(clean.recovered) == sum(1 for s in sends if s.outcome is U and s.value in
                                       {r.value for r in reads})
    if not reads:
        return
    # drop one read: an acknowledged value becomes lost (exactly one), anything else vanishes
    dropped = data.draw(st.integers(0, len(reads) - 1))
    rest = reads[:dropped] + reads[dropped + 1:]
    damaged = check(sends, rest, SYNC_MASTER)
    was_acked = any(s.value == reads[dropped].value and s.outcome is A for s in sends)
    assert len(damaged.lost) == (1 if was_acked else 0)
    assert len(damaged.lost_prefix) + len(damaged.lost_middle) + len(damaged.lost_postfix) == len(
        damaged.lost)
    # read one twice: exactly one duplicate, still ok
    again = check(sends, [*reads, reads[dropped]], SYNC_MASTER)
    assert again.duplicated == 1 and again.ok
