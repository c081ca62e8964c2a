"""Tag filtering of pulls: the subscription expression ``*`` or ``TagA || TagB``.

Two stages, as in RocketMQ: the ConsumeQueue entry's tags code (Java hashCode of the tag) rules
most messages out without touching the CommitLog; the messages that pass are checked against the
exact tag string in their properties, so two tags with the same hash never leak into each other.
The C++ client sends ``codeSet`` as ``[0]``, so codes are always computed here from the tags.
"""

from __future__ import annotations

import functools
import struct

from orbitmq.protocol.message import header_struct, java_string_hash

__all__ = ["TagFilter", "build_filter", "parse_tags", "stored_tags", "SUB_ALL"]

SUB_ALL = "*"
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SYSFLAG_AT = 36
_TAGS = b"TAGS\x01"


def parse_tags(expression: str | None) -> frozenset[str]:
    """The tags of an expression; empty for ``*`` (everything)."""
    if expression is None:
        return frozenset()
    text = expression.strip()
    if not text or text == SUB_ALL:
        return frozenset()
    return frozenset(t for t in (part.strip() for part in text.split("||")) if t)


class TagFilter:
    """A subscription naming tags; ``match_*`` is what MessageStore.get_message asks."""

    __slots__ = ("tags", "codes")

    def __init__(self, tags: frozenset[str]) -> None:
        self.tags = tags
        self.codes = frozenset(java_string_hash(t) for t in tags)

    def match_tags_code(self, code: int | None) -> bool:
        """A None code (a periodic recheck that knows no tag) lets the request run again."""
        return code is None or code in self.codes

    def match_message(self, raw: memoryview | bytes) -> bool:
        return stored_tags(raw) in self.tags


@functools.lru_cache(maxsize=1024)
def build_filter(expression: str | None) -> TagFilter | None:
    """The filter of an expression, None for ``*``; cached because consumers repeat theirs."""
    tags = parse_tags(expression)
    return TagFilter(tags) if tags else None


def stored_tags(raw: memoryview | bytes) -> str | None:
    """The TAGS property of one stored message (raw bytes as in the CommitLog); None if absent or
    if the bytes do not hold a whole message."""
    try:
        (sys_flag,) = _I32.unpack_from(raw, _SYSFLAG_AT)
        head = header_struct(sys_flag)
        body_len = _I32.unpack_from(raw, head.size - 4)[0]
        at = head.size + body_len
        topic_len = raw[at]
        at += 1 + topic_len
        (props_len,) = _I16.unpack_from(raw, at)
        props = bytes(raw[at + 2 : at + 2 + props_len])
    except (struct.error, IndexError):
        return None
    start = props.find(_TAGS)
    while start > 0 and props[start - 1] != 2:  # a longer name ending in TAGS
        start = props.find(_TAGS, start + 1)
    if start < 0:
        return None
    start += len(_TAGS)
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)].decode("utf-8", "replace")
