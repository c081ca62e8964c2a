"""Checks a client makes before anything goes on the wire (RocketMQ's ``Validators``).

Catching a bad topic or an oversized body here gives the caller a ClientError naming the problem,
instead of a round trip and a broker's remark, and keeps garbage off the network.
"""

from __future__ import annotations

import re

from orbitmq.errors import ClientError
from orbitmq.protocol.message import Message, check_priority
from orbitmq.protocol.topics import DEFAULT_TOPIC, NOT_ALLOWED_SEND_TOPICS

__all__ = [
    "TOPIC_LENGTH_MAX",
    "GROUP_LENGTH_MAX",
    "DEFAULT_TOPIC",
    "NOT_ALLOWED_SEND_TOPICS",
    "check_topic",
    "check_group",
    "check_message",
    "body_size",
]

TOPIC_LENGTH_MAX = 127
GROUP_LENGTH_MAX = 255
_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def check_topic(topic: object) -> str:
    """Returns ``topic`` if it is a legal topic name.

    Raises:
        ClientError: empty, longer than 127 characters, or characters outside ``[%|a-zA-Z0-9_-]``.
    """
    if not isinstance(topic, str) or not topic.strip():
        raise ClientError("topic is blank")
    if len(topic) > TOPIC_LENGTH_MAX:
        raise ClientError(f"topic has {len(topic)} characters, more than {TOPIC_LENGTH_MAX}")
    if not _NAME.match(topic):
        raise ClientError(f"topic {topic!r} has characters outside [%|a-zA-Z0-9_-]")
    return topic


def check_group(group: object) -> str:
    """Returns ``group`` if it is a legal producer or consumer group name.

    Raises:
        ClientError: empty, longer than 255 characters, or characters outside ``[%|a-zA-Z0-9_-]``.
    """
    if not isinstance(group, str) or not group.strip():
        raise ClientError("group name is blank")
    if len(group) > GROUP_LENGTH_MAX:
        raise ClientError(f"group name has {len(group)} characters, more than {GROUP_LENGTH_MAX}")
    if not _NAME.match(group):
        raise ClientError(f"group name {group!r} has characters outside [%|a-zA-Z0-9_-]")
    return group


def body_size(body: object) -> int:
    """The size in bytes of a message body.

    Raises:
        ClientError: the body is not bytes-like (a str must be encoded by the caller, who knows
            the charset its consumers expect).
    """
    if isinstance(body, bytes | bytearray):
        return len(body)
    if isinstance(body, memoryview):
        return body.nbytes
    raise ClientError(f"message body must be bytes, not {type(body).__name__}")


def check_message(msg: object, max_message_size: int) -> Message:
    """Returns ``msg`` if a producer may send it.

    Raises:
        ClientError: not a Message, illegal or system topic, empty body, body over
            ``max_message_size`` bytes, a negative delay level, or a priority out of 0..9 (or
            with a delay level).
    """
    if not isinstance(msg, Message):
        raise ClientError(f"expected a Message, got {type(msg).__name__}")
    check_topic(msg.topic)
    if msg.topic in NOT_ALLOWED_SEND_TOPICS:
        raise ClientError(f"topic {msg.topic!r} is a system topic; messages cannot be sent to it")
    size = body_size(msg.body)
    if size == 0:
        raise ClientError("message body is empty")
    if size > max_message_size:
        raise ClientError(f"message body of {size} bytes exceeds the maximum {max_message_size}")
    if msg.delay_level < 0:
        raise ClientError(f"delay level must not be negative, got {msg.delay_level}")
    check_priority(msg.priority, msg.delay_level)
    return msg
