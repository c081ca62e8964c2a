"""ProcessQueue: the committable offset never passes an unfinished message; flow control; the
orderly take / commit / put back cycle."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.client.consumer.process_queue import FlowControl, ProcessQueue
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt

MQ = MessageQueue("T", "broker-a", 0)


def msgs(offsets: range | list[int], size: int = 10) -> list[MessageExt]:
    return [MessageExt("T", b"x" * size, queue_offset=o) for o in offsets]


def test_commit_offset_is_the_lowest_unfinished_message() -> None:
    pq = ProcessQueue(MQ)
    batch = msgs(range(100, 110))
    assert pq.put(batch) == batch
    assert pq.msg_count == 10 and pq.msg_size == 100
    assert pq.remove([batch[3], batch[5]]) == 100  # 100 still being consumed
    assert pq.remove([batch[0]]) == 101
    assert pq.remove(batch[1:3]) == 104  # 103 and 105 gone, 104 is the lowest left
    assert pq.lowest_unfinished() == 104
    assert pq.remove(batch) == 110  # everything done: one past the highest cached
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove(batch) == -1  # nothing was cached: nothing to say


@settings(deadline=None)  # timing varies on a busy machine; the property does not
@given(st.integers(1, 200), st.randoms(use_true_random=False))
def test_commit_offset_never_passes_unfinished_and_never_goes_back(count: int, rng: random.Random) -> None:
    pq = ProcessQueue(MQ)
    batch = msgs(range(count))
    pq.put(batch)
    order = list(batch)
    rng.shuffle(order)
    last, done = -1, set()
    for msg in order:
        offset = pq.remove([msg])
        done.add(msg.queue_offset)
        unfinished = [o for o in range(count) if o not in done]
        assert offset == (min(unfinished) if unfinished else count)
        assert offset >= last
        last = offset


def test_messages_already_cached_are_not_cached_again() -> None:
    pq = ProcessQueue(MQ)
    pq.put(msgs(range(5)))
    assert [m.queue_offset for m in pq.put(msgs(range(3, 8)))] == [5, 6, 7]
    assert pq.msg_count == 8 and pq.queue_offset_max == 7


def test_flow_control_by_count_size_and_span() -> None:
    pq = ProcessQueue(MQ)
    pq.put(msgs(range(0, 10), size=100))
    assert pq.flow_control(count_max=10, size_max=1000, span_max=9) is None
    assert pq.flow_control(count_max=9, size_max=10_000, span_max=100) is FlowControl.COUNT
    assert pq.flow_control(count_max=100, size_max=999, span_max=100) is FlowControl.SIZE
    assert pq.flow_control(count_max=100, size_max=10_000, span_max=8) is FlowControl.SPAN
    assert pq.flow_control(count_max=100, size_max=10_000, span_max=None) is None  # orderly


def test_one_stuck_message_stops_pulling_through_the_span() -> None:
    pq = ProcessQueue(MQ)
    first = msgs([0])
    pq.put(first)
    rest = msgs(range(1, 2002))
    pq.put(rest)
    pq.remove(rest)  # all done but offset 0
    assert pq.msg_count == 1
    assert pq.max_span() == 0  # one message left: no span
    pq.put(msgs([2500]))
    assert pq.max_span() == 2500
    assert pq.flow_control(1000, 100 << 20, 2000) is FlowControl.SPAN
    assert pq.remove(first) == 2500


def test_orderly_take_commit_and_put_back_keep_offset_order() -> None:
    pq = ProcessQueue(MQ)
    pq.put(msgs(range(10, 20)))
    taken = pq.take(3)
    assert [m.queue_offset for m in taken] == [10, 11, 12]
    assert pq.commit_offset() == 10 and pq.lowest_unfinished() == 10
    back = pq.put_back()  # SUSPEND: the same messages come first again
    assert back == taken
    assert [m.queue_offset for m in pq.take(4)] == [10, 11, 12, 13]
    assert pq.commit() == 14
    assert pq.msg_count == 6
    assert pq.commit() == -1  # nothing taken
    assert [m.queue_offset for m in pq.take(100)] == list(range(14, 20))
    assert pq.commit() == 20 and pq.msg_count == 0 and pq.msg_size == 0


def test_lock_expiry_and_info() -> None:
    pq = ProcessQueue(MQ, locked=True, last_lock_time=100.0)
    assert not pq.lock_expired(129.0, 30.0)
    assert pq.lock_expired(130.5, 30.0)
    pq.put(msgs(range(3), size=2048))
    info = pq.info(committed=0, now=200.0, wall_offset=1_000_000.0)
    assert info["cachedMsgCount"] == 3 and info["cachedMsgMinOffset"] == 0
    assert info["cachedMsgMaxOffset"] == 2 and info["locked"] is True
    assert info["lastLockTimestamp"] == 1_000_100_000
    pq.clear()
    assert pq.msg_count == 0 and not pq.has_cached()
