"""Priority messages, sans-I/O: the range, the queue rule, message types and the SDK Message."""

from __future__ import annotations

import pytest

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.message import Message, MessageExt, PropertyKey
from orbitmq.protocol.topic_attributes import (
    PRIORITY_MAX,
    PRIORITY_PROPERTY,
    TopicMessageType,
    apply_modification,
    message_type_of,
    parse_priority,
    priority_of,
    priority_queue,
    topic_message_type,
    type_refusal,
)

T = TopicMessageType


@pytest.mark.parametrize("value, expected", [(0, 0), (9, 9), ("0", 0), ("7", 7), (" 3 ", 3)])
def test_priorities_in_range_parse(value: object, expected: int) -> None:
    assert parse_priority(value) == expected


@pytest.mark.parametrize("value, why", [
    (10, "out of range 0..9"), (-1, "out of range"), ("10", "out of range"), ("-1", "not an integer"),
    ("", "not an integer"), ("x", "not an integer"), ("²", "not an integer"), ("1234", "not an integer"),
    (True, "not an integer"), (1.0, "not an integer"), (None, "not an integer"),
])
def test_priorities_out_of_range_are_refused_naming_the_value(value: object, why: str) -> None:
    with pytest.raises(RemoteProtocolError, match=why):
        parse_priority(value)


def test_queue_is_min_of_priority_and_last_queue() -> None:
    assert PRIORITY_MAX == 9
    assert [priority_queue(p, 10) for p in range(10)] == list(range(10))
    assert [priority_queue(p, 4) for p in range(10)] == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3]
    assert priority_queue(5, 1) == 0 and priority_queue(5, 0) == 0


def test_stored_priority_reads_back_and_defaults_to_zero() -> None:
    assert priority_of({PRIORITY_PROPERTY: "8"}) == 8
    assert priority_of({}) == 0 and priority_of({PRIORITY_PROPERTY: "junk"}) == 0


def test_priority_type_and_its_topic_rule() -> None:
    assert apply_modification({}, "+message.type=PRIORITY") == {"message.type": "PRIORITY"}
    assert topic_message_type({"message.type": "PRIORITY"}) is T.PRIORITY
    assert message_type_of({PRIORITY_PROPERTY: "0"}) is T.PRIORITY
    assert type_refusal("t", T.PRIORITY, T.PRIORITY, lenient=False) is None
    assert type_refusal("t", T.PRIORITY, T.NORMAL, lenient=False) is None  # priority 0
    for topic_type in (T.NORMAL, T.MIXED, T.FIFO):  # only a PRIORITY topic orders them
        assert "expected type" in str(type_refusal("t", topic_type, T.PRIORITY, lenient=True))
    assert type_refusal("t", T.PRIORITY, T.FIFO, lenient=True) is not None


def test_sdk_message_carries_and_checks_its_priority() -> None:
    msg = Message("T", b"x", priority=9)
    assert msg.all_properties()[PropertyKey.PRIORITY] == "9"
    assert PropertyKey.PRIORITY not in Message("T", b"x").all_properties()
    assert Message("T", b"x", priority=0).all_properties()[PropertyKey.PRIORITY] == "0"
    for bad in (10, -1, True, "3"):
        with pytest.raises(ClientError, match="priority must be an integer 0..9"):
            Message("T", b"x", priority=bad)  # type: ignore[arg-type]
    with pytest.raises(ClientError, match="both a priority and a delay level"):
        Message("T", b"x", priority=1, delay_level=3)
    with pytest.raises(ClientError, match="give priority="):
        Message("T", b"x", properties={PropertyKey.PRIORITY: "1"})
    assert MessageExt("T", b"x", properties={PropertyKey.PRIORITY: "4"}).priority == 4
    assert MessageExt("T", b"x").priority is None
