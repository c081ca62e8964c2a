"""Lite topics: names, the registry and the subscriptions (broker/lite, protocol/lite)."""

from __future__ import annotations

import pytest

from orbitmq.broker.lite.service import LiteRefused, LiteSubscriptions, LiteTopics, SyncAction
from orbitmq.errors import ClientError
from orbitmq.protocol.lite import (
    LITE_TOPIC_NAME_MAX,
    LITE_TOPIC_PROPERTY,
    arrival_key,
    lite_name_problem,
    lite_queue_topic,
    split_lite_queue_topic,
)
from orbitmq.protocol.message import Message
from orbitmq.protocol.topic_attributes import TopicMessageType, message_type_of, type_refusal


def test_names_round_trip_and_are_checked() -> None:
    topic = lite_queue_topic("Parent", "session-1")
    assert split_lite_queue_topic(topic) == ("Parent", "session-1")
    assert arrival_key(topic) == "Parent" and arrival_key("Plain") == "Plain"
    assert split_lite_queue_topic("Plain") is None
    assert lite_name_problem("a" * LITE_TOPIC_NAME_MAX) is None
    assert lite_name_problem("a" * (LITE_TOPIC_NAME_MAX + 1)) is not None
    assert lite_name_problem("") is not None and lite_name_problem("a b") is not None


def test_registry_creates_on_first_use_bounds_and_expires() -> None:
    topics = LiteTopics(topics_max=2)
    assert topics.touch("P", "a", 1000) is True
    assert topics.touch("P", "a", 2000) is False
    assert topics.touch("P", "b", 1500) is True
    with pytest.raises(LiteRefused) as refused:
        topics.touch("P", "c", 3000)
    assert refused.value.kind == "topic_quota"
    assert topics.idle(now_ms=2600, ttl_ms=1000) == [("P", "b")]
    topics.remove("P", "b")
    assert topics.count == 1 and list(topics.names("P")) == ["a"]


def test_subscriptions_take_every_action_and_the_quota() -> None:
    subs = LiteSubscriptions(quota=3)
    # The 5.x client's subscribe_lite("ab") sends the characters; its full set then replaces them.
    subs.sync("c1", "G", "P", SyncAction.PARTIAL_ADD, ["a", "b"])
    subs.sync("c1", "G", "P", SyncAction.COMPLETE_ADD, ["ab"])
    assert subs.of("c1", "G", "P").names == {"ab"}  # type: ignore[union-attr]
    subs.sync("c1", "G", "P", SyncAction.PARTIAL_ADD, ["cd", "*"])
    subs.sync("c1", "G", "P", SyncAction.PARTIAL_REMOVE, ["cd"])
    assert subs.of("c1", "G", "P").names == {"ab", "*"}  # type: ignore[union-attr]
    with pytest.raises(LiteRefused) as refused:
        subs.sync("c1", "G", "P", SyncAction.PARTIAL_ADD, ["x", "y"])
    assert refused.value.kind == "subscription_quota"
    with pytest.raises(LiteRefused) as refused:
        subs.sync("c1", "G", "P", SyncAction.PARTIAL_ADD, ["bad name"])
    assert refused.value.kind == "name"
    with pytest.raises(LiteRefused):
        subs.sync("c1", "G", "P", 9, ["x"])
    subs.sync("c1", "G", "P", SyncAction.COMPLETE_REMOVE, [])
    assert subs.of("c1", "G", "P") is None
    subs.sync("c2", "G", "P", SyncAction.PARTIAL_ADD, ["a"])
    assert subs.drop_clients(lambda c: False) == 1


def test_sdk_message_carries_its_lite_topic_and_type() -> None:
    msg = Message("P", b"x", lite_topic="session-1")
    props = msg.all_properties()
    assert props[LITE_TOPIC_PROPERTY] == "session-1"
    assert message_type_of(props) is TopicMessageType.LITE
    assert type_refusal("P", TopicMessageType.LITE, TopicMessageType.LITE, lenient=True) is None
    assert type_refusal("P", TopicMessageType.LITE, TopicMessageType.NORMAL, lenient=True)
    assert type_refusal("M", TopicMessageType.MIXED, TopicMessageType.LITE, lenient=False)
    with pytest.raises(ClientError):
        Message("P", b"x", lite_topic="no spaces")


def test_a_parents_own_expiration_attribute() -> None:
    from orbitmq.errors import RemoteProtocolError
    from orbitmq.protocol.topic_attributes import apply_modification, lite_expiration_ms

    attrs = apply_modification({}, "+message.type=LITE,+lite.topic.expiration=30")
    assert lite_expiration_ms(attrs) == 30 * 60_000
    assert lite_expiration_ms(apply_modification(attrs, "+lite.topic.expiration=-1")) == 0
    assert lite_expiration_ms(apply_modification(attrs, "-lite.topic.expiration")) is None
    for bad in ("0", "43201", "1.5", "x", "-2"):
        with pytest.raises(RemoteProtocolError, match="lite.topic.expiration"):
            apply_modification({}, f"+lite.topic.expiration={bad}")
    topics = LiteTopics(topics_max=10)
    topics.touch("Short", "a", 0)
    topics.touch("Never", "b", 0)
    topics.touch("Default", "c", 0)
    ttl = {"Short": 1000, "Never": 0}
    assert topics.idle(5000, lambda parent: ttl.get(parent, 10_000)) == [("Short", "a")]


def test_a_lite_queue_stands_for_its_parent_in_access_control() -> None:
    from orbitmq.security.access_table import topic_permission
    from orbitmq.security.model import Action

    lite = topic_permission(lite_queue_topic("Sessions", "s1"), Action.SUB)
    assert lite == topic_permission("Sessions", Action.SUB)
