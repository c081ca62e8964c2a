"""Orderly consumption's queue locks on a real broker: LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42).

Expiry is checked twice: with a short real TTL (the lock frees itself in time), and with the lock
table's injected clock (renewal keeps a lock past its first expiry, deterministically).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    UnlockBatchRequestBody,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.transport import RemotingClient

GROUP = "orderly-group"
TTL_MS = 400


def queues(*ids: int, topic: str = "OrderTopic") -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", i) for i in ids]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path, rebalance_lock_max_live_time_ms=TTL_MS))
    try:
        yield h
    finally:
        h.close()


def lock(h: BrokerHarness, client_id: str, mqs: list[MessageQueue], group: str = GROUP,
         client: RemotingClient | None = None) -> list[MessageQueue]:
    body = LockBatchRequestBody(group, client_id, mqs).to_json()
    r = h.invoke(RequestCode.LOCK_BATCH_MQ, body=body, client=client)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return sorted(LockBatchResponseBody.from_json(r.body).lock_ok_mq_set)


def unlock(h: BrokerHarness, client_id: str, mqs: list[MessageQueue], group: str = GROUP) -> None:
    body = UnlockBatchRequestBody(group, client_id, mqs).to_json()
    r = h.invoke(RequestCode.UNLOCK_BATCH_MQ, body=body)
    assert r.code == ResponseCode.SUCCESS, r.remark


def test_lock_answers_only_the_queues_this_client_holds(harness: BrokerHarness) -> None:
    h = harness
    assert lock(h, "client-a", queues(0, 1)) == queues(0, 1)
    assert lock(h, "client-b", queues(0, 1, 2, 3)) == queues(2, 3)
    assert lock(h, "client-a", queues(0, 1, 2)) == queues(0, 1)  # renewal; 2 is b's
    # Locks are per group: another group's members do not see these.
    assert lock(h, "client-c", queues(0, 1, 2, 3), group="other-group") == queues(0, 1, 2, 3)


def test_unlock_releases_only_the_owners_queues(harness: BrokerHarness) -> None:
    h = harness
    assert lock(h, "client-a", queues(0, 1)) == queues(0, 1)
    unlock(h, "client-b", queues(0, 1))  # not b's: nothing happens
    assert lock(h, "client-b", queues(0, 1)) == []
    unlock(h, "client-a", queues(0))
    assert lock(h, "client-b", queues(0, 1)) == queues(0)


def test_a_lock_expires_after_its_live_time(harness: BrokerHarness) -> None:
    h = harness
    locked_at = time.monotonic()
    assert lock(h, "client-a", queues(0)) == queues(0)
    assert lock(h, "client-b", queues(0)) == []
    deadline = locked_at + 10
    while not lock(h, "client-b", queues(0)):
        assert time.monotonic() < deadline, "the lock never expired"
        time.sleep(0.05)
    assert time.monotonic() - locked_at >= TTL_MS / 1000
    assert lock(h, "client-a", queues(0)) == []  # b owns it now


def test_renewal_keeps_a_lock_past_its_first_expiry(harness: BrokerHarness) -> None:
    h = harness
    now = [1_000_000]
    h.on_loop(lambda: setattr(h.broker.locks, "_clock_ms", lambda: now[0]))
    assert lock(h, "client-a", queues(0, 1)) == queues(0, 1)
    now[0] += TTL_MS - 1
    assert lock(h, "client-a", queues(0)) == queues(0)  # renews queue 0 only
    now[0] += 2
    assert lock(h, "client-b", queues(0, 1)) == queues(1)  # 1 expired, 0 was renewed
    now[0] += TTL_MS + 1
    assert lock(h, "client-b", queues(0)) == queues(0)


def test_locks_of_a_client_whose_connection_closed_are_released(harness: BrokerHarness) -> None:
    h = harness
    gone = RemotingClient()
    heartbeat = HeartbeatData("client-gone", [], [ConsumerData(GROUP)]).to_json()
    r = h.invoke(RequestCode.HEART_BEAT, body=heartbeat, client=gone)
    assert r.code == ResponseCode.SUCCESS
    assert lock(h, "client-gone", queues(0, 1), client=gone) == queues(0, 1)
    # A client that never sent a heartbeat (no membership) keeps its lock until it expires.
    assert lock(h, "client-quiet", queues(2)) == queues(2)
    assert lock(h, "client-b", queues(0, 1, 2)) == []
    h.call(gone.close())
    deadline = time.monotonic() + 10
    while h.on_loop(lambda: h.broker.clients.consumer_ids(GROUP)):
        assert time.monotonic() < deadline, "the broker never saw the connection close"
        time.sleep(0.02)
    assert lock(h, "client-b", queues(0, 1, 2)) == queues(0, 1)


def test_bad_lock_requests_are_refused(harness: BrokerHarness) -> None:
    h = harness
    for code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        assert h.invoke(code).code == ResponseCode.SYSTEM_ERROR
        body = LockBatchRequestBody(GROUP, "", queues(0)).to_json()
        r = h.invoke(code, body=body)
        assert r.code == ResponseCode.SYSTEM_ERROR and "clientId" in (r.remark or "")


def test_broadcasting_members_all_get_the_queues(harness: BrokerHarness) -> None:
    """Each broadcasting member reads every queue itself: locks exclude nobody."""
    h = harness
    data = ConsumerData("broadcast-group", message_model=MessageModel.BROADCASTING)
    r = h.invoke(RequestCode.HEART_BEAT, body=HeartbeatData("member-1", [], [data]).to_json())
    assert r.code == ResponseCode.SUCCESS
    assert lock(h, "member-1", queues(0, 1), group="broadcast-group") == queues(0, 1)
    assert lock(h, "member-2", queues(0, 1), group="broadcast-group") == queues(0, 1)


def test_locks_of_a_client_that_unregisters_are_released(harness: BrokerHarness) -> None:
    """UNREGISTER_CLIENT takes a consumer out of its group; its locks go with it (the C++ client
    does not unlock its queues when it shuts down)."""
    h = harness
    leaving = RemotingClient()
    try:
        heartbeat = HeartbeatData("client-leaving", [], [ConsumerData(GROUP)]).to_json()
        assert h.invoke(RequestCode.HEART_BEAT, body=heartbeat, client=leaving).code == 0
        assert lock(h, "client-leaving", queues(0), client=leaving) == queues(0)
        r = h.invoke(RequestCode.UNREGISTER_CLIENT,
                     {"clientID": "client-leaving", "consumerGroup": GROUP, "producerGroup": ""},
                     client=leaving)
        assert r.code == ResponseCode.SUCCESS
        assert lock(h, "client-b", queues(0)) == queues(0)
    finally:
        h.call(leaving.close())
