"""RocketMQ 5 topic attributes and message types (protocol/topic_attributes.py)."""

from __future__ import annotations

import pytest

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.topic_attributes import (
    TopicMessageType,
    apply_modification,
    has_timer_property,
    is_plain_type,
    message_type_of,
    topic_message_type,
    type_refusal,
)

T = TopicMessageType


def test_modification_sets_replaces_and_removes() -> None:
    assert apply_modification({}, "+message.type=FIFO") == {"message.type": "FIFO"}
    assert apply_modification({"message.type": "FIFO"}, " +message.type=MIXED ") == {"message.type": "MIXED"}
    assert apply_modification({"message.type": "FIFO"}, "-message.type") == {}
    assert apply_modification({"message.type": "DELAY"}, None) == {"message.type": "DELAY"}


@pytest.mark.parametrize("text, why", [
    ("message.type=FIFO", "must be"),
    ("+message.type=ORDERED", "not one of"),
    ("+queue.type=BatchCQ", "unsupported attribute"),
    ("+message.type=FIFO,+message.type=DELAY", "twice"),
    ("-message.type=FIFO", "no value"),
    ("+Message.Type=FIFO", "malformed"),
    ("+message.type=", "must be"),
    ("+" + "a" * 2000, "longer than"),
])
def test_bad_modifications_are_refused_with_the_reason(text: str, why: str) -> None:
    with pytest.raises(RemoteProtocolError, match=why):
        apply_modification({}, text)


def test_topic_config_json_keeps_attributes_and_leaves_them_out_when_none() -> None:
    typed = TopicConfig("T", attributes={"message.type": "FIFO"})
    assert b'"attributes":{"message.type":"FIFO"}' in typed.to_json()
    assert TopicConfig.from_json(typed.to_json()).attributes == {"message.type": "FIFO"}
    assert b"attributes" not in TopicConfig("U").to_json()
    assert topic_message_type(None) is T.NORMAL and is_plain_type(None)
    assert topic_message_type({"message.type": "TRANSACTION"}) is T.TRANSACTION


def test_message_types_from_properties() -> None:
    assert message_type_of({}) is T.NORMAL
    assert message_type_of({"TRAN_MSG": "true"}) is T.TRANSACTION
    assert message_type_of({"DELAY": "3"}) is T.DELAY
    assert message_type_of({"DELAY": "0"}) is T.NORMAL
    assert message_type_of({"TIMER_DELAY_SEC": "5"}) is T.DELAY
    assert message_type_of({"__SHARDINGKEY": "order-1"}) is T.FIFO
    assert has_timer_property("TIMER_DELIVER_MS\x011\x02") and not has_timer_property("KEYS\x01a\x02")
    assert not has_timer_property(None)


def test_type_rule_strict_for_5x_and_lenient_for_4x_orderly_sends() -> None:
    assert type_refusal("t", T.MIXED, T.DELAY, lenient=False) is None
    assert type_refusal("t", T.FIFO, T.FIFO, lenient=False) is None
    refused = type_refusal("t", T.FIFO, T.NORMAL, lenient=False)
    assert refused == ("TopicMessageType validate failed, the expected type is FIFO, but actual "
                       "type is NORMAL (topic t)")
    assert type_refusal("t", T.FIFO, T.NORMAL, lenient=True) is None
    assert type_refusal("t", T.NORMAL, T.TRANSACTION, lenient=True) is not None
