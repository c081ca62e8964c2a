"""JSON bodies: Java field names out, fastjson's quirks and the C++ client's ordinals in."""

from __future__ import annotations

import orjson
import pytest

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import (
    BrokerData,
    ClusterInfo,
    ConsumeFromWhere,
    ConsumerData,
    ConsumerListBody,
    ConsumeType,
    DataVersion,
    ExpressionType,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageModel,
    MessageQueue,
    Perm,
    ProducerData,
    QueueData,
    RegisterBrokerBody,
    SubscriptionData,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
)
from orbitmq.protocol.bodies import JsonBody, loads_lenient

MQ = MessageQueue("T", "broker-a", 1)


def test_enum_ordinals_are_javas() -> None:
    assert [m.value for m in ConsumeType] == [0, 1]
    assert ConsumeType.CONSUME_PASSIVELY == 1 and MessageModel.CLUSTERING == 1
    assert [m.name for m in ConsumeFromWhere] == [
        "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
        "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
        "CONSUME_FROM_TIMESTAMP"]
    assert [m.value for m in ConsumeFromWhere] == list(range(6))
    assert ExpressionType.TAG == "TAG" and ExpressionType.SQL92 == "SQL92"
    assert Perm.READ | Perm.WRITE == 6


def test_route_from_fastjson_with_bare_numeric_keys() -> None:
    java = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
            b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
            b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
            b'"topicSynFlag":0,"writeQueueNums":4}]}')
    route = TopicRouteData.from_json(java)
    assert route.broker_datas == [BrokerData("DefaultCluster", "broker-a",
                                             {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"})]
    assert route.queue_datas == [QueueData("broker-a", 4, 4, 6, 0)]
    assert route.order_topic_conf is None and route.filter_server_table == {}


def test_route_written_as_standard_json_with_java_names() -> None:
    route = TopicRouteData(
        queue_datas=[QueueData("broker-a", 8, 8, 6, 1)],
        broker_datas=[BrokerData("C", "broker-a", {0: "127.0.0.1:10911"})],
        filter_server_table={"127.0.0.1:10911": ["f1"]})
    data = orjson.loads(route.to_json())
    assert data == {
        "queueDatas": [{"brokerName": "broker-a", "readQueueNums": 8, "writeQueueNums": 8,
                        "perm": 6, "topicSysFlag": 1, "topicSynFlag": 1}],
        "brokerDatas": [{"cluster": "C", "brokerName": "broker-a",
                         "brokerAddrs": {"0": "127.0.0.1:10911"}}],
        "filterServerTable": {"127.0.0.1:10911": ["f1"]}}
    assert TopicRouteData.from_json(route.to_json()) == route


def test_bare_key_prepass_leaves_strings_alone() -> None:
    tricky = b'{"a":"{0:\\"x\\",1:2}","b":{7:"q,3:r"},"c":"\\\\",-4:"neg"}'
    assert loads_lenient(tricky) == {"a": '{0:"x",1:2}', "b": {"7": "q,3:r"}, "c": "\\",
                                     "-4": "neg"}


def test_bare_key_prepass_handles_whitespace_and_nesting() -> None:
    assert loads_lenient(b'{ 0 : {1:[{2 :"a"}]} ,\n 3:"b"}') == {
        "0": {"1": [{"2": "a"}]}, "3": "b"}
    assert loads_lenient("{10:\"str input\"}") == {"10": "str input"}


def test_invalid_json_even_after_the_prepass() -> None:
    with pytest.raises(RemoteProtocolError, match="not valid JSON"):
        loads_lenient(b'{"a":')
    with pytest.raises(RemoteProtocolError):
        TopicRouteData.from_json(b"\xff\xfe")


def test_cpp_heartbeat_with_integer_enums_and_missing_sets() -> None:
    body = (b'{"clientID":"6251-127.0.0.1@DEFAULT","consumerDataSet":[{"consumeFromWhere":0,'
            b'"consumeType":0,"groupName":"G","messageModel":1}]}\n')
    heartbeat = HeartbeatData.from_json(body)
    assert heartbeat.client_id == "6251-127.0.0.1@DEFAULT"
    assert heartbeat.producer_data_set == []
    (consumer,) = heartbeat.consumer_data_set
    assert consumer == ConsumerData("G", ConsumeType.CONSUME_ACTIVELY, MessageModel.CLUSTERING,
                                    ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET)
    assert consumer.subscription_data_set == [] and consumer.unit_mode is False


def test_java_heartbeat_with_enum_names() -> None:
    body = orjson.dumps({
        "clientID": "10.0.0.5@1234", "producerDataSet": [{"groupName": "PG"}],
        "consumerDataSet": [{
            "groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "BROADCASTING",
            "consumeFromWhere": "CONSUME_FROM_TIMESTAMP", "unitMode": False,
            "subscriptionDataSet": [{"classFilterMode": False, "topic": "T", "subString": "a || b",
                                     "tagsSet": ["a", "b"], "codeSet": [97, 98],
                                     "subVersion": 1700000000000, "expressionType": "TAG"}]}]})
    heartbeat = HeartbeatData.from_json(body)
    (consumer,) = heartbeat.consumer_data_set
    assert consumer.consume_type is ConsumeType.CONSUME_PASSIVELY
    assert consumer.message_model is MessageModel.BROADCASTING
    assert consumer.consume_from_where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP
    assert consumer.subscription_data_set[0].code_set == [97, 98]
    assert heartbeat.producer_data_set == [ProducerData("PG")]


def test_heartbeat_written_with_enum_names() -> None:
    heartbeat = HeartbeatData("cid", consumer_data_set=[ConsumerData("CG")])
    data = orjson.loads(heartbeat.to_json())
    assert data["clientID"] == "cid"
    assert data["consumerDataSet"][0] == {
        "groupName": "CG", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [],
        "unitMode": False}
    assert HeartbeatData.from_json(heartbeat.to_json()) == heartbeat


@pytest.mark.parametrize("value", ["1", " CONSUME_PASSIVELY", "CONSUME_PASSIVELY"])
def test_enum_strings_are_names_or_digits(value: str) -> None:
    data = {"groupName": "G", "consumeType": value}
    assert ConsumerData.from_dict(data).consume_type is ConsumeType.CONSUME_PASSIVELY


@pytest.mark.parametrize("value", ["PASSIVE", 7, -1, 1.5, [0], True])
def test_unknown_enum_values_are_refused(value: object) -> None:
    with pytest.raises(RemoteProtocolError, match="consumeType"):
        ConsumerData.from_dict({"groupName": "G", "consumeType": value})


def test_message_queue_is_frozen_ordered_and_hashable() -> None:
    queues = [MessageQueue("T", "b", 2), MessageQueue("T", "a", 3), MessageQueue("S", "z", 0)]
    assert sorted(queues) == [queues[2], queues[1], queues[0]]
    assert len({MQ, MessageQueue("T", "broker-a", 1)}) == 1
    with pytest.raises(AttributeError):
        MQ.queue_id = 2
    assert MQ.to_dict() == {"topic": "T", "brokerName": "broker-a", "queueId": 1}


def test_lock_bodies() -> None:
    request = LockBatchRequestBody("CG", "client-1", [MQ])
    data = orjson.loads(request.to_json())
    assert data == {"consumerGroup": "CG", "clientId": "client-1", "onlyThisBroker": False,
                    "mqSet": [{"topic": "T", "brokerName": "broker-a", "queueId": 1}]}
    assert LockBatchRequestBody.from_json(request.to_json()) == request
    response = LockBatchResponseBody([MQ])
    assert orjson.loads(response.to_json()) == {"lockOKMQSet": [MQ.to_dict()]}
    assert LockBatchResponseBody.from_json(b'{"lockOKMQSet":[]}').lock_ok_mq_set == []
    unlock = UnlockBatchRequestBody("CG", "client-1", [MQ], only_this_broker=True)
    assert UnlockBatchRequestBody.from_json(unlock.to_json()) == unlock


def test_consumer_list_body() -> None:
    body = ConsumerListBody(["a", "b"])
    assert orjson.loads(body.to_json()) == {"consumerIdList": ["a", "b"]}
    assert ConsumerListBody.from_json(b"{}") == ConsumerListBody()


def test_topic_config_wrapper_and_register_body() -> None:
    wrapper = TopicConfigSerializeWrapper(
        {"T": TopicConfig("T", 4, 4), "%RETRY%G": TopicConfig("%RETRY%G", 1, 1, order=True)},
        DataVersion(timestamp=1700000000000, counter=3))
    data = orjson.loads(wrapper.to_json())
    assert data["topicConfigTable"]["T"] == {
        "topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False}
    assert data["dataVersion"] == {"timestamp": 1700000000000, "counter": 3}
    assert TopicConfigSerializeWrapper.from_json(wrapper.to_json()) == wrapper
    register = RegisterBrokerBody(wrapper, ["10.0.0.9:1234"])
    assert RegisterBrokerBody.from_json(register.to_json()) == register
    assert set(orjson.loads(register.to_json())) == {"topicConfigSerializeWrapper",
                                                     "filterServerList"}


def test_topic_config_defaults_are_javas() -> None:
    config = TopicConfig.from_json(b'{"topicName":"T"}')
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (16, 16, 6)


def test_cluster_info_and_topic_list() -> None:
    info = ClusterInfo({"broker-a": BrokerData("C", "broker-a", {0: "h:1"})},
                       {"C": ["broker-a"]})
    assert ClusterInfo.from_json(info.to_json()) == info
    assert set(orjson.loads(info.to_json())) == {"brokerAddrTable", "clusterAddrTable"}
    java = b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"h:1"},"brokerName":"broker-a",' \
           b'"cluster":"C"}},"clusterAddrTable":{"C":["broker-a"]}}'
    assert ClusterInfo.from_json(java) == info
    topics = TopicList(["a", "b"])
    assert orjson.loads(topics.to_json()) == {"topicList": ["a", "b"]}
    assert TopicList.from_json(b'{"topicList":["x"],"brokerAddr":"h:1"}').broker_addr == "h:1"


def test_subscription_defaults_when_cpp_leaves_fields_out() -> None:
    sub = SubscriptionData.from_json(b'{"topic":"T","subString":"TagA","subVersion":"17"}')
    assert sub == SubscriptionData("T", "TagA", [], [], 17, False, "TAG")


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (MessageQueue, b'{"topic":"T","brokerName":"b"}', "missing field 'queueId'"),
        (MessageQueue, b'{"topic":"T","brokerName":"b","queueId":"x"}', "queueId"),
        (MessageQueue, b"[1,2]", "MessageQueue object"),
        (QueueData, b'{"brokerName":"b","readQueueNums":1,"writeQueueNums":1,"perm":{}}', "perm"),
        (BrokerData, b'{"cluster":"C","brokerName":"b","brokerAddrs":{"x":"h"}}', "key"),
        (BrokerData, b'{"cluster":"C","brokerName":"b","brokerAddrs":[]}', "an object"),
        (TopicRouteData, b'{"queueDatas":{}}', "an array"),
        (TopicRouteData, b'{"queueDatas":[1]}', r"queueDatas\[0\]"),
        (HeartbeatData, b'{"clientID":["x"]}', "clientID"),
        (HeartbeatData, b'{"producerDataSet":[]}', "clientID"),
        (TopicConfig, b'{"topicName":"T","order":"perhaps"}', "order"),
        (ConsumerListBody, b'"just a string"', "ConsumerListBody object"),
    ],
)
def test_malformed_bodies(cls: type[JsonBody], data: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        cls.from_json(data)


def test_null_optional_values_take_defaults() -> None:
    route = TopicRouteData.from_json(b'{"orderTopicConf":null,"queueDatas":null}')
    assert route == TopicRouteData()


def test_memoryview_input() -> None:
    assert ConsumerListBody.from_json(memoryview(b'{"consumerIdList":["a"]}')).consumer_id_list == [
        "a"]


@pytest.mark.parametrize(
    ("cls", "data", "message"),
    [
        (TopicConfig, b'{"topicName":"T","topicSysFlag":4096}', "topicSysFlag.*TopicSysFlag"),
        (TopicConfig, b'{"topicName":"T","perm":255}', "perm.*PermName"),
        (TopicConfig, b'{"topicName":"T","readQueueNums":-1}', "readQueueNums"),
        (TopicConfig, b'{"topicName":"T","topicFilterType":"X"}', "topicFilterType"),
        (MessageQueue, b'{"topic":"T","brokerName":"b","queueId":99999999999}', "queueId.*int32"),
        (QueueData, b'{"brokerName":"b","readQueueNums":1,"writeQueueNums":1,"perm":6,'
                    b'"topicSynFlag":8}', "topicSysFlag"),
        (BrokerData, b'{"cluster":"C","brokerName":"b","brokerAddrs":{"-1":"h:1"}}', "key"),
        (HeartbeatData, b'{"clientID":"c","consumerDataSet":[{"groupName":"g",'
                        b'"subscriptionDataSet":[{"topic":"T","subVersion":1e30}]}]}',
         "subVersion"),
        (HeartbeatData, b'{"clientID":"c","consumerDataSet":[{"groupName":"g",'
                        b'"subscriptionDataSet":[{"topic":"T","codeSet":[99999999999]}]}]}',
         r"codeSet\[0\]"),
    ],
)
def test_numbers_out_of_range_in_bodies(cls: type[JsonBody], data: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        cls.from_json(data)


def test_an_integer_body_field_needs_its_range() -> None:
    import dataclasses

    @dataclasses.dataclass
    class Unranged(JsonBody):
        n: int = 0

    with pytest.raises(TypeError, match="unsupported body field type"):
        Unranged.from_json(b'{"n": 1}')
