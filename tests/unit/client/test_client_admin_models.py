"""Parsing of admin answers and of client settings, without servers."""

from __future__ import annotations

import json

import pytest

import orbitmq
from orbitmq.client.admin.models import (
    QueueConsumeStatus,
    parse_consume_stats,
    parse_consumer_connection,
    parse_offset_groups,
    parse_subscription_groups,
    parse_topic_stats,
)
from orbitmq.client.instance import check_response, parse_namesrv_addrs
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand


def mq_key(topic: str, broker: str, qid: int) -> str:
    """A queue as the broker writes it as a map key: compact JSON, fields in alphabetical order."""
    return json.dumps({"brokerName": broker, "queueId": qid, "topic": topic},
                      separators=(",", ":"))


def test_topic_stats_with_queue_keys_as_json_text():
    body = json.dumps({"offsetTable": {
        mq_key("T", "b", 1): {"minOffset": 2, "maxOffset": 10, "lastUpdateTimestamp": 99},
        mq_key("T", "b", 0): {"minOffset": 0, "maxOffset": 0, "lastUpdateTimestamp": 0},
    }}).encode()
    stats = sorted(parse_topic_stats(body), key=lambda s: s.queue)
    assert [(s.queue.queue_id, s.min_offset, s.max_offset, s.last_update_timestamp)
            for s in stats] == [(0, 0, 0, 0), (1, 2, 10, 99)]


def test_consume_stats_as_object_or_list():
    as_object = json.dumps({"consumeTps": 1.5, "offsetTable": {
        mq_key("T", "b", 0): {"brokerOffset": 10, "consumerOffset": 4, "lastTimestamp": 7}}})
    as_list = json.dumps({"offsetTable": [{
        "messageQueue": {"topic": "T", "brokerName": "b", "queueId": 0},
        "brokerOffset": "10", "consumerOffset": "4", "lastTimestamp": "7"}]})
    for body in (as_object, as_list):
        (status,) = parse_consume_stats(body)
        assert status == QueueConsumeStatus(MessageQueue("T", "b", 0), 10, 4, 7)
        assert status.lag == 6


def test_lag_counts_from_zero_without_a_committed_offset():
    assert QueueConsumeStatus(MessageQueue("T", "b", 0), 5, -1).lag == 5
    assert QueueConsumeStatus(MessageQueue("T", "b", 0), 5, 9).lag == 0


def test_malformed_admin_answers_are_protocol_errors():
    for body in (b"[]", b"not json", b'{"offsetTable": 3}', b'{"offsetTable": {"x": 1}}'):
        with pytest.raises(RemoteProtocolError):
            parse_topic_stats(body)


def test_consumer_connection_in_java_shape():
    body = json.dumps({
        "connectionSet": [{"clientId": "b@2", "clientAddr": "1.2.3.4:5", "language": "JAVA",
                           "version": 395}, {"clientId": "a@1"}],
        "subscriptionTable": {"T": {"topic": "T", "subString": "a || b"}},
        "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
    })
    info = parse_consumer_connection("g", body)
    assert [c.client_id for c in info.connections] == ["a@1", "b@2"]
    assert info.connections[1].language == "JAVA" and info.subscriptions == {"T": "a || b"}
    merged = info.merge(parse_consumer_connection("g", json.dumps(
        {"connectionSet": [{"clientId": "c@3"}]})))
    assert [c.client_id for c in merged.connections] == ["a@1", "b@2", "c@3"]


def test_group_names_from_subscription_groups_and_offsets():
    assert parse_subscription_groups(b'{"subscriptionGroupTable": {"g2": {}, "g1": {}}}') == [
        "g1", "g2"]
    assert parse_offset_groups(b'{"offsetTable": {"T@g1": {"0": 1}, "U@g3": {}}}') == ["g1", "g3"]


def test_name_server_addresses():
    assert parse_namesrv_addrs("a:1; b:2 ;") == ["a:1", "b:2"]
    assert parse_namesrv_addrs(["a:1"]) == ["a:1"]
    for bad in ("", ";", "no-port", "host:port"):
        with pytest.raises(ClientError):
            parse_namesrv_addrs(bad)


def test_name_server_from_environment(monkeypatch):
    monkeypatch.delenv("ORBITMQ_NAMESRV_ADDR", raising=False)
    monkeypatch.setenv("NAMESRV_ADDR", "h:9876")
    assert parse_namesrv_addrs(None) == ["h:9876"]
    monkeypatch.delenv("NAMESRV_ADDR")
    with pytest.raises(ClientError):
        parse_namesrv_addrs(None)


def test_check_response_marks_retriable_codes():
    ok = RemotingCommand(ResponseCode.SUCCESS, flag=1)
    assert check_response(ok) is ok
    with pytest.raises(BrokerError) as info:
        check_response(RemotingCommand(ResponseCode.SYSTEM_BUSY, flag=1, remark="busy"))
    assert info.value.retriable and info.value.remark == "busy"
    with pytest.raises(BrokerError) as info:
        check_response(RemotingCommand(ResponseCode.MESSAGE_ILLEGAL, flag=1))
    assert not info.value.retriable


def test_public_names_load_lazily_from_the_package():
    for name in orbitmq.__all__:
        assert getattr(orbitmq, name) is not None
    assert orbitmq.Producer.__module__ == "orbitmq.client.producer.producer"
    with pytest.raises(AttributeError):
        orbitmq.NoSuchThing  # noqa: B018
