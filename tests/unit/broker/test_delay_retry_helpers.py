"""Pure pieces of delays, retries and dead letters: delay level parsing, the schedule redirect,
group setting updates, running-info queues and resend properties."""

from __future__ import annotations

import json

import pytest

from orbitmq.broker.schedule_service import apply_delay, delay_level_of
from orbitmq.client.admin.groups import (
    original_topic,
    resend_properties,
    running_info_queues,
    updated_group_config,
)
from orbitmq.config import StoreConfig, parse_delay_levels_ms
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt
from orbitmq.store.message_inner import MessageInner


def test_default_delay_levels() -> None:
    levels = parse_delay_levels_ms(StoreConfig().message_delay_level)
    assert len(levels) == 18
    assert levels[0] == 1000 and levels[2] == 10_000 and levels[-1] == 7_200_000


@pytest.mark.parametrize("spec", ["", "   ", "1s 5", "1x", "0s", "-1s", "1.5s", "s", "1S"])
def test_bad_delay_levels_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="message_delay_level"):
        parse_delay_levels_ms(spec)
    with pytest.raises(ValueError, match="message_delay_level"):
        StoreConfig(message_delay_level=spec)


def test_delay_units() -> None:
    assert parse_delay_levels_ms("2s 3m 4h 1d") == (2000, 180_000, 14_400_000, 86_400_000)


def test_apply_delay_parks_the_message_with_its_real_queue() -> None:
    msg = MessageInner("Orders", 3, b"x", {"DELAY": "7", "TAGS": "a"})
    assert apply_delay(msg, 5)
    assert (msg.topic, msg.queue_id) == ("SCHEDULE_TOPIC_XXXX", 4)
    assert msg.properties == {"DELAY": "5", "TAGS": "a", "REAL_TOPIC": "Orders", "REAL_QID": "3"}


@pytest.mark.parametrize("props,sys_flag", [
    ({}, 0), ({"DELAY": "0"}, 0), ({"DELAY": "x"}, 0), ({"DELAY": "-2"}, 0),
    ({"DELAY": "2"}, 4),  # a prepared (half) message
    ({"DELAY": "2", "TRAN_MSG": "true"}, 0),
])
def test_apply_delay_leaves_other_messages_alone(props: dict[str, str], sys_flag: int) -> None:
    msg = MessageInner("Orders", 1, b"x", dict(props), sys_flag=sys_flag)
    assert not apply_delay(msg, 18)
    assert (msg.topic, msg.queue_id, msg.properties) == ("Orders", 1, props)


def test_delay_level_of() -> None:
    assert delay_level_of({"DELAY": "3"}) == 3
    assert delay_level_of({"DELAY": ""}) == 0
    assert delay_level_of({}) == 0


def test_updated_group_config_keeps_other_settings() -> None:
    current = json.dumps({"subscriptionGroupTable": {"g": {
        "groupName": "g", "retryMaxTimes": 5, "consumeEnable": True, "retryQueueNums": 2}}})
    cfg = json.loads(updated_group_config(current.encode(), "g", {"consume_enable": False}))
    assert cfg["consumeEnable"] is False and cfg["retryMaxTimes"] == 5 and cfg["retryQueueNums"] == 2
    new = json.loads(updated_group_config(b"", "fresh", {"retry_max_times": 3}))
    assert new["groupName"] == "fresh" and new["retryMaxTimes"] == 3 and new["consumeEnable"] is True
    with pytest.raises(ClientError, match="unknown group setting"):
        updated_group_config(b"", "g", {"bogus": 1})
    with pytest.raises(ClientError, match="negative"):
        updated_group_config(b"", "g", {"retry_max_times": -1})


MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)


def test_running_info_queues_in_every_shape() -> None:
    as_list = {"mqTable": [{"messageQueue": MQ1.to_dict(), "processQueueInfo": {}},
                           {"messageQueue": MQ0.to_dict()}]}
    assert running_info_queues(json.dumps(as_list).encode()) == [MQ0, MQ1]
    key = json.dumps({"brokerName": "broker-a", "queueId": 1, "topic": "T"})
    assert running_info_queues(json.dumps({"mqTable": {key: {}}}).encode()) == [MQ1]
    # The C++ client writes MessageQueue objects as keys (not JSON) at the front of the body.
    cpp = (b'{"mqTable":{{\n   "brokerName" : "broker-a",\n   "queueId" : 0,\n   "topic" : "T"\n}:'
           b'{\n   "cachedMsgCount" : 0\n},{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
           b'{"cachedMsgCount":2}},"jstack":"","subscriptionSet":[{"topic":"T","subString":"*"}]}')
    assert running_info_queues(cpp) == [MQ0, MQ1]
    assert running_info_queues(b"not json") == []
    assert running_info_queues(b'{"properties": {}}') == []


def test_resend_properties_drop_the_retry_bookkeeping() -> None:
    msg = MessageExt("%DLQ%g", b"x", properties={
        "UNIQ_KEY": "ID", "TAGS": "t", "KEYS": "k", "color": "blue", "RETRY_TOPIC": "Orders",
        "ORIGIN_MESSAGE_ID": "ID", "REAL_TOPIC": "%RETRY%g", "REAL_QID": "0", "DELAY": "3",
        "WAIT": "true", "RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "16"})
    assert resend_properties(msg) == {"UNIQ_KEY": "ID", "color": "blue"}
    assert original_topic(msg) == "Orders"
    assert original_topic(MessageExt("%DLQ%g", b"x")) is None
