"""Tag filtering of pulls: the subscription expression ``*`` or ``TagA || TagB``.

Two stages, as in RocketMQ: the ConsumeQueue entry's tags code (Java hashCode of the tag) rules
most messages out without touching the CommitLog; the messages that pass are checked against the
exact tag string in their properties, so two tags with the same hash never leak into each other.
The C++ client sends ``codeSet`` as ``[0]``, so codes are always computed here from the tags.
"""

from __future__ import annotations

import functools

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.message import java_string_hash
from orbitmq.protocol.stored import peek

__all__ = ["TagFilter", "build_filter", "parse_tags", "stored_tags", "SUB_ALL"]

SUB_ALL = "*"


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
    if the bytes are not a well-formed message (the stored codec's verdict: such a message
    matches no tag)."""
    try:
        return peek(raw).tags
    except RemoteProtocolError:
        return None
