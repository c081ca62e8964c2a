"""AdminProcessor called directly on a real broker: topics and subscription groups created,
changed, listed and deleted; per-queue stats; each refusal's code and remark."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from processor_support import RunningBroker, json_body, running_broker, send_request

from orbitmq.broker.processor.admin_processor import message_queue_key
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.protocol.bodies import TopicConfigSerializeWrapper
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("admin"), auto_create_topic=False,
                              broker_name="broker-admin")


def _create(broker: RunningBroker, topic: str, **fields: Any) -> RemotingCommand:
    header = CreateTopicRequestHeader(topic, **fields)
    return broker.answer(broker.processors.admin.update_and_create_topic,
                         RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                 header.to_ext_fields()))


def _all_topics(broker: RunningBroker) -> TopicConfigSerializeWrapper:
    resp = broker.answer(broker.processors.admin.get_all_topic_config,
                         RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    return TopicConfigSerializeWrapper.from_json(bytes(resp.body))


def test_a_topic_is_created_then_updated_and_listed(broker: RunningBroker) -> None:
    version = _all_topics(broker).data_version.counter
    assert _create(broker, "AdminT", read_queue_nums=2, write_queue_nums=3).code == 0
    listed = _all_topics(broker)
    tc = listed.topic_config_table["AdminT"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.order) == (2, 3, 6, False)
    assert listed.data_version.counter > version

    assert _create(broker, "AdminT", read_queue_nums=4, write_queue_nums=4, perm=4,
                   order=True).code == ResponseCode.SUCCESS
    tc = _all_topics(broker).topic_config_table["AdminT"]
    assert (tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.order) == (4, 4, 4, True)
    # The broker's own table is what was answered.
    assert broker.run(lambda: broker.controller.topics.get("AdminT")) == tc


def test_topic_attributes_are_added_on_top_of_the_topic_s(broker: RunningBroker) -> None:
    assert _create(broker, "AdminFifo", attributes="+message.type=FIFO").code == 0
    tc = _all_topics(broker).topic_config_table["AdminFifo"]
    assert tc.attributes == {"message.type": "FIFO"}
    resp = _create(broker, "AdminFifo", attributes="+no.such.attribute=1")
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark and "no.such.attribute" in resp.remark


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC",
                                   "DefaultCluster"])
def test_a_system_topic_or_the_cluster_s_name_cannot_be_created(broker: RunningBroker,
                                                                topic: str) -> None:
    resp = _create(broker, topic)
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == f"the topic[{topic}] is conflict with system topic"


def test_an_illegal_topic_name_is_refused_message_illegal(broker: RunningBroker) -> None:
    resp = _create(broker, "no/slashes")
    assert resp.code == ResponseCode.MESSAGE_ILLEGAL
    assert "no/slashes" not in _all_topics(broker).topic_config_table


@pytest.mark.parametrize(("field", "value", "name"), [("read_queue_nums", 0, "readQueueNums"),
                                                      ("write_queue_nums", 1025, "writeQueueNums")])
def test_queue_counts_out_of_range_are_refused_invalid_parameter(
        broker: RunningBroker, field: str, value: int, name: str) -> None:
    resp = _create(broker, f"AdminRange{name}", **{field: value})
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark is not None and resp.remark.startswith(f"{name} {value} is out of range 1..")
    assert f"AdminRange{name}" not in _all_topics(broker).topic_config_table


def test_a_deleted_topic_loses_its_config_offsets_and_queues(broker: RunningBroker) -> None:
    assert _create(broker, "AdminGone", read_queue_nums=1, write_queue_nums=1).code == 0
    sent = broker.answer(broker.processors.send.send_message, send_request("AdminGone"))
    assert sent.code == ResponseCode.SUCCESS
    commit = UpdateConsumerOffsetRequestHeader("AdminG", "AdminGone", 0, 1)
    assert broker.answer(broker.processors.offsets.update_consumer_offset,
                         RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET,
                                                 commit.to_ext_fields())).code == 0
    broker.settle()
    store = broker.controller.store
    assert broker.run(lambda: store.get_max_offset_in_queue("AdminGone", 0)) == 1

    resp = broker.answer(broker.processors.admin.delete_topic,
                         RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                                 DeleteTopicRequestHeader("AdminGone").to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS
    assert "AdminGone" not in _all_topics(broker).topic_config_table
    assert broker.run(lambda: broker.controller.offsets.query("AdminG", "AdminGone", 0)) < 0
    assert broker.run(lambda: store.get_max_offset_in_queue("AdminGone", 0)) == 0


def test_a_system_topic_cannot_be_deleted(broker: RunningBroker) -> None:
    resp = broker.answer(broker.processors.admin.delete_topic,
                         RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER,
                                                 DeleteTopicRequestHeader("SCHEDULE_TOPIC_XXXX")
                                                 .to_ext_fields()))
    assert resp.code == ResponseCode.NO_PERMISSION
    assert resp.remark == "the system topic[SCHEDULE_TOPIC_XXXX] cannot be deleted"


def test_topic_stats_per_queue_and_an_unknown_topic(broker: RunningBroker) -> None:
    assert _create(broker, "AdminStats", read_queue_nums=2, write_queue_nums=2).code == 0
    for _ in range(2):
        assert broker.answer(broker.processors.send.send_message,
                             send_request("AdminStats", queue_id=1)).code == 0
    broker.settle()
    get = broker.processors.admin.get_topic_stats_info
    resp = broker.answer(get, RemotingCommand.request(
        RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader("AdminStats").to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS
    table = json_body(resp)["offsetTable"]
    q0, q1 = (table[message_queue_key("AdminStats", "broker-admin", q)] for q in (0, 1))
    assert (q0["minOffset"], q0["maxOffset"], q0["lastUpdateTimestamp"]) == (0, 0, 0)
    assert (q1["minOffset"], q1["maxOffset"]) == (0, 2)
    assert q1["lastUpdateTimestamp"] > 0

    unknown = broker.answer(get, RemotingCommand.request(
        RequestCode.GET_TOPIC_STATS_INFO, GetTopicStatsInfoRequestHeader("AdminNope").to_ext_fields()))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert unknown.remark == "topic[AdminNope] not exist"


def test_consume_stats_give_the_lag_of_a_group(broker: RunningBroker) -> None:
    assert _create(broker, "AdminLag", read_queue_nums=1, write_queue_nums=1).code == 0
    for _ in range(3):
        assert broker.answer(broker.processors.send.send_message,
                             send_request("AdminLag")).code == 0
    commit = UpdateConsumerOffsetRequestHeader("AdminLagG", "AdminLag", 0, 1)
    broker.answer(broker.processors.offsets.update_consumer_offset,
                  RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, commit.to_ext_fields()))
    broker.settle()
    resp = broker.answer(broker.processors.admin.get_consume_stats, RemotingCommand.request(
        RequestCode.GET_CONSUME_STATS, GetConsumeStatsRequestHeader("AdminLagG").to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS
    row = json_body(resp)["offsetTable"][message_queue_key("AdminLag", "broker-admin", 0)]
    assert (row["brokerOffset"], row["consumerOffset"]) == (3, 1)
    assert row["lastTimestamp"] > 0
    everything = broker.answer(broker.processors.admin.get_all_consumer_offset,
                               RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET))
    assert json_body(everything)["offsetTable"]["AdminLag@AdminLagG"] == {"0": 1}


def _groups(broker: RunningBroker) -> dict[str, Any]:
    resp = broker.answer(broker.processors.admin.get_all_subscription_group,
                         RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    groups: dict[str, Any] = json_body(resp)["subscriptionGroupTable"]
    return groups


def _update_group(broker: RunningBroker, body: bytes) -> RemotingCommand:
    return broker.answer(broker.processors.admin.update_subscription_group,
                         RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                 body=body))


def test_a_group_is_created_updated_listed_and_deleted_with_its_offsets(
        broker: RunningBroker) -> None:
    cfg = SubscriptionGroupConfig("AdminGroup", retry_max_times=3, retry_queue_nums=2)
    assert _update_group(broker, cfg.to_json()).code == ResponseCode.SUCCESS
    listed = _groups(broker)["AdminGroup"]
    assert (listed["retryMaxTimes"], listed["retryQueueNums"]) == (3, 2)
    cfg.retry_max_times = 5
    assert _update_group(broker, cfg.to_json()).code == ResponseCode.SUCCESS
    assert _groups(broker)["AdminGroup"]["retryMaxTimes"] == 5

    broker.run(lambda: broker.controller.offsets.commit("AdminGroup", "AdminT", 0, 7))
    keep = DeleteSubscriptionGroupRequestHeader("AdminGroup")
    resp = broker.answer(broker.processors.admin.delete_subscription_group,
                         RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                                 keep.to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS
    assert "AdminGroup" not in _groups(broker)
    assert broker.run(lambda: broker.controller.offsets.query("AdminGroup", "AdminT", 0)) == 7
    drop = DeleteSubscriptionGroupRequestHeader("AdminGroup", remove_offset=True)
    broker.answer(broker.processors.admin.delete_subscription_group,
                  RemotingCommand.request(RequestCode.DELETE_SUBSCRIPTIONGROUP,
                                          drop.to_ext_fields()))
    assert broker.run(lambda: broker.controller.offsets.query("AdminGroup", "AdminT", 0)) < 0


def test_a_group_without_a_body_or_with_an_illegal_name_is_refused(broker: RunningBroker) -> None:
    empty = _update_group(broker, b"")
    assert empty.code == ResponseCode.INVALID_PARAMETER
    assert empty.remark == "subscription group config body missing"
    illegal = _update_group(broker, orjson.dumps({"groupName": "bad group"}))
    assert illegal.code == ResponseCode.INVALID_PARAMETER
    assert illegal.remark is not None and illegal.remark.startswith("subscription group refused:")
    assert "bad group" not in _groups(broker)
