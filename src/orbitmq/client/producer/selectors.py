"""Queue selectors for ``send(msg, selector=..., arg=...)``: pick the queue from the caller's key.

A selector is any callable ``selector(queues, msg, arg) -> MessageQueue``. ``queues`` are the
topic's write queues ordered by broker name then queue id, the same order every RocketMQ client
builds, so that one key maps to one queue whichever client sends it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message, java_string_hash

__all__ = ["MessageQueueSelector", "select_by_hash", "select_random", "key_hash"]

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def key_hash(arg: object) -> int:
    """A non-negative hash of ``arg`` that is the same in every process and in Java.

    Python's ``hash()`` of a str changes per process (PYTHONHASHSEED), so it would send one order
    id to different queues from different producers. Strings use Java's ``String.hashCode`` (what
    RocketMQ's SelectMessageQueueByHash sees for a String argument); integers are used as they are
    (what the C++ client's ``send_orderly`` does with its key); anything else by its ``str``.
    """
    if isinstance(arg, bool):
        value = int(arg)
    elif isinstance(arg, int):
        value = arg
    elif isinstance(arg, str):
        value = java_string_hash(arg)
    elif isinstance(arg, bytes | bytearray):
        value = java_string_hash(bytes(arg).decode("utf-8", "replace"))
    else:
        value = java_string_hash(str(arg))
    return abs(value)


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """The queue at ``key_hash(arg) % len(queues)``: messages with one key keep their order.

    Raises:
        ClientError: no queues, or ``arg`` is None (an order key is required).
    """
    if not queues:
        raise ClientError(f"topic {msg.topic!r} has no writable queue")
    if arg is None:
        raise ClientError("select_by_hash needs an arg (the ordering key)")
    return queues[key_hash(arg) % len(queues)]


def select_random(queues: Sequence[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    """Any queue, uniformly; ``arg`` is ignored.

    Raises:
        ClientError: no queues.
    """
    if not queues:
        raise ClientError(f"topic {msg.topic!r} has no writable queue")
    return queues[random.randrange(len(queues))]
