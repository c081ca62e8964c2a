"""Pure parts of issue 17's operations work: histograms, the traffic counters and their windows,
Java properties text, RocketMQ's setting names and the runtime overlay (no sockets)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import pytest

from orbitmq.broker.observability.broker_stats import BrokerStats
from orbitmq.broker.processor.broker_config_processor import permitted_wrapper
from orbitmq.broker.processor.stats_processor import format_runtime
from orbitmq.broker.runtime_config import (
    RUNTIME_FIELDS,
    changes_from_properties,
    java_properties,
    load_overlay,
    resolve_name,
    save_overlay,
)
from orbitmq.config import BrokerConfig, ConfigError, StoreConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.metrics.buckets import Buckets
from orbitmq.metrics.rpc import RPC_SERIES_MAX, RpcLatency, request_code_label, response_code_label
from orbitmq.protocol.bodies import TopicConfig, TopicConfigSerializeWrapper
from orbitmq.protocol.properties_text import (
    PROPERTIES_TEXT_MAX_BYTES,
    format_properties_text,
    parse_properties_text,
)
from orbitmq.store.status import AppendMessageResult, GetMessageResult, GetMessageStatus


# -- histograms -----------------------------------------------------------------------------
def test_buckets_count_by_upper_bound_with_weights() -> None:
    b = Buckets((1.0, 10.0))
    b.observe(0.5)
    b.observe(1.0)  # le="1" includes 1
    b.observe(5.0, 3)
    b.observe(50.0)
    assert b.cumulative() == [(1.0, 2), (10.0, 5), (float("inf"), 6)]
    assert (b.total, b.sum) == (6, 0.5 + 1.0 + 15.0 + 50.0)
    with pytest.raises(ValueError):
        Buckets((10.0, 1.0))


def test_rpc_labels_and_series_bound() -> None:
    assert request_code_label(310) == "send_message_v2"
    assert request_code_label(9100) == "list_pending_transactions"
    assert request_code_label(4242) == "4242"
    assert (response_code_label(0), response_code_label(None), response_code_label(77)) == \
        ("success", "unknown", "77")
    rpc = RpcLatency(4)
    rpc.record(10, 0, 0.002)
    assert rpc.series[(10, 0)].total == 4  # one timing stands for four requests
    for code in range(RPC_SERIES_MAX + 5):
        rpc.record(code, 1, 0.001)
    assert len(rpc.series) == RPC_SERIES_MAX and rpc.dropped >= 5


# -- traffic counters -----------------------------------------------------------------------
class FakeClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def _append(n: int, size: int) -> AppendMessageResult:
    return AppendMessageResult(0, size, 0, 0, n, [0] * n, b"\x7f\x00\x00\x01\x00\x00\x27\x0f")


def test_sends_and_pulls_are_counted_once_per_request() -> None:
    stats = BrokerStats("C", FakeClock(1_700_000_000_000))
    stats.on_send("T", _append(1, 300), None)
    stats.on_send("T", _append(4, 1200), None)  # a batch: one call
    stats.on_send("T", None, None)  # refused: nothing stored
    c = stats.put["normal"]["T"]
    assert (c.msgs, c.size, c.times, c.sizes.total) == (5, 1500, 2, 5)
    found = GetMessageResult(GetMessageStatus.FOUND, 9, 0, 9, message_count=3, total_size=900)
    stats.on_get("G", "T", 1, found)
    stats.on_get("G", "T", 1, GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, 9, 0, 9))
    assert (stats.get[("T", "G")].msgs, stats.get_found, stats.get_miss) == (3, 1, 1)
    assert stats.pull_offsets[("G", "T", 1)] == 9
    assert stats.item("TOPIC_PUT_NUMS", "T") == (5, 2)
    assert stats.item("GROUP_GET_SIZE", "T@G") == (900, 1)
    assert stats.item("BROKER_PUT_NUMS", "C") == (5, 2)
    with pytest.raises(KeyError):
        stats.item("NOPE", "T")


def test_windows_and_rates_follow_the_clock() -> None:
    clock = FakeClock(1_700_000_000_000)
    stats = BrokerStats("C", clock)
    for _ in range(70):  # 70 s of one send a second
        stats.on_send("T", _append(1, 100), None)
        clock.ms += 1000
        stats.tick()
    minute, hour, day = stats.window("TOPIC_PUT_NUMS", "T")
    assert (hour.sum, day.sum) == (70, 70)
    assert 55 <= minute.sum <= 61 and minute.avgpt == 1.0
    assert 0.9 <= minute.tps <= 1.1
    ten_s, one_min, ten_min = stats.rates(1)
    assert 0.9 <= ten_s <= 1.1 and 0.9 <= one_min <= 1.1 and 0.9 <= ten_min <= 1.1
    assert stats.rates(2) == (0.0, 0.0, 0.0)


def test_midnight_moves_the_morning_totals() -> None:
    noon = int(time.mktime(time.strptime("2024-03-01 12:00:00", "%Y-%m-%d %H:%M:%S")) * 1000)
    clock = FakeClock(noon)
    stats = BrokerStats("C", clock)
    stats.on_send("T", _append(2, 10), None)
    clock.ms += 13 * 3_600_000  # past midnight
    stats.tick()
    assert (stats.put_today_morning, stats.put_yesterday_morning) == (2, 0)


def test_runtime_text_is_rocketmqs() -> None:
    assert format_runtime(90_061_000) == "[ 1 days, 1 hours, 1 minutes, 1 seconds ]"


# -- properties text ------------------------------------------------------------------------
def test_properties_text_round_trips_what_java_writes_and_reads() -> None:
    entries = {"a b": "x=y", "deleteWhen": "04;05", "k": " lead\\", "u": "é\nz", "#x": "!"}
    assert parse_properties_text(format_properties_text(entries)) == entries
    text = b"# comment\n! too\n key : v1 \\\n   cont\nk2 v2\nk3=\nk4=\\u0041\n"
    assert parse_properties_text(text) == {"key": "v1 cont", "k2": "v2", "k3": "", "k4": "A"}


@pytest.mark.parametrize(("text", "words"), [
    (b"a=\\u12", "malformed"),
    (b"=x", "no key"),
    (b"a=" + b"x" * PROPERTIES_TEXT_MAX_BYTES, "at most"),
])
def test_properties_text_refusals(text: bytes, words: str) -> None:
    with pytest.raises(RemoteProtocolError, match=words):
        parse_properties_text(text)


# -- settings under RocketMQ's names --------------------------------------------------------
def test_settings_shown_under_rocketmq_names_and_units() -> None:
    props = java_properties(BrokerConfig())
    assert props["brokerPermission"] == "6" and props["brokerIP1"] == ""
    assert props["diskMaxUsedSpaceRatio"] == "75" and props["fileReservedTime"] == "72"
    assert props["storePathRootDir"] == "./data/broker-a" and props["flushDiskType"] == "ASYNC_FLUSH"
    assert props["autoCreateTopicEnable"] == "true" and props["metricsExporterType"] == "DISABLE"
    assert list(props) == sorted(props)
    for name in ("brokerPermission", "broker_permission", "store.delete_when", "delete_when"):
        assert resolve_name(name) is not None
    assert resolve_name("nope") is None


def test_runtime_changes_are_checked_and_converted() -> None:
    cfg = BrokerConfig()
    new = changes_from_properties(cfg, {"diskMaxUsedSpaceRatio": "80", "broker_permission": "4",
                                        "fileReservedTime": "48"})
    assert (new.store.disk_max_used_space_ratio, new.broker_permission,
            new.store.file_reserved_time_hours) == (0.8, 4, 48.0)
    for entries, words in (({"nope": "1"}, "unknown setting"),
                           ({"listenPort": "1"}, "cannot change while the broker runs"),
                           ({"brokerPermission": "5"}, "broker_permission"),
                           ({"diskMaxUsedSpaceRatio": "x"}, "percentage"),
                           ({"deleteWhen": "25"}, "hours 0-23")):
        with pytest.raises(ConfigError, match=words):
            changes_from_properties(cfg, entries)
    assert all(resolve_name(p) == p for p in RUNTIME_FIELDS)


def test_overlay_persists_and_is_applied_at_start(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    cfg = BrokerConfig(store=StoreConfig(store_path=str(tmp_path)))
    assert load_overlay(cfg) is cfg  # no overlay yet
    new = changes_from_properties(cfg, {"brokerPermission": "4", "deleteWhen": "03"})
    save_overlay(new, {"broker_permission", "store.delete_when"})
    with caplog.at_level(logging.WARNING, logger="orbitmq.broker.runtime_config"):
        loaded = load_overlay(cfg)
    assert (loaded.broker_permission, loaded.store.delete_when) == (4, "03")
    assert "overrides the configured 6" in caplog.text
    again = changes_from_properties(loaded, {"transactionCheckMax": "3"})
    save_overlay(again, {"transaction_check_max"})  # earlier lines are kept
    assert load_overlay(cfg).broker_permission == 4 and load_overlay(cfg).transaction_check_max == 3
    (tmp_path / "config" / "broker_runtime.toml").write_text("listen_port = 5\n")
    with pytest.raises(ConfigError, match="may not be set there"):
        load_overlay(cfg)
    (tmp_path / "config" / "broker_runtime.toml").write_text("broker_permission = 9\n")
    with pytest.raises(ConfigError, match="broker_runtime.toml"):
        load_overlay(cfg)


def test_registration_narrows_topic_permissions_to_the_brokers() -> None:
    wrapper = TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4, perm=6)})
    assert permitted_wrapper(wrapper, BrokerConfig()) is wrapper
    read_only = permitted_wrapper(wrapper, dataclasses.replace(BrokerConfig(), broker_permission=4))
    assert read_only.topic_config_table["T"].perm == 4
    assert wrapper.topic_config_table["T"].perm == 6  # the broker's own table is untouched
