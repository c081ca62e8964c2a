"""The push consumer's pieces that need no server: settings, subscriptions, the local offset file,
the listener runner's answers, and the pull request it builds."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import orjson
import pytest

from orbitmq.client.consumer.consume_types import (
    UNLIMITED_RECONSUME_TIMES,
    ConsumeContext,
    ConsumeFrom,
    ConsumeResult,
    ListenerRunner,
    PushConsumerConfig,
    restore_retry_topic,
)
from orbitmq.client.consumer.offset_store import LocalOffsetStore
from orbitmq.client.consumer.pull_service import build_push_pull_request
from orbitmq.client.consumer.push_consumer import AsyncPushConsumer, build_subscription
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import ConsumeFromWhere, MessageModel, MessageQueue
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.message import MessageExt, PropertyKey, java_string_hash
from orbitmq.transport.loop import run

MQ = MessageQueue("T", "broker-a", 3)


def test_config_defaults_follow_rocketmq() -> None:
    cfg = PushConsumerConfig("g")
    assert cfg.consume_thread_nums == 20 and cfg.pull_batch_size == 32
    assert cfg.consume_message_batch_max_size == 1
    assert (cfg.pull_threshold_for_queue, cfg.pull_threshold_size_for_queue_mib,
            cfg.consume_concurrently_max_span) == (1000, 100, 2000)
    assert cfg.persist_consumer_offset_interval_ms == 5000 and cfg.rebalance_interval_ms == 10_000
    assert cfg.pull_suspend_time_ms == 15_000 and cfg.pull_timeout_ms == 30_000
    assert cfg.effective_max_reconsume_times == 16
    assert PushConsumerConfig("g", orderly=True).effective_max_reconsume_times == UNLIMITED_RECONSUME_TIMES
    assert PushConsumerConfig("g", orderly=True, max_reconsume_times=3).effective_max_reconsume_times == 3
    assert ConsumeFrom.TIMESTAMP.where is ConsumeFromWhere.CONSUME_FROM_TIMESTAMP


@pytest.mark.parametrize("bad", [{"pull_batch_size": 0}, {"pull_batch_size": 2000},
                                 {"consume_thread_nums": 0}, {"max_reconsume_times": -2},
                                 {"pull_timeout_ms": 10_000}, {"lock_renew_interval_ms": 0},
                                 {"lock_max_live_time_ms": -1},
                                 {"pull_delay_on_exception_ms": -1},
                                 {"await_termination_ms": -5},
                                 {"suspend_current_queue_time_ms": -1}])
def test_bad_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ClientError):
        PushConsumerConfig("g", **bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("old, new", [
    ("persist_consumer_offset_interval", "persist_consumer_offset_interval_ms"),
    ("rebalance_interval", "rebalance_interval_ms"), ("lock_renew_interval", "lock_renew_interval_ms"),
    ("lock_max_live_time", "lock_max_live_time_ms"), ("pull_suspend_time", "pull_suspend_time_ms"),
    ("pull_timeout", "pull_timeout_ms"), ("pull_delay_on_exception", "pull_delay_on_exception_ms"),
    ("await_termination", "await_termination_ms")])
def test_the_times_in_seconds_are_deprecated_aliases(old: str, new: str) -> None:
    """Issue 37: every time named with its unit (ms, as RocketMQ's options); the old names in
    seconds still work as a keyword and as an attribute, with a DeprecationWarning."""
    seconds = 40.0 if old == "pull_timeout" else 0.25  # the pull timeout exceeds the suspend
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated; use '{new}'"):
        cfg = PushConsumerConfig("g", **{old: seconds})  # type: ignore[arg-type]
    assert getattr(cfg, new) == round(seconds * 1000)
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated"):
        assert getattr(cfg, old) == seconds
    with pytest.warns(DeprecationWarning, match=f"'{old}' is deprecated"):
        consumer = AsyncPushConsumer("g", "127.0.0.1:9876", **{old: seconds})
    assert getattr(consumer.config, new) == round(seconds * 1000)


def test_an_option_and_its_deprecated_name_together_are_refused() -> None:
    with pytest.raises(ClientError, match="not both"):
        AsyncPushConsumer("g", "127.0.0.1:9876", rebalance_interval=1.0,
                          rebalance_interval_ms=1000)


def test_consumer_options_by_name_and_unknown_options() -> None:
    c = AsyncPushConsumer("g", "127.0.0.1:9876", message_model="broadcasting", consume_from="first")
    assert c.config.message_model is MessageModel.BROADCASTING
    assert c.config.consume_from is ConsumeFrom.FIRST
    with pytest.raises(ClientError):
        AsyncPushConsumer("g", "127.0.0.1:9876", consume_from="sometimes")
    with pytest.raises(ClientError):
        AsyncPushConsumer("g", "127.0.0.1:9876", no_such_option=1)
    with pytest.raises(ClientError):
        run(c.start())  # no subscription


def test_subscribe_as_decorator_and_subscription_data() -> None:
    c = AsyncPushConsumer("g", "127.0.0.1:9876")

    @c.subscribe("Orders", " created || paid ")
    def on_orders(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    assert on_orders.__name__ == "on_orders"  # the decorator returns the function
    sub = build_subscription("Orders", "created || paid")
    assert sub.tags_set == ["created", "paid"]
    assert sub.code_set == [java_string_hash("created"), java_string_hash("paid")]
    assert build_subscription("T", "").sub_string == "*" and build_subscription("T", "*").tags_set == []
    with pytest.raises(ClientError):
        c.subscribe("bad topic!", "*", on_orders)


def test_retried_messages_show_their_original_topic() -> None:
    retried = MessageExt("%RETRY%g", b"x", properties={PropertyKey.RETRY_TOPIC: "Orders"})
    other = MessageExt("%RETRY%other", b"x", properties={PropertyKey.RETRY_TOPIC: "Orders"})
    restore_retry_topic([retried, other], "g")
    assert retried.topic == "Orders" and other.topic == "%RETRY%other"


def test_pull_request_carries_subscription_suspend_and_commit_offset() -> None:
    cfg = PushConsumerConfig("g")
    sub = build_subscription("T", "a || b")
    h = PullMessageRequestHeader.from_ext_fields(
        build_push_pull_request("g", MQ, 40, sub, cfg, commit_offset=37).ext_fields)
    assert (h.queue_id, h.queue_offset, h.max_msg_nums, h.commit_offset) == (3, 40, 32, 37)
    assert h.sys_flag == PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION | PullSysFlag.COMMIT_OFFSET
    assert h.suspend_timeout_millis == 15_000 and h.subscription == "a || b"
    h = PullMessageRequestHeader.from_ext_fields(
        build_push_pull_request("g", MQ, 0, sub, cfg, commit_offset=-1).ext_fields)
    assert not h.sys_flag & PullSysFlag.COMMIT_OFFSET


def test_local_offset_file_round_trip(tmp_path: Path) -> None:
    cfg = PushConsumerConfig("g", offset_store_dir=str(tmp_path), instance_name="node1")
    path = cfg.local_offset_path()
    assert path == os.path.join(tmp_path, "node1", "g", "offsets.json")

    async def scenario() -> tuple[int, int, int]:
        store = LocalOffsetStore("g", path)
        await store.load()
        missing = await store.read_from_store(MQ)
        store.update(MQ, 12)
        store.update(MQ, 9, increase_only=True)  # never backwards when asked so
        await store.persist([MQ])
        again = LocalOffsetStore("g", path)
        await again.load()
        return missing, await again.read_from_store(MQ), again.read(MQ)

    assert run(scenario()) == (-1, 12, 12)
    data = orjson.loads(Path(path).read_bytes())
    assert data == {"group": "g", "offsetTable": [
        {"topic": "T", "brokerName": "broker-a", "queueId": 3, "offset": 12}]}
    assert not Path(path + ".tmp").exists()  # written aside, then renamed over


def test_listener_runner_turns_failures_into_the_failure_result() -> None:
    def plain(messages: list[MessageExt], context: ConsumeContext) -> object:
        body = messages[0].body
        if body == b"raise":
            raise ValueError("boom")
        return None if body == b"none" else ConsumeResult.SUCCESS

    async def coroutine(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        await asyncio.sleep(0)
        return ConsumeResult.RECONSUME_LATER if messages[0].body == b"later" else ConsumeResult.SUCCESS

    async def scenario() -> list[ConsumeResult]:
        runner = ListenerRunner({"T": plain, "A": coroutine}, 2, ConsumeResult.RECONSUME_LATER)
        ctx = ConsumeContext(MQ, "g")
        try:
            return [await runner.run([MessageExt(topic, body)], ctx) for topic, body in
                    [("T", b"ok"), ("T", b"raise"), ("T", b"none"), ("A", b"ok"),
                     ("A", b"later"), ("Gone", b"ok")]]
        finally:
            runner.shutdown()

    assert run(scenario()) == [ConsumeResult.SUCCESS, ConsumeResult.RECONSUME_LATER,
                               ConsumeResult.RECONSUME_LATER, ConsumeResult.SUCCESS,
                               ConsumeResult.RECONSUME_LATER, ConsumeResult.SUCCESS]
