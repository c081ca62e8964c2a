"""Typed headers: RocketMQ's wire names, lenient parsing, required fields, V2 short names."""

from __future__ import annotations

import dataclasses

import pytest

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import headers as h

ALL_HEADERS = [obj for obj in (getattr(h, name) for name in h.__all__)
               if isinstance(obj, type) and issubclass(obj, h.Header) and obj is not h.Header]

# Wire names checked against apache/rocketmq's header classes and protocol schema files.
EXPECTED_WIRE_NAMES: dict[type[h.Header], set[str]] = {
    h.SendMessageRequestHeader: {
        "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
        "bornTimestamp", "flag", "properties", "reconsumeTimes", "unitMode", "batch",
        "maxReconsumeTimes", "brokerName"},
    h.SendMessageResponseHeader: {"msgId", "queueId", "queueOffset", "transactionId",
                                  "masterEpoch", "recallHandle"},
    h.RecallMessageRequestHeader: {"topic", "recallHandle", "producerGroup", "brokerName"},
    h.RecallMessageResponseHeader: {"msgId"},
    h.PullMessageRequestHeader: {
        "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
        "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion", "expressionType",
        "maxMsgBytes"},
    h.PullMessageResponseHeader: {"suggestWhichBrokerId", "nextBeginOffset", "minOffset",
                                  "maxOffset"},
    h.QueryConsumerOffsetRequestHeader: {"consumerGroup", "topic", "queueId"},
    h.QueryConsumerOffsetResponseHeader: {"offset"},
    h.UpdateConsumerOffsetRequestHeader: {"consumerGroup", "topic", "queueId", "commitOffset"},
    h.GetMaxOffsetRequestHeader: {"topic", "queueId"},
    h.GetMinOffsetResponseHeader: {"offset"},
    h.SearchOffsetByTimestampRequestHeader: {"topic", "queueId", "timestamp"},
    h.GetEarliestMsgStoretimeResponseHeader: {"timestamp"},
    h.ViewMessageRequestHeader: {"offset", "topic"},
    h.QueryMessageRequestHeader: {"topic", "key", "maxNum", "beginTimestamp", "endTimestamp"},
    h.QueryMessageResponseHeader: {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"},
    h.GetRouteInfoRequestHeader: {"topic", "acceptStandardJsonOnly"},
    # masterEpoch: OrbitMQ's controller mode (docs/failover.md); RocketMQ's parsers ignore it.
    h.RegisterBrokerRequestHeader: {"brokerName", "brokerAddr", "clusterName", "haServerAddr",
                                    "brokerId", "compressed", "bodyCrc32", "masterEpoch"},
    h.RegisterBrokerResponseHeader: {"haServerAddr", "masterAddr"},
    h.UnregisterBrokerRequestHeader: {"brokerName", "brokerAddr", "clusterName", "brokerId"},
    h.UnregisterClientRequestHeader: {"clientID", "producerGroup", "consumerGroup"},
    h.CreateTopicRequestHeader: {"topic", "defaultTopic", "readQueueNums", "writeQueueNums",
                                 "perm", "topicFilterType", "topicSysFlag", "order",
                                 "attributes"},  # RocketMQ 5: "+message.type=FIFO"
    h.ConsumerSendMsgBackRequestHeader: {"offset", "group", "delayLevel", "originMsgId",
                                         "originTopic", "unitMode", "maxReconsumeTimes"},
    h.EndTransactionRequestHeader: {"producerGroup", "tranStateTableOffset", "commitLogOffset",
                                    "commitOrRollback", "fromTransactionCheck", "msgId",
                                    "transactionId"},
    h.CheckTransactionStateRequestHeader: {"tranStateTableOffset", "commitLogOffset", "msgId",
                                           "transactionId", "offsetMsgId"},
    h.ResetOffsetRequestHeader: {"topic", "group", "timestamp", "isForce"},
    h.GetConsumeStatsRequestHeader: {"consumerGroup", "topic"},
    h.GetConsumerRunningInfoRequestHeader: {"consumerGroup", "clientId", "jstackEnable"},
    h.DeleteSubscriptionGroupRequestHeader: {"groupName", "removeOffset"},
}


@pytest.mark.parametrize("cls", list(EXPECTED_WIRE_NAMES), ids=lambda c: c.__name__)
def test_wire_names_are_rocketmqs(cls: type[h.Header]) -> None:
    assert set(cls.wire_names().values()) == EXPECTED_WIRE_NAMES[cls]


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=lambda c: c.__name__)
def test_every_header_has_a_valid_spec(cls: type[h.Header]) -> None:
    names = cls.wire_names()
    assert len(set(names.values())) == len(names)
    assert all(name and " " not in name for name in names.values())


def test_pull_header_from_cpp_style_fields() -> None:
    fields = {"consumerGroup": "G", "topic": "T", "queueId": 3, "queueOffset": "10",
              "maxMsgNums": 32, "sysFlag": 6, "commitOffset": "-1",
              "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "0",
              "AccessKey": "", "Signature": "xyz"}
    header = h.PullMessageRequestHeader.from_ext_fields(fields)
    assert header == h.PullMessageRequestHeader(
        consumer_group="G", topic="T", queue_id=3, queue_offset=10, max_msg_nums=32, sys_flag=6,
        commit_offset=-1, suspend_timeout_millis=15000, subscription="*", sub_version=0)
    assert h.PullSysFlag.SUSPEND in h.PullSysFlag(header.sys_flag)
    assert h.PullSysFlag.COMMIT_OFFSET not in h.PullSysFlag(header.sys_flag)


@pytest.mark.parametrize("raw", ["1", "true", "True", "TRUE", " true ", 1, True, "yes"])
def test_truthy_booleans(raw: object) -> None:
    header = h.GetConsumerRunningInfoRequestHeader.from_ext_fields(
        {"consumerGroup": "g", "clientId": "c", "jstackEnable": raw})
    assert header.jstack_enable is True


@pytest.mark.parametrize("raw", ["0", "false", "False", 0, False, "no"])
def test_falsy_booleans(raw: object) -> None:
    header = h.ResetOffsetRequestHeader.from_ext_fields(
        {"topic": "t", "group": "g", "timestamp": "5", "isForce": raw})
    assert header.is_force is False


def test_bad_boolean_is_a_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError, match="isForce"):
        h.ResetOffsetRequestHeader.from_ext_fields(
            {"topic": "t", "group": "g", "timestamp": "5", "isForce": "maybe"})


@pytest.mark.parametrize("raw", ["abc", "1.5", [1], {"a": 1}, 2.5])
def test_bad_integer_is_a_protocol_error(raw: object) -> None:
    with pytest.raises(RemoteProtocolError, match="GetMaxOffsetRequestHeader.queueId"):
        h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": raw})


def test_integers_accept_whitespace_and_integral_floats() -> None:
    assert h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": " 7 "}).queue_id == 7
    assert h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": 7.0}).queue_id == 7


def test_missing_required_field_is_named() -> None:
    with pytest.raises(RemoteProtocolError, match="missing required field 'queueOffset'"):
        h.PullMessageRequestHeader.from_ext_fields({"consumerGroup": "G", "topic": "T",
                                                    "queueId": "0"})


def test_empty_string_number_counts_as_absent() -> None:
    base = {"msgId": "M", "queueId": "1", "queueOffset": "2"}
    assert h.SendMessageResponseHeader.from_ext_fields(base).transaction_id is None
    with pytest.raises(RemoteProtocolError, match="'queueOffset'"):
        h.SendMessageResponseHeader.from_ext_fields({**base, "queueOffset": ""})
    send = h.ConsumerSendMsgBackRequestHeader.from_ext_fields(
        {"offset": "1", "group": "g", "delayLevel": "3", "maxReconsumeTimes": ""})
    assert send.max_reconsume_times is None


def test_cpp_empty_group_counts_as_absent() -> None:
    header = h.UnregisterClientRequestHeader.from_ext_fields(
        {"clientID": "1-127.0.0.1@DEFAULT", "producerGroup": "", "consumerGroup": "G"})
    assert header.producer_group is None and header.consumer_group == "G"


def test_required_string_may_be_empty() -> None:
    assert h.GetRouteInfoRequestHeader.from_ext_fields({"topic": ""}).topic == ""


def test_string_fields_accept_numbers() -> None:
    header = h.GetRouteInfoRequestHeader.from_ext_fields({"topic": 123})
    assert header.topic == "123"


def test_not_a_mapping() -> None:
    with pytest.raises(RemoteProtocolError):
        h.GetRouteInfoRequestHeader.from_ext_fields(["topic"])


def test_to_ext_fields_writes_java_parsable_strings() -> None:
    header = h.RegisterBrokerRequestHeader(
        broker_name="broker-a", broker_addr="127.0.0.1:10911", cluster_name="C",
        ha_server_addr="127.0.0.1:10912", broker_id=0, compressed=True)
    assert header.to_ext_fields() == {
        "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C",
        "haServerAddr": "127.0.0.1:10912", "brokerId": "0", "compressed": "true",
        "bodyCrc32": "0"}


def test_none_fields_are_left_out() -> None:
    assert h.RegisterBrokerResponseHeader().to_ext_fields() == {}
    assert h.GetConsumeStatsRequestHeader("g").to_ext_fields() == {"consumerGroup": "g"}


SEND = h.SendMessageRequestHeader(
    producer_group="PG", topic="T", default_topic="TBW102", default_topic_queue_nums=4,
    queue_id=2, sys_flag=1, born_timestamp=1_700_000_000_000, flag=0,
    properties="TAGS\x01a\x02", reconsume_times=1, unit_mode=False, batch=True,
    max_reconsume_times=16, broker_name="broker-a")


def test_send_v1_round_trip() -> None:
    fields = SEND.to_ext_fields()
    assert fields["producerGroup"] == "PG" and fields["batch"] == "true"
    assert h.SendMessageRequestHeader.from_ext_fields(fields) == SEND


def test_send_v2_short_names() -> None:
    fields = SEND.to_v2_ext_fields()
    assert fields == {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "2", "f": "1",
                      "g": "1700000000000", "h": "0", "i": "TAGS\x01a\x02", "j": "1",
                      "k": "false", "l": "16", "m": "true", "n": "broker-a"}
    assert h.SendMessageRequestHeader.from_v2_ext_fields(fields) == SEND


def test_send_any_naming() -> None:
    assert h.SendMessageRequestHeader.from_any_ext_fields(SEND.to_v2_ext_fields()) == SEND
    assert h.SendMessageRequestHeader.from_any_ext_fields(SEND.to_ext_fields()) == SEND


def test_send_v2_missing_field_named_by_its_letter() -> None:
    fields = SEND.to_v2_ext_fields()
    del fields["e"]
    with pytest.raises(RemoteProtocolError, match="'e'"):
        h.SendMessageRequestHeader.from_v2_ext_fields(fields)


def test_headers_are_slotted_dataclasses() -> None:
    for cls in ALL_HEADERS:
        assert dataclasses.is_dataclass(cls)
        assert "__slots__" in cls.__dict__


# ----------------------------------------------------------------------------- ranges
def _send(**changes: str) -> dict[str, str]:
    fields = {"producerGroup": "g", "topic": "T", "defaultTopic": "TBW102",
              "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
              "bornTimestamp": "1700000000000", "flag": "0"}
    fields.update(changes)
    return fields


@pytest.mark.parametrize(("field", "value", "words"), [
    ("queueId", "2147483648", "int32"),
    ("queueId", "-2147483649", "int32"),
    ("flag", "99999999999", "int32"),
    ("bornTimestamp", "-1", "non-negative int64"),
    ("bornTimestamp", "9223372036854775808", "non-negative int64"),
    ("sysFlag", "2048", "MessageSysFlag"),
    ("sysFlag", "-1", "MessageSysFlag"),
    ("reconsumeTimes", "-5", "non-negative int32"),
    ("maxReconsumeTimes", "-2", "-1 or a non-negative int32"),
    ("defaultTopicQueueNums", "-1", "non-negative int32"),
])
def test_send_values_out_of_range_are_refused_naming_the_field(field: str, value: str,
                                                                words: str) -> None:
    with pytest.raises(RemoteProtocolError, match=f"SendMessageRequestHeader.{field}.*{words}"):
        h.SendMessageRequestHeader.from_ext_fields(_send(**{field: value}))
    v2 = h.SendMessageRequestHeader.from_ext_fields(_send()).to_v2_ext_fields()
    letter = h.SendMessageRequestHeader.V2_NAMES[
        next(k for k, v in h.SendMessageRequestHeader.wire_names().items() if v == field)]
    with pytest.raises(RemoteProtocolError, match=rf"{field} \('{letter}'\).*{words}"):
        h.SendMessageRequestHeader.from_v2_ext_fields({**v2, letter: value})


def test_range_boundaries_are_accepted() -> None:
    header = h.SendMessageRequestHeader.from_ext_fields(_send(
        queueId="-2147483648", flag="2147483647", bornTimestamp="9223372036854775807",
        sysFlag="2047", maxReconsumeTimes="-1"))
    assert (header.queue_id, header.flag, header.sys_flag) == (-(2**31), 2**31 - 1, 0x7FF)
    pull = h.PullMessageRequestHeader.from_ext_fields(
        {"consumerGroup": "G", "topic": "T", "queueId": "2147483647", "queueOffset": "-5",
         "maxMsgNums": "1", "sysFlag": "31", "commitOffset": "-1",
         "suspendTimeoutMillis": "0"})
    assert pull.commit_offset == -1 and pull.queue_offset == -5


@pytest.mark.parametrize(("cls", "fields", "words"), [
    (h.UpdateConsumerOffsetRequestHeader,
     {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "99999999999999999999"},
     "commitOffset: 99999999999999999999 is out of range"),
    (h.UpdateConsumerOffsetRequestHeader,
     {"consumerGroup": "G", "topic": "T", "queueId": "0", "commitOffset": "-1"}, "commitOffset"),
    (h.CreateTopicRequestHeader, {"topic": "T", "topicSysFlag": "4096"}, "topicSysFlag.*TopicSysFlag"),
    (h.CreateTopicRequestHeader, {"topic": "T", "perm": "16"}, "perm.*PermName"),
    (h.CreateTopicRequestHeader, {"topic": "T", "topicFilterType": "ANY"}, "topicFilterType"),
    (h.CreateTopicRequestHeader, {"topic": "T", "readQueueNums": "-1"}, "readQueueNums"),
    (h.PullMessageRequestHeader,
     {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "0",
      "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0"}, "maxMsgNums.*positive"),
    (h.PullMessageRequestHeader,
     {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
      "sysFlag": "32", "commitOffset": "0", "suspendTimeoutMillis": "0"}, "sysFlag.*PullSysFlag"),
    (h.PullMessageRequestHeader,
     {"consumerGroup": "G", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
      "sysFlag": "0", "commitOffset": "-2", "suspendTimeoutMillis": "0"}, "commitOffset"),
    (h.EndTransactionRequestHeader,
     {"producerGroup": "P", "tranStateTableOffset": "0", "commitLogOffset": "0",
      "commitOrRollback": "3", "msgId": "M"}, "commitOrRollback"),
    (h.RegisterBrokerRequestHeader,
     {"brokerName": "b", "brokerAddr": "h:1", "clusterName": "C", "haServerAddr": "h:2",
      "brokerId": "-1"}, "brokerId"),
    (h.GetMaxOffsetRequestHeader, {"topic": "T", "queueId": 1e30}, "queueId"),
])
def test_out_of_range_values_are_refused(cls: type[h.Header], fields: dict[str, str],
                                         words: str) -> None:
    with pytest.raises(RemoteProtocolError, match=words):
        cls.from_ext_fields(fields)
