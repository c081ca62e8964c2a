"""Delay levels, retries and dead letters on a real broker (raw remoting requests, no SDK).

Short levels ("1s 1s 1s 2s 4s") keep the waits small. Delays are checked on the stored
timestamps (the delivered copy is stored at least the level's delay after the parked one), so the
checks do not depend on how fast the test itself polls; waits are bounded polls of a condition.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from click.testing import CliRunner
from test_broker_support import BrokerHarness, broker_config

from orbitmq.cli.main import cli
from orbitmq.config import BrokerConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from orbitmq.protocol.message import MessageExt
from orbitmq.store.metadata_db import METADATA_DB_FILE, MetadataDB, export_tables

T = TypeVar("T")

LEVELS = "1s 1s 1s 2s 4s"
LEVEL_MS = [1000, 1000, 1000, 2000, 4000]
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
WAIT_S = 15.0
UNIQ = "0A0000010000000000000000000000AB"


def delay_config(store: Path, **overrides: Any) -> BrokerConfig:
    cfg = broker_config(store, **overrides)
    return dataclasses.replace(cfg, store=dataclasses.replace(cfg.store, message_delay_level=LEVELS))


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(delay_config(tmp_path))
    try:
        yield h
    finally:
        h.close()


def wait_for(check: Callable[[], T], what: str, timeout: float = WAIT_S) -> T:
    """``check()``'s first truthy value, polled until ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def user_props(**extra: str) -> dict[str, str]:
    return {"UNIQ_KEY": UNIQ, "KEYS": "order-1", "TAGS": "created", "color": "blue", **extra}


def send_back(h: BrokerHarness, msg: MessageExt, group: str, delay_level: int = 0,
              max_reconsume_times: int | None = None) -> RemotingCommand:
    header = ConsumerSendMsgBackRequestHeader(
        offset=msg.commit_log_offset, group=group, delay_level=delay_level,
        origin_msg_id=msg.msg_id, origin_topic=msg.topic, max_reconsume_times=max_reconsume_times)
    return h.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())


def set_group(h: BrokerHarness, group: str, **fields: Any) -> None:
    body = orjson.dumps({"groupName": group, **fields})
    r = h.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
    assert r.code == ResponseCode.SUCCESS, r.remark


def only(h: BrokerHarness, topic: str, queue_id: int = 0) -> MessageExt:
    msgs = h.pull_all(topic, queue_id)
    assert len(msgs) == 1, [(m.topic, m.properties) for m in msgs]
    return msgs[0]


def delivered(h: BrokerHarness, topic: str, queue_id: int = 0) -> list[MessageExt]:
    return wait_for(lambda: h.pull_all(topic, queue_id), f"a message in {topic}/{queue_id}")


# -- delay levels -----------------------------------------------------------------------------------
def test_delayed_message_is_held_for_its_level_then_delivered_intact(harness: BrokerHarness) -> None:
    h = harness
    r = h.send_ok("DelayTopic", b"later", queue_id=1, props=user_props(DELAY="4"))
    assert h.pull_all("DelayTopic", 1) == []  # not visible before its level's delay
    parked = only(h, SCHEDULE, 3)
    assert parked.properties["REAL_TOPIC"] == "DelayTopic"
    assert parked.properties["REAL_QID"] == "1"
    assert r.ext_fields["queueId"] == "1"  # the producer is told the queue it asked for

    [msg] = delivered(h, "DelayTopic", 1)
    assert msg.store_timestamp - parked.store_timestamp >= LEVEL_MS[3]
    assert msg.body == b"later" and msg.tags == "created" and msg.keys == ["order-1"]
    assert msg.properties["UNIQ_KEY"] == UNIQ and msg.msg_id == UNIQ
    assert msg.properties["color"] == "blue" and "DELAY" not in msg.properties
    # The tag filter works on the delivered copy (its queue entry has the tag's hash again).
    assert [m.body for m in h.pull_all("DelayTopic", 1, expression="created")] == [b"later"]
    assert h.pull_all("DelayTopic", 1, expression="paid") == []


def test_level_above_the_highest_counts_as_the_highest(harness: BrokerHarness) -> None:
    harness.send_ok("DelayClamp", b"x", props={"DELAY": "99"})
    parked = only(harness, SCHEDULE, len(LEVELS.split()) - 1)
    assert parked.properties["DELAY"] == str(len(LEVELS.split()))


def test_delay_zero_or_garbage_is_stored_at_once(harness: BrokerHarness) -> None:
    harness.send_ok("DelayNone", b"a", props={"DELAY": "0"})
    harness.send_ok("DelayNone", b"b", props={"DELAY": "soon"})
    assert [m.body for m in harness.pull_all("DelayNone", 0)] == [b"a", b"b"]


def test_delay_survives_a_broker_restart_without_loss_or_duplicate(harness: BrokerHarness) -> None:
    h = harness
    sent_at = time.monotonic()
    h.send_ok("DelayRestart", b"slow", props=user_props(DELAY="5"))   # 4 s
    h.send_ok("DelayRestart", b"quick", props=user_props(DELAY="1"))  # 1 s
    parked = only(h, SCHEDULE, 4)
    h.restart()
    assert time.monotonic() - sent_at < LEVEL_MS[4] / 1000, "restart too slow for the test"
    assert [m.body for m in h.pull_all("DelayRestart", 0)] in ([], [b"quick"])

    msgs = wait_for(lambda: [m for m in h.pull_all("DelayRestart", 0) if m.body == b"slow"],
                    "the 4 s message after the restart")
    assert msgs[0].store_timestamp - parked.store_timestamp >= LEVEL_MS[4]
    # The level's offset is saved once its delivery is durable, so a moment after it is pullable.
    db_path = str(Path(h.config.store.store_path) / "config" / METADATA_DB_FILE)

    def stored() -> dict[str, int]:
        with MetadataDB(db_path, read_only=True) as db:
            return dict(export_tables(db, ["delayOffsets"])["delayOffsets"]["offsetTable"])

    wait_for(lambda: stored() == {"1": 1, "5": 1}, "both levels' offsets saved")

    # A second restart finds both levels done: nothing is delivered twice.
    h.restart()
    assert h.on_loop(lambda: dict(h.broker.schedule.offsets)) == {1: 1, 5: 1}
    h.send_ok("DelayRestart", b"after", props={"DELAY": "1"})
    wait_for(lambda: len(h.pull_all("DelayRestart", 0)) >= 3, "the message sent after restart")
    assert sorted(m.body for m in h.pull_all("DelayRestart", 0)) == [b"after", b"quick", b"slow"]


def test_messages_of_a_level_removed_by_a_restart_are_still_delivered(tmp_path: Path) -> None:
    h = BrokerHarness(delay_config(tmp_path))
    try:
        h.send_ok("DelayShrink", b"parked", props={"DELAY": "4"})  # 2 s
        parked = only(h, SCHEDULE, 3)
        h.config = dataclasses.replace(h.config, store=dataclasses.replace(
            h.config.store, message_delay_level="1s 1s"))
        h.restart()
        [msg] = delivered(h, "DelayShrink")
        assert msg.store_timestamp - parked.store_timestamp >= LEVEL_MS[3]
    finally:
        h.close()


def test_bad_delay_levels_stop_the_broker_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'5x' is not a delay"):
        dataclasses.replace(delay_config(tmp_path).store, message_delay_level="1s 5x")
    result = CliRunner().invoke(cli, ["broker", "--namesrv", "127.0.0.1:1", "--print-config",
                                      "--message-delay-level", "1s 5x 10s"])
    assert result.exit_code == 2, result.output
    assert "message_delay_level = '1s 5x 10s' is refused ('5x' is not a delay)" in result.output
    ok = CliRunner().invoke(cli, ["broker", "--namesrv", "127.0.0.1:1", "--print-config",
                                  "--message-delay-level", "100s 2m 3h 1d"])
    assert ok.exit_code == 0 and 'message_delay_level = "100s 2m 3h 1d"' in ok.output


# -- retries ------------------------------------------------------------------------------------------
def test_send_back_retries_with_level_3_plus_reconsume_times(harness: BrokerHarness) -> None:
    h, group = harness, "retry-group"
    h.send_ok("RetryTopic", b"fail me", props=user_props())
    original = only(h, "RetryTopic")

    assert send_back(h, original, group).code == ResponseCode.SUCCESS
    parked = only(h, SCHEDULE, 2)  # level 3 + 0
    assert parked.properties["REAL_TOPIC"] == f"%RETRY%{group}"
    [first] = delivered(h, f"%RETRY%{group}")
    assert first.store_timestamp - parked.store_timestamp >= LEVEL_MS[2]
    assert first.reconsume_times == 1
    assert first.properties["RETRY_TOPIC"] == "RetryTopic"
    assert first.properties["ORIGIN_MESSAGE_ID"] == UNIQ
    assert first.msg_id == UNIQ and first.body == b"fail me" and first.tags == "created"
    tc = h.on_loop(lambda: h.broker.topics.get(f"%RETRY%{group}"))
    assert tc is not None and tc.write_queue_nums == 1

    # The retried copy fails again: level 3 + 1, reconsume times 2, the first topic kept.
    assert send_back(h, first, group).code == ResponseCode.SUCCESS
    parked2 = only(h, SCHEDULE, 3)
    second = wait_for(lambda: h.pull_all(f"%RETRY%{group}", 0)[1:], "the second retry")[0]
    assert second.store_timestamp - parked2.store_timestamp >= LEVEL_MS[3]
    assert second.reconsume_times == 2
    assert second.properties["RETRY_TOPIC"] == "RetryTopic"
    assert second.properties["ORIGIN_MESSAGE_ID"] == UNIQ


def test_send_back_with_a_delay_level_of_its_own(harness: BrokerHarness) -> None:
    harness.send_ok("RetryOwnLevel", b"x", props=user_props())
    original = only(harness, "RetryOwnLevel")
    assert send_back(harness, original, "own-level", delay_level=5).code == ResponseCode.SUCCESS
    assert only(harness, SCHEDULE, 4).properties["REAL_TOPIC"] == "%RETRY%own-level"


def test_message_past_retry_max_times_becomes_a_dead_letter(harness: BrokerHarness) -> None:
    h, group = harness, "dlq-group"
    set_group(h, group, retryMaxTimes=1)
    h.send_ok("DlqTopic", b"poison", props=user_props())
    original = only(h, "DlqTopic")
    assert send_back(h, original, group).code == ResponseCode.SUCCESS
    [retried] = delivered(h, f"%RETRY%{group}")
    assert h.on_loop(lambda: h.broker.topics.get(f"%DLQ%{group}")) is None

    assert send_back(h, retried, group).code == ResponseCode.SUCCESS  # 1 retry done: DLQ
    dead = only(h, f"%DLQ%{group}")  # at once, no delay level
    assert dead.reconsume_times == 2 and dead.body == b"poison"
    assert dead.properties["RETRY_TOPIC"] == "DlqTopic"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == UNIQ and "DELAY" not in dead.properties
    tc = h.on_loop(lambda: h.broker.topics.get(f"%DLQ%{group}"))
    assert tc is not None and tc.write_queue_nums == 1 and tc.perm == 6


def test_request_max_reconsume_times_lowers_the_group_limit(harness: BrokerHarness) -> None:
    h = harness
    h.send_ok("DlqLimit", b"x", props=user_props())
    original = only(h, "DlqLimit")
    # The group allows 16; the client asks for 0 retries: a dead letter at once.
    assert send_back(h, original, "limit-group", max_reconsume_times=0).code == ResponseCode.SUCCESS
    assert only(h, "%DLQ%limit-group").reconsume_times == 1
    # A client asking for more than the group allows is held to the group's limit.
    set_group(h, "cap-group", retryMaxTimes=0)
    assert send_back(h, original, "cap-group", max_reconsume_times=16).code == ResponseCode.SUCCESS
    assert only(h, "%DLQ%cap-group").reconsume_times == 1


def test_negative_delay_level_goes_straight_to_the_dlq(harness: BrokerHarness) -> None:
    harness.send_ok("DlqDirect", b"x", props=user_props())
    original = only(harness, "DlqDirect")
    assert send_back(harness, original, "direct-group", delay_level=-1).code == ResponseCode.SUCCESS
    assert only(harness, "%DLQ%direct-group").properties["RETRY_TOPIC"] == "DlqDirect"


def test_send_back_of_an_unknown_offset_is_refused(harness: BrokerHarness) -> None:
    harness.send_ok("BackBad", b"x")
    bogus = MessageExt("BackBad", b"", commit_log_offset=10**9)
    r = send_back(harness, bogus, "bad-group")
    assert r.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (r.remark or "")


def test_plain_send_to_a_retry_topic_past_the_limit_goes_to_the_dlq(harness: BrokerHarness) -> None:
    """Java's fallback when CONSUMER_SEND_MSG_BACK fails: the consumer sends to %RETRY% itself."""
    h, group = harness, "fallback-group"
    set_group(h, group, retryMaxTimes=2)

    def fallback_send(reconsume_times: int, body: bytes) -> None:
        header = h.send_header(f"%RETRY%{group}", 0, user_props(DELAY="1", RETRY_TOPIC="Orig"))
        header.reconsume_times = reconsume_times
        r = h.invoke(RequestCode.SEND_MESSAGE, header.to_ext_fields(), body)
        assert r.code == ResponseCode.SUCCESS, r.remark

    fallback_send(2, b"still retried")
    assert only(h, SCHEDULE, 0).properties["REAL_TOPIC"] == f"%RETRY%{group}"
    fallback_send(3, b"dead")
    dead = only(h, f"%DLQ%{group}")
    assert dead.body == b"dead" and "DELAY" not in dead.properties
    delivered(h, f"%RETRY%{group}")


# -- subscription groups ------------------------------------------------------------------------------
def test_consume_disabled_group_is_refused_with_no_permission(harness: BrokerHarness) -> None:
    h = harness
    h.send_ok("GateTopic", b"x")
    set_group(h, "gated", consumeEnable=False)
    r, _ = h.pull("GateTopic", 0, 0, group="gated")
    assert r.code == ResponseCode.NO_PERMISSION == 16
    assert "consumption disabled" in (r.remark or "")
    h.restart()  # the setting is persisted in the metadata store
    r, _ = h.pull("GateTopic", 0, 0, group="gated")
    assert r.code == ResponseCode.NO_PERMISSION
    set_group(h, "gated", consumeEnable=True)
    r, msgs = h.pull("GateTopic", 0, 0, group="gated")
    assert r.code == ResponseCode.SUCCESS and [m.body for m in msgs] == [b"x"]
