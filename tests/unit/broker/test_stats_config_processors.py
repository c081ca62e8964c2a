"""StatsProcessor, BrokerConfigProcessor and ReplicaProcessor called directly on a real
broker: the runtime info's keys and counters, stats items, every group's consume stats; the
settings as RocketMQ's tools read them, changed live (and persisted) or refused with the
setting named; the delay offsets and HA status."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from processor_support import RunningBroker, json_body, running_broker, send_request

from orbitmq.broker.processor.admin_processor import VERSION_DESC, message_queue_key
from orbitmq.broker.runtime_config import overlay_path
from orbitmq.protocol.admin_headers import (
    GetConsumeStatsInBrokerHeader,
    ViewBrokerStatsDataRequestHeader,
)
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.properties_text import parse_properties_text

NAME = "broker-stats"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("stats"), auto_create_topic=False,
                              broker_name=NAME, broker_cluster_name="StatsCluster")


def _topic(broker: RunningBroker, name: str, queues: int = 1) -> None:
    broker.run(functools.partial(broker.controller.topics.update, TopicConfig(name, queues, queues)))


def _send(broker: RunningBroker, topic: str, n: int) -> None:
    for _ in range(n):
        resp = broker.answer(broker.processors.send.send_message, send_request(topic, b"12345"))
        assert resp.code == ResponseCode.SUCCESS, resp.remark


def _runtime(broker: RunningBroker) -> dict[str, str]:
    resp = broker.answer(broker.processors.stats.get_broker_runtime_info,
                         RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO))
    assert resp.code == ResponseCode.SUCCESS
    table: dict[str, str] = json_body(resp)["table"]
    return table


# -- StatsProcessor -------------------------------------------------------------------------------
def test_the_runtime_info_has_rocketmq_s_keys_as_text(broker: RunningBroker) -> None:
    table = _runtime(broker)
    for key in ("brokerVersionDesc", "bootTimestamp", "runtime", "putTps", "getFoundTps",
                "getMissTps", "getTotalTps", "getTransferedTps", "msgPutTotalTodayNow",
                "msgGetTotalTodayNow", "putMessageTimesTotal", "commitLogMinOffset",
                "commitLogMaxOffset", "commitLogDiskRatio", "commitLogDirCapacity",
                "dispatchBehindBytes", "remainHowManyDataToFlush", "earliestMessageTimeStamp",
                "sendThreadPoolQueueSize", "pullThreadPoolQueueSize", "topicCount",
                "consumerGroupCount", "producerGroupCount", "pullHeldCount", "brokerRole",
                "brokerId", "haServerAddr"):
        assert key in table, key
    assert all(isinstance(v, str) for v in table.values())
    assert table["brokerVersionDesc"] == VERSION_DESC
    assert (table["brokerName"], table["brokerAddr"]) == (NAME, broker.controller.address)
    assert table["brokerRole"] == "ASYNC_MASTER" and table["brokerId"] == "0"
    assert table["runtime"].startswith("[ 0 days, 0 hours, ")
    assert len(table["putTps"].split()) == 3
    assert table["topicCount"] == str(broker.run(lambda: len(broker.controller.topics.table)))


def test_the_runtime_info_counts_what_was_stored(broker: RunningBroker) -> None:
    _topic(broker, "StatsCount")
    before = _runtime(broker)
    _send(broker, "StatsCount", 3)
    after = _runtime(broker)
    assert int(after["msgPutTotalTodayNow"]) == int(before["msgPutTotalTodayNow"]) + 3
    assert int(after["putMessageTimesTotal"]) == int(before["putMessageTimesTotal"]) + 3
    assert int(after["commitLogMaxOffset"]) > int(before["commitLogMaxOffset"])
    assert after["commitLogMaxOffset"] == str(broker.run(broker.controller.store.max_physical_offset))


def _stats_data(broker: RunningBroker, name: str, key: str) -> RemotingCommand:
    header = ViewBrokerStatsDataRequestHeader(name, key)
    return broker.answer(broker.processors.stats.view_broker_stats_data,
                         RemotingCommand.request(RequestCode.VIEW_BROKER_STATS_DATA,
                                                 header.to_ext_fields()))


def test_a_topic_s_put_stats_over_the_last_minute_hour_and_day(broker: RunningBroker) -> None:
    _topic(broker, "StatsItem")
    _send(broker, "StatsItem", 4)
    resp = _stats_data(broker, "TOPIC_PUT_NUMS", "StatsItem")
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    body = json_body(resp)
    assert [body[w]["sum"] for w in ("statsMinute", "statsHour", "statsDay")] == [4, 4, 4]
    never = json_body(_stats_data(broker, "TOPIC_PUT_NUMS", "StatsNever"))
    assert never["statsMinute"] == {"sum": 0, "tps": 0.0, "avgpt": 0.0}


def test_an_unknown_stats_name_is_refused_invalid_parameter(broker: RunningBroker) -> None:
    resp = _stats_data(broker, "NO_SUCH_STATS", "x")
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark is not None and resp.remark.startswith(
        "statsName 'NO_SUCH_STATS' is not one of TOPIC_PUT_NUMS")


def test_every_group_s_consume_stats_and_the_total_lag(broker: RunningBroker) -> None:
    _topic(broker, "StatsLag")
    _send(broker, "StatsLag", 5)
    broker.run(lambda: broker.controller.offsets.commit("StatsLagG", "StatsLag", 0, 2))
    broker.settle()
    resp = broker.answer(broker.processors.stats.get_broker_consume_stats, RemotingCommand.request(
        RequestCode.GET_BROKER_CONSUME_STATS, GetConsumeStatsInBrokerHeader(False).to_ext_fields()))
    assert resp.code == ResponseCode.SUCCESS
    body = json_body(resp)
    assert body["brokerAddr"] == broker.controller.address
    [entry] = [e["StatsLagG"] for e in body["consumeStatsList"] if "StatsLagG" in e]
    row = entry[0]["offsetTable"][message_queue_key("StatsLag", NAME, 0)]
    assert (row["brokerOffset"], row["consumerOffset"], row["pullOffset"]) == (5, 2, 2)
    assert body["totalDiff"] >= 3
    # Orderly topics only: StatsLag is not one.
    ordered = broker.answer(broker.processors.stats.get_broker_consume_stats,
                            RemotingCommand.request(RequestCode.GET_BROKER_CONSUME_STATS,
                                                    GetConsumeStatsInBrokerHeader(True)
                                                    .to_ext_fields()))
    assert not [e for e in json_body(ordered)["consumeStatsList"] if "StatsLagG" in e]


# -- ReplicaProcessor -----------------------------------------------------------------------------
def test_the_delay_offsets_and_the_ha_status(broker: RunningBroker) -> None:
    delay = broker.answer(broker.processors.replica.get_all_delay_offset,
                          RemotingCommand.request(RequestCode.GET_ALL_DELAY_OFFSET))
    assert delay.code == ResponseCode.SUCCESS
    assert "offsetTable" in json_body(delay)
    ha = broker.answer(broker.processors.replica.get_broker_ha_status,
                       RemotingCommand.request(RequestCode.GET_BROKER_HA_STATUS))
    assert ha.code == ResponseCode.SUCCESS
    assert isinstance(json_body(ha), dict)


# -- BrokerConfigProcessor ------------------------------------------------------------------------
def _config(broker: RunningBroker) -> tuple[dict[str, str], dict[str, int]]:
    resp = broker.answer(broker.processors.broker_config.get_broker_config,
                         RemotingCommand.request(RequestCode.GET_BROKER_CONFIG))
    assert resp.code == ResponseCode.SUCCESS
    return parse_properties_text(resp.body), orjson.loads(resp.ext_fields["version"])


def _update(broker: RunningBroker, text: str) -> RemotingCommand:
    return broker.answer(broker.processors.broker_config.update_broker_config,
                         RemotingCommand.request(RequestCode.UPDATE_BROKER_CONFIG,
                                                 body=text.encode()))


def test_the_settings_under_rocketmq_s_names(broker: RunningBroker) -> None:
    settings, version = _config(broker)
    assert settings["brokerName"] == NAME
    assert settings["brokerClusterName"] == "StatsCluster"
    assert settings["autoCreateTopicEnable"] == "false"
    assert settings["brokerPermission"] == "6"
    assert set(version) == {"timestamp", "counter"}


def test_a_runtime_setting_changes_live_and_persists(broker: RunningBroker) -> None:
    _, before = _config(broker)
    resp = _update(broker, "maxMsgsNumBatch=10\n")
    assert (resp.code, resp.remark) == (ResponseCode.SUCCESS, None)
    assert broker.controller.config.max_msgs_num_batch == 10
    settings, after = _config(broker)
    assert settings["maxMsgsNumBatch"] == "10"
    assert after["counter"] == before["counter"] + 1
    assert "max_msgs_num_batch = 10" in Path(overlay_path(broker.controller.config)).read_text()
    # The same value again changes nothing.
    assert _update(broker, "maxMsgsNumBatch=10").code == ResponseCode.SUCCESS
    assert _config(broker)[1]["counter"] == after["counter"]


@pytest.mark.parametrize(("text", "says"), [
    ("maxMsgsNumBatch=0", "max_msgs_num_batch"),
    ("maxMsgsNumBatch=lots", "max_msgs_num_batch"),
    ("noSuchSetting=1", "unknown setting 'noSuchSetting'"),
    ("listenPort=1234", "cannot change while the broker runs"),
    ("", "no setting to change in the body"),
])
def test_a_refused_change_changes_nothing(broker: RunningBroker, text: str, says: str) -> None:
    settings, version = _config(broker)
    resp = _update(broker, text)
    assert resp.code == ResponseCode.INVALID_PARAMETER
    assert resp.remark is not None and says in resp.remark, resp.remark
    assert _config(broker) == (settings, version)


def test_a_read_only_broker_refuses_sends_until_writable_again(broker: RunningBroker) -> None:
    _topic(broker, "StatsPerm")
    try:
        assert _update(broker, "brokerPermission=4").code == ResponseCode.SUCCESS
        refused = broker.answer(broker.processors.send.send_message, send_request("StatsPerm"))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == f"the broker[{NAME}] sending message is forbidden"
    finally:
        assert _update(broker, "brokerPermission=6").code == ResponseCode.SUCCESS
    assert broker.answer(broker.processors.send.send_message,
                         send_request("StatsPerm")).code == ResponseCode.SUCCESS
