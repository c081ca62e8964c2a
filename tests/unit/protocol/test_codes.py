"""The protocol numbers are RocketMQ's: spot-check them against RocketMQ's values and the contracts."""

from __future__ import annotations

import pytest

from orbitmq.protocol import LanguageCode, RequestCode, ResponseCode, SerializeType
from orbitmq.protocol.codes import ORBITMQ_CODE_MAX, ORBITMQ_CODE_MIN


@pytest.mark.parametrize(
    ("member", "value"),
    [
        (RequestCode.SEND_MESSAGE, 10), (RequestCode.PULL_MESSAGE, 11),
        (RequestCode.QUERY_MESSAGE, 12), (RequestCode.QUERY_CONSUMER_OFFSET, 14),
        (RequestCode.UPDATE_CONSUMER_OFFSET, 15), (RequestCode.UPDATE_AND_CREATE_TOPIC, 17),
        (RequestCode.GET_ALL_TOPIC_CONFIG, 21), (RequestCode.GET_BROKER_RUNTIME_INFO, 28),
        (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 29), (RequestCode.GET_MAX_OFFSET, 30),
        (RequestCode.GET_MIN_OFFSET, 31), (RequestCode.GET_EARLIEST_MSG_STORETIME, 32),
        (RequestCode.VIEW_MESSAGE_BY_ID, 33), (RequestCode.HEART_BEAT, 34),
        (RequestCode.UNREGISTER_CLIENT, 35), (RequestCode.CONSUMER_SEND_MSG_BACK, 36),
        (RequestCode.END_TRANSACTION, 37), (RequestCode.GET_CONSUMER_LIST_BY_GROUP, 38),
        (RequestCode.CHECK_TRANSACTION_STATE, 39), (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 40),
        (RequestCode.LOCK_BATCH_MQ, 41), (RequestCode.UNLOCK_BATCH_MQ, 42),
        (RequestCode.GET_ALL_CONSUMER_OFFSET, 43), (RequestCode.REGISTER_BROKER, 103),
        (RequestCode.UNREGISTER_BROKER, 104), (RequestCode.GET_ROUTEINFO_BY_TOPIC, 105),
        (RequestCode.GET_BROKER_CLUSTER_INFO, 106),
        (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200),
        (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, 201), (RequestCode.GET_TOPIC_STATS_INFO, 202),
        (RequestCode.GET_CONSUMER_CONNECTION_LIST, 203),
        (RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 206),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, 207), (RequestCode.GET_CONSUME_STATS, 208),
        (RequestCode.DELETE_TOPIC_IN_BROKER, 215), (RequestCode.DELETE_TOPIC_IN_NAMESRV, 216),
        (RequestCode.RESET_CONSUMER_CLIENT_OFFSET, 220),
        (RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, 221),
        (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 222), (RequestCode.GET_TOPICS_BY_CLUSTER, 224),
        (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, 300), (RequestCode.GET_CONSUMER_RUNNING_INFO, 307),
        (RequestCode.CONSUME_MESSAGE_DIRECTLY, 309), (RequestCode.SEND_MESSAGE_V2, 310),
        (RequestCode.SEND_BATCH_MESSAGE, 320),
    ],
)
def test_request_codes_match_rocketmq(member: RequestCode, value: int) -> None:
    assert member == value


@pytest.mark.parametrize(
    ("member", "value"),
    [
        (ResponseCode.SUCCESS, 0), (ResponseCode.SYSTEM_ERROR, 1), (ResponseCode.SYSTEM_BUSY, 2),
        (ResponseCode.NOT_SUPPORTED, 3), (ResponseCode.FLUSH_DISK_TIMEOUT, 10),
        (ResponseCode.SLAVE_NOT_AVAILABLE, 11), (ResponseCode.FLUSH_SLAVE_TIMEOUT, 12),
        (ResponseCode.MESSAGE_ILLEGAL, 13), (ResponseCode.SERVICE_NOT_AVAILABLE, 14),
        (ResponseCode.NO_PERMISSION, 16), (ResponseCode.TOPIC_NOT_EXIST, 17),
        (ResponseCode.PULL_NOT_FOUND, 19), (ResponseCode.PULL_RETRY_IMMEDIATELY, 20),
        (ResponseCode.PULL_OFFSET_MOVED, 21), (ResponseCode.QUERY_NOT_FOUND, 22),
        (ResponseCode.SUBSCRIPTION_NOT_EXIST, 24), (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, 26),
        (ResponseCode.TRANSACTION_SHOULD_COMMIT, 200),
        (ResponseCode.TRANSACTION_SHOULD_ROLLBACK, 201),
        (ResponseCode.TRANSACTION_STATE_UNKNOW, 202), (ResponseCode.FLOW_CONTROL, 215),
    ],
)
def test_response_codes_match_rocketmq(member: ResponseCode, value: int) -> None:
    assert member == value


def test_java_name_of_not_supported_is_an_alias() -> None:
    assert ResponseCode.REQUEST_CODE_NOT_SUPPORTED is ResponseCode.NOT_SUPPORTED
    assert ResponseCode(3).name == "NOT_SUPPORTED"


def test_language_codes_in_order() -> None:
    names = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP",
             "GO", "PHP", "OMS", "RUST"]
    assert [m.name for m in LanguageCode] == names
    assert [m.value for m in LanguageCode] == list(range(13))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("CPP", LanguageCode.CPP), ("java", LanguageCode.JAVA), (9, LanguageCode.GO),
     ("COBOL", LanguageCode.OTHER), (200, LanguageCode.OTHER), (None, LanguageCode.OTHER),
     (True, LanguageCode.OTHER), (["JAVA"], LanguageCode.OTHER)],
)
def test_language_parse_is_lenient(raw: object, expected: LanguageCode) -> None:
    assert LanguageCode.parse(raw) is expected


def test_serialize_types() -> None:
    assert SerializeType.JSON == 0
    assert SerializeType.ROCKETMQ == 1


def test_orbitmq_private_code_range_is_unused_by_rocketmq() -> None:
    assert all(code < ORBITMQ_CODE_MIN for code in RequestCode)
    assert (ORBITMQ_CODE_MIN, ORBITMQ_CODE_MAX) == (9000, 9999)
