"""Admin and look-up requests: topics, offsets by queue and time, messages by id and key, stats."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.protocol.bodies import TopicConfigSerializeWrapper
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.headers import CreateTopicRequestHeader
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import decode_stored_message, iter_stored_messages
from orbitmq.store.metadata_db import MetadataDB, export_tables


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("admin")))
    yield harness
    harness.close()


def _create(h: BrokerHarness, topic: str, queues: int = 4, perm: int = 6):
    fields = CreateTopicRequestHeader(topic, read_queue_nums=queues, write_queue_nums=queues,
                                      perm=perm).to_ext_fields()
    return h.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)


def _all_topics(h: BrokerHarness) -> dict:
    r = h.invoke(RequestCode.GET_ALL_TOPIC_CONFIG)
    assert r.code == ResponseCode.SUCCESS
    return TopicConfigSerializeWrapper.from_json(r.body).topic_config_table


def test_create_update_delete_topic(h: BrokerHarness) -> None:
    assert _create(h, "AdminTopic", 3).code == ResponseCode.SUCCESS
    assert _all_topics(h)["AdminTopic"].write_queue_nums == 3
    assert "TBW102" in _all_topics(h)
    assert _create(h, "AdminTopic", 5).code == ResponseCode.SUCCESS
    assert _all_topics(h)["AdminTopic"].read_queue_nums == 5
    h.send_ok("AdminTopic", b"x", queue_id=4)
    h.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "ag", "topic": "AdminTopic",
                                                  "queueId": "4", "commitOffset": "1"})
    h.wait_dispatched()
    assert h.broker.store.get_max_offset_in_queue("AdminTopic", 4) == 1
    assert h.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "AdminTopic"}).code == ResponseCode.SUCCESS
    assert "AdminTopic" not in _all_topics(h)
    assert h.broker.store.get_max_offset_in_queue("AdminTopic", 4) == 0
    assert h.broker.offsets.query("ag", "AdminTopic", 4) == -1
    assert not (Path(h.config.store.store_path) / "consumequeue" / "AdminTopic").exists()
    with MetadataDB(h.broker.metadata.path, read_only=True) as db:  # its row deleted
        assert "AdminTopic" not in export_tables(db, ["topics"])["topics"]["topicConfigTable"]


def test_create_topic_refusals(h: BrokerHarness) -> None:
    r = _create(h, "bad topic!")
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "illegal characters" in r.remark
    r = _create(h, "x" * 128)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "127" in r.remark
    assert _create(h, "TBW102").code == ResponseCode.NO_PERMISSION
    assert _create(h, "Zero", 0).code == ResponseCode.INVALID_PARAMETER
    assert h.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}).code == ResponseCode.NO_PERMISSION
    r = h.invoke(RequestCode.UPDATE_AND_CREATE_TOPIC, {})
    assert r.code == ResponseCode.INVALID_PARAMETER and "topic" in r.remark


def test_offsets_by_queue_and_time(h: BrokerHarness) -> None:
    before = int(time.time() * 1000) - 1
    for i in range(4):
        h.send_ok("Clock", f"{i}".encode())
    h.wait_dispatched()
    q = {"topic": "Clock", "queueId": "0"}
    assert h.invoke(RequestCode.GET_MAX_OFFSET, q).ext_fields["offset"] == "4"
    assert h.invoke(RequestCode.GET_MIN_OFFSET, q).ext_fields["offset"] == "0"
    earliest = int(h.invoke(RequestCode.GET_EARLIEST_MSG_STORETIME, q).ext_fields["timestamp"])
    assert before <= earliest <= int(time.time() * 1000)
    search = {**q, "timestamp": str(before)}
    assert h.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search).ext_fields["offset"] == "0"
    search["timestamp"] = str(int(time.time() * 1000) + 60_000)
    assert h.invoke(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, search).ext_fields["offset"] == "4"
    nothing = {"topic": "NoSuchQueue", "queueId": "3"}
    assert h.invoke(RequestCode.GET_MAX_OFFSET, nothing).ext_fields["offset"] == "0"
    assert h.invoke(RequestCode.GET_EARLIEST_MSG_STORETIME, nothing).ext_fields["timestamp"] == "-1"


def test_view_message_by_id(h: BrokerHarness) -> None:
    r = h.send_ok("ViewMe", b"look at me", tags="V", keys="vk")
    _, _, offset = decode_offset_msg_id(r.ext_fields["msgId"])
    v = h.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset)})
    assert v.code == ResponseCode.SUCCESS
    msg = decode_stored_message(v.body)
    assert (msg.body, msg.tags, msg.offset_msg_id) == (b"look at me", "V", r.ext_fields["msgId"])
    for bad in (offset + 1, 10**12):  # not the start of a message: nothing is sent
        v = h.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(bad)})
        assert v.code == ResponseCode.QUERY_NOT_FOUND and not v.body  # never SYSTEM_ERROR
        assert v.remark == f"can not find message by the offset, {bad}: no message starts there"
    v = h.invoke(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "-1"})  # no offset at all
    assert v.code == ResponseCode.INVALID_PARAMETER and not v.body and "offset" in v.remark


def test_query_message_by_key(h: BrokerHarness) -> None:
    h.send_ok("Keyed", b"one", keys="order-1 shared")
    h.send_ok("Keyed", b"two", keys="order-2 shared")
    h.send_ok("OtherKeyed", b"three", keys="shared")
    h.wait_dispatched()
    q = {"topic": "Keyed", "key": "shared", "maxNum": "10", "beginTimestamp": "0",
         "endTimestamp": str(2**62)}
    r = h.invoke(RequestCode.QUERY_MESSAGE, q)
    assert r.code == ResponseCode.SUCCESS
    assert sorted(m.body for m in iter_stored_messages(r.body)) == [b"one", b"two"]
    assert int(r.ext_fields["indexLastUpdatePhyoffset"]) >= 0
    assert "indexLastUpdateTimestamp" in r.ext_fields
    r = h.invoke(RequestCode.QUERY_MESSAGE, {**q, "key": "order-1"})
    assert [m.body for m in iter_stored_messages(r.body)] == [b"one"]
    r = h.invoke(RequestCode.QUERY_MESSAGE, {**q, "key": "absent"})
    assert r.code == ResponseCode.QUERY_NOT_FOUND and not r.body
    # By a message id that was never given (mqadmin's queryMsgByUniqueKey): the same answer.
    r = h.invoke(RequestCode.QUERY_MESSAGE, {**q, "key": "7F0000010000000000000000DEADBEEF",
                                             "_UNIQUE_KEY_QUERY": "true"})
    assert (r.code, r.body) == (ResponseCode.QUERY_NOT_FOUND, b"") and r.remark


def test_topic_stats_and_consume_stats(h: BrokerHarness) -> None:
    assert _create(h, "Stats", 2).code == ResponseCode.SUCCESS
    for i in range(5):
        h.send_ok("Stats", f"{i}".encode(), queue_id=i % 2)
    h.wait_dispatched()
    r = h.invoke(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Stats"})
    table = {json.loads(k)["queueId"]: v for k, v in json.loads(r.body)["offsetTable"].items()}
    assert {q: (v["minOffset"], v["maxOffset"]) for q, v in table.items()} == {0: (0, 3), 1: (0, 2)}
    assert all(v["lastUpdateTimestamp"] > 0 for v in table.values())
    key = json.loads(next(iter(json.loads(r.body)["offsetTable"])))
    assert key == {"brokerName": "broker-a", "queueId": key["queueId"], "topic": "Stats"}
    assert h.invoke(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "Nope"}).code == ResponseCode.TOPIC_NOT_EXIST

    h.invoke(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "sg", "topic": "Stats",
                                                  "queueId": "0", "commitOffset": "1"})
    r = h.invoke(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "sg"})
    stats = json.loads(r.body)
    rows = {json.loads(k)["queueId"]: v for k, v in stats["offsetTable"].items()}
    assert rows[0]["brokerOffset"] == 3 and rows[0]["consumerOffset"] == 1 and rows[0]["lastTimestamp"] > 0
    assert rows[1] == {"brokerOffset": 2, "consumerOffset": 0, "lastTimestamp": 0}
    assert stats["consumeTps"] == 0.0

    r = h.invoke(RequestCode.GET_ALL_CONSUMER_OFFSET)
    assert json.loads(r.body)["offsetTable"]["Stats@sg"] == {"0": 1}


def test_runtime_info_and_subscription_groups(h: BrokerHarness) -> None:
    r = h.invoke(RequestCode.GET_BROKER_RUNTIME_INFO)
    table = json.loads(r.body)["table"]
    assert table["brokerAddr"] == h.addr and all(isinstance(v, str) for v in table.values())
    body = json.dumps({"groupName": "AdminGroup", "retryMaxTimes": 3}).encode()
    assert h.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body).code == ResponseCode.SUCCESS
    groups = json.loads(h.invoke(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
    assert groups["subscriptionGroupTable"]["AdminGroup"]["retryMaxTimes"] == 3
    r = h.invoke(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "AdminGroup"})
    assert r.code == ResponseCode.SUCCESS
    groups = json.loads(h.invoke(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG).body)
    assert "AdminGroup" not in groups["subscriptionGroupTable"]
