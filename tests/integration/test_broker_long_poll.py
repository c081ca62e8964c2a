"""Long polling: a held pull wakes within 50 ms of a message arriving, answers empty after its
suspend timeout, keeps waiting for messages its tags exclude, and never busy-polls."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.errors import ConnectionClosedError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport import RemotingClient

# Far below the 60 s recheck period set below (so only the arrival's wake-up can answer in time),
# far above any scheduling delay of a loaded 2-core box (a latency figure is the bench's job).
WAKE_BOUND_S = 10.0


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    # A long recheck period, so that only the arrival notification can explain a fast wake-up.
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("long-poll"),
                                          long_polling_recheck_ms=60_000))
    yield harness
    harness.close()


def _held(h: BrokerHarness) -> int:
    return h.on_loop(lambda: h.broker.pull.long_poll.held_count)


def _wait_held(h: BrokerHarness, n: int, timeout: float = EVENT_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while _held(h) < n:
        assert time.monotonic() < deadline, "pull was not held"
        time.sleep(0.005)


async def _pull_and_time(h: BrokerHarness, client: RemotingClient, fields: dict[str, str]
                         ) -> tuple[RemotingCommand, float]:
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)
    resp = await client.invoke(h.addr, cmd, 30)
    return resp, time.monotonic()


def test_held_pull_wakes_on_a_message_not_on_a_recheck(h: BrokerHarness) -> None:
    h.send_ok("Wake", b"before")
    h.wait_dispatched()
    for round_ in range(3):
        offset = round_ + 1
        fut = h.loop.submit(_pull_and_time(h, h.client, h.pull_fields("Wake", 0, offset, suspend_ms=20_000)))
        _wait_held(h, 1)
        sent_at = time.monotonic()
        h.send_ok("Wake", f"after-{round_}".encode())
        resp, answered_at = fut.result(10)
        assert resp.code == ResponseCode.SUCCESS
        assert [m.body for m in iter_stored_messages(resp.body)] == [f"after-{round_}".encode()]
        assert answered_at - sent_at < WAKE_BOUND_S, f"woke after {answered_at - sent_at:.3f}s"
    assert _held(h) == 0


def test_held_pull_answers_not_found_after_its_suspend_timeout(h: BrokerHarness) -> None:
    h.send_ok("Timeout", b"x")
    h.wait_dispatched()
    started = time.monotonic()
    r, msgs = h.pull("Timeout", 0, 1, suspend_ms=300)
    elapsed = time.monotonic() - started
    assert r.code == ResponseCode.PULL_NOT_FOUND and msgs == []
    assert r.ext_fields["nextBeginOffset"] == "1"
    assert 0.29 <= elapsed < 2.0, elapsed
    assert _held(h) == 0


def test_held_pull_ignores_messages_its_tags_exclude(h: BrokerHarness) -> None:
    h.send_ok("TagWake", b"seed", tags="Other")
    h.wait_dispatched()
    fut = h.loop.submit(_pull_and_time(
        h, h.client, h.pull_fields("TagWake", 0, 1, suspend_ms=20_000, expression="Wanted")))
    _wait_held(h, 1)
    h.send_ok("TagWake", b"not-for-me", tags="Other")
    h.wait_dispatched()
    time.sleep(0.1)
    assert not fut.done() and _held(h) == 1
    sent_at = time.monotonic()
    h.send_ok("TagWake", b"mine", tags="Wanted")
    resp, answered_at = fut.result(10)
    assert resp.code == ResponseCode.SUCCESS
    assert [m.body for m in iter_stored_messages(resp.body)] == [b"mine"]
    assert answered_at - sent_at < WAKE_BOUND_S


def test_many_held_pulls_on_many_queues_each_wake_once(h: BrokerHarness) -> None:
    for q in range(4):
        h.send_ok("Fan", b"seed", queue_id=q)
    h.wait_dispatched()
    futs = [h.loop.submit(_pull_and_time(h, h.client, h.pull_fields("Fan", q, 1, suspend_ms=20_000)))
            for q in range(4)]
    _wait_held(h, 4)
    for q in (2, 0, 3, 1):
        h.send_ok("Fan", f"q{q}".encode(), queue_id=q)
    for q, fut in enumerate(futs):
        resp, _ = fut.result(10)
        assert [m.body for m in iter_stored_messages(resp.body)] == [f"q{q}".encode()]


def test_closed_connection_drops_its_held_pulls(h: BrokerHarness) -> None:
    h.send_ok("Dropped", b"seed")
    h.wait_dispatched()
    other = RemotingClient()
    fut = h.loop.submit(_pull_and_time(h, other, h.pull_fields("Dropped", 0, 1, suspend_ms=20_000)))
    _wait_held(h, 1)
    h.call(other.close())
    with pytest.raises(ConnectionClosedError):  # the caller sees its own connection close
        fut.result(10)
    deadline = time.monotonic() + EVENT_WAIT_S
    while _held(h):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    h.send_ok("Dropped", b"after")  # nobody to answer: nothing breaks
    assert h.pull_all("Dropped", 0)[-1].body == b"after"


def test_without_suspend_flag_an_empty_pull_answers_at_once(h: BrokerHarness) -> None:
    started = time.monotonic()
    r, _ = h.pull("Immediate", 0, 0)
    assert r.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.TOPIC_NOT_EXIST)
    assert time.monotonic() - started < 1.0


def test_recheck_is_a_safety_net_not_the_wake_path(tmp_path_factory: pytest.TempPathFactory) -> None:
    """With arrival notifications gone, the periodic recheck still wakes a held pull."""
    h2 = BrokerHarness(broker_config(tmp_path_factory.mktemp("recheck"), long_polling_recheck_ms=100))
    try:
        h2.send_ok("Recheck", b"seed")
        h2.wait_dispatched()
        h2.broker.store.dispatcher.listeners.clear()  # simulate a lost notification
        fut = h2.loop.submit(_pull_and_time(h2, h2.client, h2.pull_fields("Recheck", 0, 1, suspend_ms=20_000)))
        _wait_held(h2, 1)
        h2.send_ok("Recheck", b"late")
        resp, _ = fut.result(5)
        assert [m.body for m in iter_stored_messages(resp.body)] == [b"late"]
    finally:
        h2.close()


def test_pull_commit_offset_flag_commits(h: BrokerHarness) -> None:
    h.send_ok("CommitOnPull", b"x")
    h.wait_dispatched()
    r, _ = h.pull("CommitOnPull", 0, 1, group="committer", commit_offset=1, suspend_ms=50)
    assert r.code == ResponseCode.PULL_NOT_FOUND
    q = h.invoke(RequestCode.QUERY_CONSUMER_OFFSET,
                 {"consumerGroup": "committer", "topic": "CommitOnPull", "queueId": "0"})
    assert (q.code, q.ext_fields["offset"]) == (ResponseCode.SUCCESS, "1")
