"""Subscription expressions, parsed the same way by the SDK and by the broker.

A subscription names its language in ``expressionType`` (RocketMQ's field; absent, empty or
``TAG`` mean TAG) and its expression in ``subString``:

- TAG: ``*`` (or nothing) for every message, or tags separated by ``||`` (``"created || paid"``),
  each trimmed; a message matches when its TAGS property is one of them. :func:`parse_tags` is the
  one reading of that rule: the broker filters with it, the SDK re-checks with it (the broker's
  first stage compares tag *hash codes*) and builds heartbeat subscription data with it.
- SQL92: a condition on message properties (:mod:`orbitmq.protocol.sql92`).

:func:`compile_expression` gives the parsed form of both (cached: consumers repeat theirs). Pure
code, stdlib only.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from orbitmq.errors import ExpressionError
from orbitmq.protocol.bodies import ExpressionType
from orbitmq.protocol.sql92 import Sql92Predicate, parse_sql92

__all__ = [
    "SUB_ALL",
    "TAG_SEPARATOR",
    "CompiledExpression",
    "compile_expression",
    "expression_type_of",
    "parse_tags",
    "sql_like_tag_expression",
]

SUB_ALL = "*"
TAG_SEPARATOR = "||"
_COMPILED_CACHE_MAX = 1024


def expression_type_of(value: str | None) -> ExpressionType:
    """The expression type a subscription names: None, empty or ``TAG`` (any case) is TAG.

    Raises:
        ExpressionError: neither TAG nor SQL92.
    """
    text = (value or "").strip().upper()
    if not text or text == ExpressionType.TAG:
        return ExpressionType.TAG
    if text == ExpressionType.SQL92:
        return ExpressionType.SQL92
    raise ExpressionError(f"unknown expression type {value!r}: TAG or SQL92")


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tags of a TAG expression; None means every message (``*``, empty or None).

    Raises:
        ExpressionError: the expression is not ``*`` yet names no tag (``"||"``), which would
            match nothing at all.
    """
    if expression is None:
        return None
    text = expression.strip()
    if not text or text == SUB_ALL:
        return None
    tags = frozenset(t for t in (part.strip() for part in text.split(TAG_SEPARATOR)) if t)
    if not tags:
        raise ExpressionError(f"the tag expression {expression!r} names no tag", expression, 0)
    if SUB_ALL in tags:
        raise ExpressionError(f"'*' cannot be combined with tags in {expression!r}: it alone "
                              "means every message", expression, text.index(SUB_ALL))
    return tags


_SQL_OPERATOR = re.compile(r"[=<>()']")
_SQL_KEYWORDS = re.compile(r"\b(IS\s+(?:NOT\s+)?NULL|BETWEEN\s.+\sAND)\b", re.IGNORECASE)


def sql_like_tag_expression(expression: str) -> str | None:
    """Why a TAG expression looks like SQL92 (a comparison operator, a parenthesis, a quote,
    ``IS [NOT] NULL`` or ``BETWEEN ... AND``), or None. A tag may hold such characters, so the broker takes them as tags, as RocketMQ does;
    the SDK and the CLI refuse them, since ``"a > 5"`` given as tags matches nothing at all."""
    m = _SQL_OPERATOR.search(expression)
    if m is not None:
        return f"{m.group()!r} is an SQL92 operator"
    k = _SQL_KEYWORDS.search(expression)
    if k is not None:
        return f"{' '.join(k.group(1).upper().split()[:1])} is an SQL92 keyword"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class CompiledExpression:
    """A parsed subscription expression.

    Attributes:
        expression_type: TAG or SQL92.
        expression: the expression as subscribed (``*`` for every message by tag).
        tags: TAG: the tags, None for every message.
        predicate: SQL92: the parsed condition.
    """

    expression_type: ExpressionType
    expression: str
    tags: frozenset[str] | None = None
    predicate: Sql92Predicate | None = None

    @property
    def matches_all(self) -> bool:
        """Whether every message matches (``*``): no filtering at all."""
        return self.predicate is None and self.tags is None

    def matches(self, tags: str | None, properties: dict[str, str]) -> bool:
        """Whether a message with these TAGS and properties is delivered."""
        if self.predicate is not None:
            return self.predicate.matches(properties)
        return self.tags is None or tags in self.tags


@functools.lru_cache(maxsize=_COMPILED_CACHE_MAX)
def compile_expression(expression: str | None, expression_type: str | None = None) -> CompiledExpression:
    """Parse a subscription's expression in its language (see the module docstring).

    Raises:
        ExpressionError: an unknown type, a TAG expression naming no tag, or SQL92 that does not
            parse (the message says where).
    """
    kind = expression_type_of(expression_type)
    if kind is ExpressionType.TAG:
        tags = parse_tags(expression)
        text = expression.strip() if tags is not None and expression is not None else SUB_ALL
        return CompiledExpression(kind, text, tags=tags)
    text = (expression or "").strip()
    return CompiledExpression(kind, text, predicate=parse_sql92(text))
