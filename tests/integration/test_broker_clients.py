"""Heartbeats, consumer lists, NOTIFY_CONSUMER_IDS_CHANGED on membership changes, idle expiry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_support import DATA_DIR, BrokerHarness, RawConnection, broker_config

from orbitmq.protocol.bodies import ConsumerData, ConsumerListBody, HeartbeatData, ProducerData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.testing.waits import EVENT_WAIT_S
from orbitmq.transport import RemotingClient
from orbitmq.transport.connection import RemotingConnection


class Member:
    """A consumer client that records the NOTIFY_CONSUMER_IDS_CHANGED it receives."""

    def __init__(self, h: BrokerHarness, client_id: str, group: str) -> None:
        self.h, self.client_id, self.group = h, client_id, group
        self.client = RemotingClient()
        self.notified: list[str] = []
        self.client.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_notify)

    def _on_notify(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        self.notified.append(cmd.ext_fields.get("consumerGroup", ""))

    def heartbeat(self) -> RemotingCommand:
        body = HeartbeatData(self.client_id, consumer_data_set=[ConsumerData(self.group)]).to_json()
        return self.h.invoke(RequestCode.HEART_BEAT, body=body, client=self.client)

    def unregister(self) -> RemotingCommand:
        return self.h.invoke(RequestCode.UNREGISTER_CLIENT, {
            "clientID": self.client_id, "producerGroup": "", "consumerGroup": self.group,
        }, client=self.client)

    def close(self) -> None:
        self.h.call(self.client.close())


def _wait(pred, timeout: float = EVENT_WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def _consumer_ids(h: BrokerHarness, group: str) -> RemotingCommand:
    return h.invoke(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("clients")))
    yield harness
    harness.close()


def test_membership_changes_notify_the_other_members(h: BrokerHarness) -> None:
    a, b = Member(h, "1-127.0.0.1@A", "G1"), Member(h, "2-127.0.0.1@B", "G1")
    try:
        assert a.heartbeat().code == ResponseCode.SUCCESS  # a joins: every member (a) is told
        _wait(lambda: a.notified == ["G1"])
        r = _consumer_ids(h, "G1")
        assert ConsumerListBody.from_json(r.body).consumer_id_list == [a.client_id]
        assert b.heartbeat().code == ResponseCode.SUCCESS  # b joins: a and b are told
        _wait(lambda: len(a.notified) == 2 and len(b.notified) == 1)
        assert ConsumerListBody.from_json(_consumer_ids(h, "G1").body).consumer_id_list == sorted(
            [a.client_id, b.client_id])
        a.heartbeat()  # a plain heartbeat changes nothing and tells nobody
        b.heartbeat()
        time.sleep(0.05)
        assert (len(a.notified), len(b.notified)) == (2, 1)
        assert b.unregister().code == ResponseCode.SUCCESS  # b leaves: a is told, b not
        _wait(lambda: len(a.notified) == 3)
        assert ConsumerListBody.from_json(_consumer_ids(h, "G1").body).consumer_id_list == [a.client_id]
        b.heartbeat()
        _wait(lambda: len(a.notified) == 4)
        b.close()  # b's connection closes: a is told
        _wait(lambda: len(a.notified) == 5)
        assert ConsumerListBody.from_json(_consumer_ids(h, "G1").body).consumer_id_list == [a.client_id]
        assert set(a.notified) == {"G1"} and len(b.notified) == 2
    finally:
        a.close()
        b.close()
    _wait(lambda: _consumer_ids(h, "G1").code == ResponseCode.SYSTEM_ERROR)


def test_heartbeat_creates_the_retry_topic_and_group(h: BrokerHarness) -> None:
    m = Member(h, "3-127.0.0.1@C", "RetryGroup")
    try:
        m.heartbeat()
        tc = h.broker.topics.get("%RETRY%RetryGroup")
        assert tc is not None and tc.write_queue_nums == 1
        assert h.broker.sub_groups.table["RetryGroup"].retry_max_times == 16
    finally:
        m.close()


def test_producer_heartbeat_and_unregister(h: BrokerHarness) -> None:
    c = RemotingClient()
    try:
        body = HeartbeatData("4-127.0.0.1@P", producer_data_set=[ProducerData("PG")]).to_json()
        assert h.invoke(RequestCode.HEART_BEAT, body=body, client=c).code == ResponseCode.SUCCESS
        assert len(h.on_loop(lambda: h.broker.clients.producer_connections("PG"))) == 1
        h.invoke(RequestCode.UNREGISTER_CLIENT, {"clientID": "4-127.0.0.1@P", "producerGroup": "PG",
                                                 "consumerGroup": ""}, client=c)
        assert h.on_loop(lambda: h.broker.clients.producer_connections("PG")) == []
    finally:
        h.call(c.close())


def test_heartbeat_errors(h: BrokerHarness) -> None:
    assert h.invoke(RequestCode.HEART_BEAT).code == ResponseCode.SYSTEM_ERROR
    r = h.invoke(RequestCode.HEART_BEAT, body=b'{"clientID": 5, "consumerDataSet": "nope"}')
    assert r.code == ResponseCode.INVALID_PARAMETER and "consumerDataSet" in r.remark


def test_cpp_client_heartbeat_frames(h: BrokerHarness) -> None:
    """Heartbeats captured from the official C++ client (integer enums, no subscriptions for the
    pull consumer, codeSet [0] for tags) are accepted and register the groups."""
    sock = RawConnection(h.port)
    try:
        for name in ("heartbeat_producer", "heartbeat_consumer", "heartbeat_push_consumer"):
            sock.send((DATA_DIR / f"cpp_{name}.bin").read_bytes())
            r = sock.response()
            assert r is not None and r.code == ResponseCode.SUCCESS, (name, r)
        assert "GoldenPullGroup" in h.broker.clients.consumers
        push = h.broker.clients.consumers["GoldenPushGroup"]
        for sub in push.subscriptions.values():
            assert len(sub.code_set) == len(sub.tags_set)  # recomputed, not the client's [0]
        assert h.broker.topics.get("%RETRY%GoldenPushGroup") is not None
        sock.send((DATA_DIR / "cpp_get_consumer_list_by_group.bin").read_bytes())
        r = sock.response()
        assert r is not None and r.code == ResponseCode.SUCCESS
        assert len(ConsumerListBody.from_json(r.body).consumer_id_list) == 1
        sock.send((DATA_DIR / "cpp_unregister_consumer.bin").read_bytes())
        r = sock.response()
        assert r is not None and r.code == ResponseCode.SUCCESS
        assert {c.code for c in sock.requests} == {RequestCode.NOTIFY_CONSUMER_IDS_CHANGED}
    finally:
        sock.close()


def test_silent_clients_expire(tmp_path: Path) -> None:
    h2 = BrokerHarness(broker_config(tmp_path, client_channel_expire_ms=300))
    a, b = Member(h2, "a@X", "Idle"), Member(h2, "b@X", "Idle")
    try:
        a.heartbeat()
        b.heartbeat()
        started = time.monotonic()
        # a keeps beating, b falls silent: b is dropped (and its connection closed), a told.
        while "b@X" in h2.broker.clients.consumer_ids("Idle"):
            assert time.monotonic() - started < 5, "silent client never expired"
            a.heartbeat()
            time.sleep(0.05)
        assert time.monotonic() - started >= 0.25
        _wait(lambda: "Idle" in a.notified)
        _wait(lambda: len(h2.on_loop(lambda: list(h2.broker.server.connections))) == 1)  # b's closed
    finally:
        a.close()
        b.close()
        h2.close()
