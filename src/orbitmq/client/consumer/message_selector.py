"""MessageSelector: what a consumer takes from a topic, by tag or by an SQL92 condition.

Wherever the SDK takes an expression (``PullConsumer.pull``, ``PushConsumer.subscribe`` and their
asyncio twins), it takes a plain string, read as a TAG expression, or a MessageSelector::

    consumer.subscribe("Orders", MessageSelector.by_sql("amount > 100 AND region = 'eu'"))
    puller.pull(mq, 0, expression=MessageSelector.by_tag("created || paid"))

Both are parsed here, before anything is sent (the broker parses them again with the same code,
:mod:`orbitmq.protocol.expressions`): an expression that does not parse raises
:class:`~orbitmq.errors.ExpressionError` naming the character where. A TAG expression that looks
like SQL92 (``"a > 5"``) is refused too: as tags it would match nothing, silently.

SQL92 filtering runs on the broker, which must allow it (``enable_property_filter``); otherwise
pulls are refused with FILTER_NOT_SUPPORTED, and a push consumer refuses to start.
"""

from __future__ import annotations

import dataclasses

from orbitmq.errors import ClientError, ExpressionError
from orbitmq.protocol.bodies import ExpressionType
from orbitmq.protocol.expressions import (
    SUB_ALL,
    CompiledExpression,
    compile_expression,
    sql_like_tag_expression,
)

__all__ = ["MessageSelector", "selector_of", "ExpressionLike"]


@dataclasses.dataclass(frozen=True, slots=True)
class MessageSelector:
    """A parsed subscription expression; build it with :meth:`by_tag` or :meth:`by_sql`.

    Attributes:
        expression_type: TAG or SQL92 (what goes on the wire as ``expressionType``).
        expression: the expression, trimmed (``*`` for every message).
    """

    expression_type: ExpressionType
    expression: str

    def __post_init__(self) -> None:
        self.compiled  # noqa: B018 - parse now: a bad expression fails where it was written

    @classmethod
    def by_tag(cls, expression: str | None = SUB_ALL) -> MessageSelector:
        """Messages whose tag is one of ``expression``'s (``"a || b"``), or every message
        (``"*"``, empty or None).

        Raises:
            ExpressionError: names no tag (``"||"``), or looks like SQL92 (use :meth:`by_sql`).
        """
        if expression is not None and not isinstance(expression, str):
            raise ClientError(f"a tag expression is a str, not {type(expression).__name__}")
        text = (expression or "").strip() or SUB_ALL
        why = sql_like_tag_expression(text)
        if why is not None:
            raise ExpressionError(
                f"{text!r} is not a tag expression ({why}); for a condition on message "
                f"properties use MessageSelector.by_sql({text!r})", text, None)
        return cls(ExpressionType.TAG, compile_expression(text, ExpressionType.TAG).expression)

    @classmethod
    def by_sql(cls, expression: str) -> MessageSelector:
        """Messages whose properties satisfy an SQL92 condition, e.g. ``"a > 5 AND b = 'x'"``
        (see :mod:`orbitmq.protocol.sql92` for the language and its rules).

        Raises:
            ExpressionError: the expression does not parse.
        """
        if not isinstance(expression, str):
            raise ClientError(f"an SQL92 expression is a str, not {type(expression).__name__}")
        return cls(ExpressionType.SQL92, expression.strip())

    @property
    def compiled(self) -> CompiledExpression:
        """The parsed form (cached across selectors with the same expression)."""
        return compile_expression(self.expression, self.expression_type)

    @property
    def tags(self) -> frozenset[str] | None:
        """TAG: the tags a message must have (None: any); SQL92: None (the broker decides)."""
        return self.compiled.tags

    @property
    def is_sql(self) -> bool:
        return self.expression_type is ExpressionType.SQL92

    def __str__(self) -> str:
        return self.expression if not self.is_sql else f"SQL92 {self.expression}"


ExpressionLike = str | MessageSelector | None


def selector_of(expression: ExpressionLike) -> MessageSelector:
    """``expression`` as a MessageSelector: a str (or None) is a TAG expression.

    Raises:
        ExpressionError: as :meth:`MessageSelector.by_tag`.
        ClientError: neither a str nor a MessageSelector.
    """
    if isinstance(expression, MessageSelector):
        return expression
    if expression is None or isinstance(expression, str):
        return MessageSelector.by_tag(expression)
    raise ClientError("an expression is a str (tags) or a MessageSelector, not "
                      f"{type(expression).__name__}")
