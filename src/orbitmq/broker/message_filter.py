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

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.expressions import SUB_ALL, compile_expression, parse_tags
from orbitmq.protocol.message import java_string_hash
from orbitmq.protocol.sql92 import Sql92Predicate
from orbitmq.protocol.stored import peek

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

_FILTER_CACHE_MAX = 1024
TAG_CODES_IN_C_MAX = 64  # store/_native/queue_runs.c's TAG_CODES_MAX


class TagFilter:
    """A subscription naming tags; ``match_*`` is what MessageStore.get_message asks."""

    __slots__ = ("tags", "codes", "tags_in_c")

    def __init__(self, tags: frozenset[str]) -> None:
        self.tags = tags
        self.codes = frozenset(java_string_hash(t) for t in tags)
        # (store/message_filter.py) None past queue_runs' TAG_CODES_MAX: read in Python
        self.tags_in_c: tuple[tuple[int, ...], tuple[bytes, ...]] | None = (
            (tuple(sorted(self.codes)), tuple(sorted(t.encode() for t in tags)))
            if len(self.codes) <= TAG_CODES_IN_C_MAX else None)

    def match_tags_code(self, code: int | None) -> bool:
        """A None code (a periodic recheck that knows no tag) lets the request run again."""
        return code is None or code in self.codes

    def match_message(self, raw: memoryview | bytes) -> bool:
        return stored_tags(raw) in self.tags


class SqlFilter:
    """A SQL92 subscription: every message is read and its properties evaluated."""

    __slots__ = ("predicate",)
    tags_in_c = None  # every message's properties are evaluated (store/message_filter.py)

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
        return peek(raw).properties
    except RemoteProtocolError:
        return None


def stored_tags(raw: memoryview | bytes) -> str | None:
    """The TAGS property of one stored message (raw bytes as in the CommitLog); None if absent or
    if the bytes are not a well-formed message (the stored codec's verdict: such a message
    matches no tag)."""
    try:
        return peek(raw).tags
    except RemoteProtocolError:
        return None
