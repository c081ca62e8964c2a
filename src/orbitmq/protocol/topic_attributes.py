"""Topic attributes (RocketMQ 5's ``attributes`` of a topic config) and message types, sans-I/O.

A topic config carries ``attributes``, a map of names to values (JSON ``"attributes":
{"message.type": "FIFO"}``); the one OrbitMQ knows is ``message.type``: NORMAL (the default when
absent), FIFO, DELAY, TRANSACTION, PRIORITY, MIXED or LITE (a parent of lite topics,
protocol/lite.py). They are changed as mqadmin's ``-a`` does, with a
modification string: ``+message.type=FIFO`` sets a value, ``-message.type`` removes it, several
separated by commas.

A message's own type comes from its properties (:func:`message_type_of`): TRAN_MSG=true is
TRANSACTION; a DELAY level or a timer property (TIMER_DELIVER_MS, TIMER_DELAY_SEC,
TIMER_DELAY_MS) is DELAY; a message group (``__SHARDINGKEY``) is FIFO; a priority
(:data:`PRIORITY_PROPERTY`) is PRIORITY; anything else NORMAL.
:func:`type_refusal` is the one rule on whether a topic takes a message: a MIXED topic takes
every type but PRIORITY, other topics their own type only; a remoting (4.x) client cannot mark a
FIFO message (its orderly sends pick the queue themselves), so under ``lenient`` a FIFO topic
also takes NORMAL messages. A PRIORITY topic also takes NORMAL messages (of priority 0, the
lowest): a priority is what a sender adds to some messages, not a demand on all of them.

Priority messages (RocketMQ 5.4's RIP-80): a priority is an integer 0..:data:`PRIORITY_MAX`, a
higher number more urgent; :func:`parse_priority` range-checks it where it is parsed and
:func:`priority_queue` is where a PRIORITY topic stores it, queue ``min(priority, queues - 1)``,
so that a consumer taking the highest queue first takes the most urgent message first.

Cheap checks for the send paths (a native fast path declines anything unusual):
:func:`has_timer_property` and :func:`is_plain_type` work on the raw properties text.
"""

from __future__ import annotations

import enum
import re

from orbitmq.errors import RemoteProtocolError

__all__ = [
    "MESSAGE_TYPE_ATTRIBUTE", "SHARDING_KEY", "TIMER_PROPERTIES", "TopicMessageType",
    "apply_modification", "topic_message_type", "message_type_of", "type_refusal",
    "has_timer_property", "is_plain_type", "ATTRIBUTE_VALUE_MAX", "PRIORITY_PROPERTY",
    "PRIORITY_MAX", "parse_priority", "priority_queue", "priority_of", "LITE_EXPIRATION_ATTRIBUTE",
    "lite_expiration_ms",
]

MESSAGE_TYPE_ATTRIBUTE = "message.type"
SHARDING_KEY = "__SHARDINGKEY"  # a 5.x message group, as a property
TIMER_PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
PRIORITY_PROPERTY = "__PRIORITY"  # a message's priority, as a property (decimal text)
PRIORITY_MAX = 9  # the highest priority (RocketMQ 5.4: 0..9, a higher number more urgent)
ATTRIBUTE_VALUE_MAX = 64  # characters of one attribute value
_ATTRIBUTES_TEXT_MAX = 1024  # characters of one modification string
_NAME = re.compile(r"^[a-z][a-z0-9.]{0,63}$")


class TopicMessageType(enum.StrEnum):
    """What a topic takes (RocketMQ 5's TopicMessageType, less its UNSPECIFIED)."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    PRIORITY = "PRIORITY"
    MIXED = "MIXED"
    LITE = "LITE"  # RocketMQ 5.5: a parent of lite topics (protocol/lite.py)


_KNOWN: dict[str, frozenset[str]] = {MESSAGE_TYPE_ATTRIBUTE: frozenset(TopicMessageType)}

# A LITE topic's lite topics expire after this many idle minutes (-1: never; RocketMQ 5.5's
# attribute, at most 30 days); without it the broker's lite_topic_ttl_s counts.
LITE_EXPIRATION_ATTRIBUTE = "lite.topic.expiration"
LITE_EXPIRATION_MAX_MIN = 30 * 24 * 60


def _lite_expiration_problem(value: str) -> str | None:
    if value == "-1" or (value.isdigit() and len(value) <= 6
                         and 1 <= int(value) <= LITE_EXPIRATION_MAX_MIN):
        return None
    return f"minutes within 1..{LITE_EXPIRATION_MAX_MIN}, or -1 (never)"


_CHECKED = {LITE_EXPIRATION_ATTRIBUTE: _lite_expiration_problem}


def lite_expiration_ms(attributes: dict[str, str] | None) -> int | None:
    """A LITE topic's own expiration in ms (0: never; None: the broker's default)."""
    raw = (attributes or {}).get(LITE_EXPIRATION_ATTRIBUTE)
    if raw is None or _lite_expiration_problem(raw) is not None:
        return None
    return 0 if raw == "-1" else int(raw) * 60_000


def apply_modification(current: dict[str, str], text: str | None) -> dict[str, str]:
    """``current`` changed by a modification string (``+k=v,-k``); a new dict.

    Raises:
        RemoteProtocolError: malformed text, an unknown attribute or a value it does not take
            (the message says which).
    """
    out = dict(current)
    if text is None or not text.strip():
        return out
    if len(text) > _ATTRIBUTES_TEXT_MAX:
        raise RemoteProtocolError(f"attributes text longer than {_ATTRIBUTES_TEXT_MAX} characters")
    seen: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if len(item) < 2 or item[0] not in "+-":
            raise RemoteProtocolError(f"attribute {item!r} must be +name=value or -name")
        sign, body = item[0], item[1:]
        name, eq, value = body.partition("=")
        if not _NAME.match(name):
            raise RemoteProtocolError(f"attribute name {name!r} is malformed")
        if name in seen:
            raise RemoteProtocolError(f"attribute {name!r} given twice")
        seen.add(name)
        allowed = _KNOWN.get(name)
        checker = _CHECKED.get(name)
        if allowed is None and checker is None:
            raise RemoteProtocolError(f"unsupported attribute {name!r} (supported: "
                                      f"{', '.join(sorted([*_KNOWN, *_CHECKED]))})")
        if sign == "-":
            if eq:
                raise RemoteProtocolError(f"attribute {item!r}: removal takes no value")
            out.pop(name, None)
            continue
        if not eq or not value or len(value) > ATTRIBUTE_VALUE_MAX:
            raise RemoteProtocolError(f"attribute {item!r} must be +name=value")
        if checker is not None:
            problem = checker(value)
            if problem is not None:
                raise RemoteProtocolError(f"value {value!r} of {name}: {problem}")
        elif allowed is not None and value not in allowed:
            raise RemoteProtocolError(f"value {value!r} of {name} is not one of "
                                      f"{', '.join(sorted(allowed))}")
        out[name] = value
    return out


def topic_message_type(attributes: dict[str, str] | None) -> TopicMessageType:
    """The topic's ``message.type`` (NORMAL when absent or not a known value)."""
    raw = (attributes or {}).get(MESSAGE_TYPE_ATTRIBUTE)
    try:
        return TopicMessageType(raw) if raw else TopicMessageType.NORMAL
    except ValueError:
        return TopicMessageType.NORMAL


def message_type_of(properties: dict[str, str]) -> TopicMessageType:
    """A message's type from its properties (module docstring)."""
    if properties.get("__LITE_TOPIC"):  # protocol/lite.py's LITE_TOPIC_PROPERTY
        return TopicMessageType.LITE
    if properties.get("TRAN_MSG") == "true":
        return TopicMessageType.TRANSACTION
    if properties.get("DELAY", "0") not in ("", "0") or any(p in properties for p in TIMER_PROPERTIES):
        return TopicMessageType.DELAY
    if properties.get(SHARDING_KEY):
        return TopicMessageType.FIFO
    if PRIORITY_PROPERTY in properties:
        return TopicMessageType.PRIORITY
    return TopicMessageType.NORMAL


def parse_priority(value: object) -> int:
    """A priority from the wire (an int, or the property's decimal text), range-checked.

    Raises:
        RemoteProtocolError: not an integer 0..PRIORITY_MAX (the message says which).
    """
    if isinstance(value, str):
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or len(text) > 3:
            raise RemoteProtocolError(f"priority {value[:16]!r} is not an integer 0..{PRIORITY_MAX}")
        number = int(text)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise RemoteProtocolError(f"priority {value!r} is not an integer 0..{PRIORITY_MAX}")
    if not 0 <= number <= PRIORITY_MAX:
        raise RemoteProtocolError(f"priority {number} is out of range 0..{PRIORITY_MAX}")
    return number


def priority_queue(priority: int, queue_nums: int) -> int:
    """The queue of a PRIORITY topic that stores a message of ``priority`` (RocketMQ 5.4's rule:
    ``min(priority, queues - 1)``; queue 0 when the topic has none to choose from)."""
    return max(min(priority, queue_nums - 1), 0)


def priority_of(properties: dict[str, str]) -> int:
    """A stored message's priority (0 when it has none or an unreadable one: stored values were
    checked on the way in)."""
    raw = properties.get(PRIORITY_PROPERTY)
    if raw is None:
        return 0
    try:
        return parse_priority(raw)
    except RemoteProtocolError:
        return 0


def type_refusal(topic: str, topic_type: TopicMessageType, message_type: TopicMessageType,
                 *, lenient: bool) -> str | None:
    """Why ``topic`` refuses a message of ``message_type`` (RocketMQ 5's wording), or None."""
    if topic_type is message_type:
        return None
    if topic_type is TopicMessageType.MIXED and message_type not in (TopicMessageType.PRIORITY,
                                                                     TopicMessageType.LITE):
        return None
    if topic_type is TopicMessageType.PRIORITY and message_type is TopicMessageType.NORMAL:
        return None
    if lenient and topic_type is TopicMessageType.FIFO and message_type is TopicMessageType.NORMAL:
        return None
    return (f"TopicMessageType validate failed, the expected type is {topic_type.value}, "
            f"but actual type is {message_type.value} (topic {topic})")


def has_timer_property(properties_text: str | None) -> bool:
    """Whether raw properties text (``k\\x01v\\x02...``) names a timer property."""
    return bool(properties_text) and "TIMER_" in properties_text  # type: ignore[operator]


def is_plain_type(attributes: dict[str, str] | None) -> bool:
    """Whether a topic takes plain messages without a per-message type check (no attribute, or
    NORMAL): what a fast send path may assume."""
    return topic_message_type(attributes) is TopicMessageType.NORMAL
