"""RocketMQ's system topic names are spelled once (orbitmq.protocol.topics); the broker, the SDK,
the store and the tools take them from there, under the names they exported before."""

from __future__ import annotations

from orbitmq.broker.tables import topic_config_manager as broker_topics
from orbitmq.client import system_names, validation
from orbitmq.client.admin import groups as group_admin
from orbitmq.protocol import topics
from orbitmq.store import dispatch


def test_the_names_are_rocketmqs() -> None:
    assert (topics.DEFAULT_TOPIC, topics.SCHEDULE_TOPIC) == ("TBW102", "SCHEDULE_TOPIC_XXXX")
    assert (topics.TRANS_HALF_TOPIC, topics.TRANS_OP_HALF_TOPIC) == (
        "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC")
    assert (topics.RETRY_GROUP_TOPIC_PREFIX, topics.DLQ_GROUP_TOPIC_PREFIX) == ("%RETRY%", "%DLQ%")
    assert topics.TIMER_TOPIC == "rmq_sys_wheel_timer"
    assert topics.TOOLS_CONSUMER_GROUP == "TOOLS_CONSUMER"


def test_every_side_uses_the_one_spelling() -> None:
    for name in ("DEFAULT_TOPIC", "SCHEDULE_TOPIC", "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "TIMER_TOPIC", "RETRY_GROUP_TOPIC_PREFIX",
                 "DLQ_GROUP_TOPIC_PREFIX"):
        assert getattr(broker_topics, name) is getattr(topics, name)
    assert dispatch.SCHEDULE_TOPIC is topics.SCHEDULE_TOPIC
    assert group_admin.RETRY_TOPIC_PREFIX is topics.RETRY_GROUP_TOPIC_PREFIX
    assert group_admin.DLQ_TOPIC_PREFIX is topics.DLQ_GROUP_TOPIC_PREFIX
    assert group_admin.TOOLS_CONSUMER_GROUP is topics.TOOLS_CONSUMER_GROUP
    assert validation.NOT_ALLOWED_SEND_TOPICS is topics.NOT_ALLOWED_SEND_TOPICS


def test_the_clients_system_topics_are_unchanged() -> None:
    before = {
        "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "BenchmarkTest", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"}
    assert before == system_names.SYSTEM_TOPICS
    assert system_names.topic_kind("%RETRY%g") == "retry"
    assert system_names.topic_kind("%DLQ%g") == "dead letters"
    assert system_names.topic_kind("rmq_sys_wheel_timer") == "system"
    assert system_names.is_system_group("CID_RMQ_SYS_TRANS")
