"""Filtering of pulls by the subscription: tags (``*`` or ``TagA || TagB``) or SQL92.

TAG, two stages as in RocketMQ: the ConsumeQueue entry's tags code (Java hashCode of the tag)
rules most messages out without touching the CommitLog; the messages that pass are checked
against the exact tag string in their properties, so two tags with the same hash never leak into
each other. The C++ client sends ``codeSet`` as ``[0]``, so codes are always computed here from
the tags.

SQL92: the ConsumeQueue holds no properties, so nothing is ruled out by the tags code; every
scanned message's properties are read from the CommitLog (:func:`stored_properties`) and the
condition evaluated on them. That is why the broker's ``enable_property_filter`` must allow it.

Expressions are parsed by :mod:`orbitmq.protocol.expressions`, the same code the SDK uses.
"""

from __future__ import annotations

import functools
import struct

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.expressions import SUB_ALL, compile_expression, parse_tags
from orbitmq.protocol.message import decode_stored_message, header_struct, java_string_hash
from orbitmq.protocol.sql92 import Sql92Predicate

__all__ = [
    "TagFilter",
    "SqlFilter",
    "PullFilter",
    "build_filter",
    "parse_tags",
    "stored_tags",
    "stored_properties",
    "SUB_ALL",
]

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_SYSFLAG_AT = 36
_TAGS = b"TAGS\x01"
_FILTER_CACHE_MAX = 1024


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


class SqlFilter:
    """A SQL92 subscription: every message is read and its properties evaluated."""

    __slots__ = ("predicate",)

    def __init__(self, predicate: Sql92Predicate) -> None:
        self.predicate = predicate

    def match_tags_code(self, code: int | None) -> bool:
        """The tags code says nothing about properties: every arrival may match."""
        return True

    def match_message(self, raw: memoryview | bytes) -> bool:
        props = stored_properties(raw)
        return props is not None and self.predicate.matches(props)


PullFilter = TagFilter | SqlFilter


@functools.lru_cache(maxsize=_FILTER_CACHE_MAX)
def build_filter(expression: str | None, expression_type: str | None = None) -> PullFilter | None:
    """The filter of a subscription, None for ``*``; cached because consumers repeat theirs.

    Raises:
        ExpressionError: the expression does not parse in its language (or names no language
            OrbitMQ knows).
    """
    compiled = compile_expression(expression, expression_type)
    if compiled.predicate is not None:
        return SqlFilter(compiled.predicate)
    return TagFilter(compiled.tags) if compiled.tags is not None else None


def stored_properties(raw: memoryview | bytes) -> dict[str, str] | None:
    """The properties of one stored message (raw bytes as in the CommitLog); None when the bytes
    are not a whole, well-formed message. The one place a filter reads properties from."""
    try:
        return decode_stored_message(raw, check_crc=False).properties
    except RemoteProtocolError:
        return None


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
