"""Lite topics (RocketMQ 5.5): names and where their messages are stored, sans-I/O.

A lite topic is a sub-topic of a parent topic whose ``message.type`` is LITE: a message's
``lite_topic`` names it, and it is created by the first message sent to it. Each lite topic is
one ordered queue, stored as RocketMQ stores its light message queues: a queue of its own whose
name starts with ``%LMQ%`` (:func:`lite_queue_topic`: ``%LMQ%{parent}%{lite}``, queue 0). The
message keeps its lite topic's name in the ``__LITE_TOPIC`` property, so that the parent and the
lite topic are known again from the stored message alone (a restart rebuilds the queue from the
commit log like any other).

Names: a lite topic name is 1..64 letters, digits, ``_`` or ``-`` (RocketMQ's limit, which the
settings answer tells 5.x clients as ``max_lite_topic_size``); ``*`` in a subscription stands for
every lite topic of the parent.
"""

from __future__ import annotations

import re

__all__ = ["LMQ_PREFIX", "LITE_TOPIC_PROPERTY", "LITE_TOPIC_NAME_MAX", "LITE_WILDCARD",
           "lite_queue_topic", "split_lite_queue_topic", "is_lite_queue_topic",
           "lite_name_problem", "arrival_key"]

LMQ_PREFIX = "%LMQ%"
LITE_TOPIC_PROPERTY = "__LITE_TOPIC"
LITE_TOPIC_NAME_MAX = 64  # characters (RocketMQ's max_lite_topic_size)
LITE_WILDCARD = "*"
_SEP = "%"
_LITE_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")


def lite_queue_topic(parent: str, lite: str) -> str:
    """The store topic holding ``parent``'s lite topic ``lite`` (one queue, id 0)."""
    return f"{LMQ_PREFIX}{parent}{_SEP}{lite}"


def is_lite_queue_topic(topic: str) -> bool:
    return topic.startswith(LMQ_PREFIX) and _SEP in topic[len(LMQ_PREFIX):]


def split_lite_queue_topic(topic: str) -> tuple[str, str] | None:
    """(parent, lite) of a lite queue's store topic; None for any other topic."""
    if not topic.startswith(LMQ_PREFIX):
        return None
    parent, sep, lite = topic[len(LMQ_PREFIX):].rpartition(_SEP)
    if not sep or not parent or not lite:
        return None
    return parent, lite


def arrival_key(topic: str) -> str:
    """What a waiting receive listens on for ``topic``: a lite queue's parent, else the topic
    itself (a lite consumer waits for any of its parent's lite topics)."""
    split = split_lite_queue_topic(topic)
    return split[0] if split is not None else topic


def lite_name_problem(name: str) -> str | None:
    """Why ``name`` is not a lite topic name (None: it is one)."""
    if not name or len(name) > LITE_TOPIC_NAME_MAX:
        return f"lite topic {name[:LITE_TOPIC_NAME_MAX]!r} must be 1..{LITE_TOPIC_NAME_MAX} characters"
    if not _LITE_NAME.match(name):
        return f"lite topic {name!r} may hold only letters, digits, '_' and '-'"
    return None
