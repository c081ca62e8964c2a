"""SQL92 property filters: the language of RocketMQ's ``MessageSelector.bySql``.

Parsed once per expression (by the SDK before anything is sent, and by the broker), evaluated per
message against its properties (user properties and the system ones such as ``TAGS``), all of
which are strings. Pure code: no I/O, stdlib only.

Grammar, loosest binding first (keywords in any case; ``--`` and ``/* */`` comments)::

    or_expr    := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | equality
    equality   := comparison (("=" | "<>" | "!=") comparison | IS [NOT] NULL)*
    comparison := unary ((">" | ">=" | "<" | "<=") unary
                         | [NOT] BETWEEN unary AND unary
                         | [NOT] IN "(" 'string' ("," 'string')* ")")*
    unary      := ("+" | "-") unary | primary
    primary    := literal | property | "(" or_expr ")"
    literal    := 'string' ('' inside is a quote) | integer | decimal | TRUE | FALSE | NULL
    property   := [A-Za-z_$][A-Za-z0-9_$]*

The rules a message is matched by, as RocketMQ's broker applies them:

- a missing property is NULL: a comparison with it is unknown, and a message matches only when
  the whole expression is TRUE (AND, OR and NOT follow SQL's three-valued logic);
  ``IS [NOT] NULL`` asks for presence;
- a property compared with a number is read as a number of the literal's kind: ``a > 5`` reads
  ``a`` as an integer, ``a > 5.0`` as a decimal; two properties compared with ``<``/``>`` are
  read as decimals; compared with ``TRUE``/``FALSE``, a value is true when it is ``true`` in any
  case. A value that cannot be read that way makes the whole expression false for that message
  (RocketMQ stops evaluating at that error). ``=``, ``<>`` and ``IN`` between strings compare them
  exactly;
- ``x BETWEEN lo AND hi`` is ``x >= lo AND x <= hi``, ``NOT BETWEEN`` is ``x < lo OR x > hi``;
- a bare property used as a condition is ``property = TRUE``.

Where OrbitMQ departs from RocketMQ's parser, it is to refuse less or to read as SQL does:
``!=`` is accepted beside ``<>``; ``NOT`` binds looser than a comparison (``NOT a = 1`` is
``NOT (a = 1)``, as in SQL); integers may use the whole 64-bit range.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn, Union

from orbitmq.errors import ExpressionError

__all__ = [
    "Sql92Predicate",
    "parse_sql92",
    "SQL92_LENGTH_MAX",
    "SQL92_NESTING_MAX",
    "SQL92_IN_VALUES_MAX",
]

SQL92_LENGTH_MAX = 32_768  # characters of one expression
SQL92_NESTING_MAX = 64  # parentheses, NOT and signs inside one another
SQL92_IN_VALUES_MAX = 10_000  # strings in one IN list
_INT64_MAX = 2**63 - 1

Value = Union[str, int, float, bool, None]  # noqa: UP007 - a runtime alias
Properties = Mapping[str, str]
_Eval = Callable[[Properties], Value]


class _Unreadable(Exception):
    """A property value that cannot be read as the number it is compared with: the whole
    expression is false for this message (RocketMQ aborts the evaluation)."""


# ------------------------------------------------------------------------------- tokens
_TOKEN = re.compile(
    r"""
    (?P<space>\s+|--[^\r\n]*|/\*.*?\*/)
    |(?P<float>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
    |(?P<int>[0-9]+[lL]?)
    |(?P<string>'(?:[^']|'')*')
    |(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
    |(?P<op><>|!=|<=|>=|=|<|>|\(|\)|,|\+|-)
    """,
    re.VERBOSE | re.DOTALL | re.ASCII,
)
_KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})


@dataclasses.dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # float, int, string, word, keyword, op, end
    text: str
    at: int  # character position, 0-based


def _tokens(text: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            _bad_character(text, pos)
        kind = m.lastgroup or ""
        if kind != "space":
            word = m.group()
            if kind == "word" and word.upper() in _KEYWORDS:
                out.append(_Token("keyword", word.upper(), pos))
            else:
                out.append(_Token(kind, word, pos))
        pos = m.end()
    out.append(_Token("end", "", len(text)))
    return out


def _bad_character(text: str, pos: int) -> NoReturn:
    char = text[pos]
    if char == "'":
        raise ExpressionError(f"string starting at character {pos + 1} is not closed with '",
                              text, pos)
    if text.startswith("/*", pos):
        raise ExpressionError(f"comment starting at character {pos + 1} is not closed with */",
                              text, pos)
    raise ExpressionError(f"unexpected character {char!r} at character {pos + 1}", text, pos)


# ------------------------------------------------------------------------------- the tree
@dataclasses.dataclass(frozen=True, slots=True)
class _Node:
    """A parsed (sub)expression: how to evaluate it and what it may be used as."""

    run: _Eval
    condition: bool = False  # a comparison, logic or boolean literal (RocketMQ's BooleanExpression)
    constant: bool = False
    value: Value = None  # when constant
    prop: str | None = None  # when a bare property
    text: str = ""  # for messages


def _const(value: Value, text: str) -> _Node:
    def run(_props: Properties) -> Value:
        return value

    return _Node(run, condition=isinstance(value, bool), constant=True, value=value, text=text)


def _property(name: str) -> _Eval:
    def run(props: Properties) -> Value:
        return props.get(name)

    return run


def _is_number(v: Value) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


_JAVA_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_JAVA_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def _as_kind(text: str, like: int | float) -> int | float:
    """``text`` read as a number of the same kind as ``like`` (RocketMQ converts the string)."""
    if isinstance(like, int):
        if _JAVA_INT.fullmatch(text) is None:
            raise _Unreadable(text)
        return int(text)
    trimmed = text.strip()
    if _JAVA_DECIMAL.fullmatch(trimmed) is None:
        raise _Unreadable(text)
    return float(trimmed)


def _equal(lv: Value, rv: Value) -> bool | None:
    if lv is None or rv is None:
        return None
    if isinstance(lv, bool) or isinstance(rv, bool):
        if isinstance(lv, str):
            return (lv.lower() == "true") is rv
        if isinstance(rv, str):
            return (rv.lower() == "true") is lv
        return lv is rv if isinstance(lv, bool) and isinstance(rv, bool) else False
    if isinstance(lv, str) and _is_number(rv):
        assert isinstance(rv, int | float)
        return _as_kind(lv, rv) == rv
    if isinstance(rv, str) and _is_number(lv):
        assert isinstance(lv, int | float)
        return lv == _as_kind(rv, lv)
    return lv == rv


def _numbers(lv: Value, rv: Value) -> tuple[int | float, int | float]:
    """Both sides of an ordering as numbers (strings converted as RocketMQ does)."""
    if isinstance(lv, str) and isinstance(rv, str):
        return _as_kind(lv, 0.0), _as_kind(rv, 0.0)
    if isinstance(lv, str) and _is_number(rv):
        assert isinstance(rv, int | float)
        return _as_kind(lv, rv), rv
    if isinstance(rv, str) and _is_number(lv):
        assert isinstance(lv, int | float)
        return lv, _as_kind(rv, lv)
    if _is_number(lv) and _is_number(rv):
        assert isinstance(lv, int | float) and isinstance(rv, int | float)
        return lv, rv
    raise _Unreadable(f"{lv!r} and {rv!r} cannot be ordered")


_ORDER: dict[str, Callable[[int | float, int | float], bool]] = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _ordering(op: str, left: _Node, right: _Node) -> _Node:
    for side in (left, right):
        if side.condition or (side.constant and not _is_number(side.value)):
            raise ExpressionError(f"{side.text} cannot be compared with {op}: only numbers and "
                                  "properties can", "", None)
    test = _ORDER[op]
    lrun, rrun = left.run, right.run

    def run(props: Properties) -> Value:
        lv = lrun(props)
        if lv is None:
            return None
        rv = rrun(props)
        if rv is None:
            return None
        a, b = _numbers(lv, rv)
        return test(a, b)

    return _Node(run, condition=True, text=f"{left.text} {op} {right.text}")


def _equality(op: str, left: _Node, right: _Node) -> _Node:
    for side in (left, right):
        if side.constant and side.value is None:
            raise ExpressionError(f"NULL cannot be compared with {op}: use IS NULL or "
                                  "IS NOT NULL", "", None)
    if left.constant and right.constant and left.condition and not right.condition:
        raise ExpressionError(f"{left.text} cannot be compared with {right.text}", "", None)
    lrun, rrun = left.run, right.run
    negate = op != "="

    def run(props: Properties) -> Value:
        same = _equal(lrun(props), rrun(props))
        return same if same is None or not negate else not same

    return _Node(run, condition=True, text=f"{left.text} {op} {right.text}")


def _is_null(node: _Node, negated: bool) -> _Node:
    inner = node.run

    def run(props: Properties) -> Value:
        return (inner(props) is None) is not negated

    return _Node(run, condition=True, text=f"{node.text} IS {'NOT ' if negated else ''}NULL")


def _condition(node: _Node) -> _Node:
    """``node`` used where a condition is needed: a bare property means ``property = TRUE``."""
    if node.condition:
        return node
    if node.prop is not None:
        return _equality("=", node, _const(True, "TRUE"))
    raise ExpressionError(f"{node.text} is not a condition (a comparison, IN, BETWEEN, IS NULL, "
                          "TRUE or FALSE)", "", None)


def _all(terms: Sequence[_Node]) -> _Node:
    runs = [t.run for t in terms]

    def run(props: Properties) -> Value:
        unknown = False
        for term in runs:
            v = term(props)
            if v is False:
                return False
            if v is None:
                unknown = True
        return None if unknown else True

    return _Node(run, condition=True, text=" AND ".join(t.text for t in terms))


def _any(terms: Sequence[_Node]) -> _Node:
    runs = [t.run for t in terms]

    def run(props: Properties) -> Value:
        unknown = False
        for term in runs:
            v = term(props)
            if v is True:
                return True
            if v is None:
                unknown = True
        return None if unknown else False

    return _Node(run, condition=True, text=" OR ".join(t.text for t in terms))


def _not(node: _Node) -> _Node:
    inner = node.run

    def run(props: Properties) -> Value:
        v = inner(props)
        return None if v is None else not v

    return _Node(run, condition=True, text=f"NOT {node.text}")


def _not_condition(node: _Node) -> _Node:
    return _not(_condition(node))


def _between(value: _Node, low: _Node, high: _Node, negated: bool) -> _Node:
    if low.constant and high.constant and _is_number(low.value) and _is_number(high.value):
        assert isinstance(low.value, int | float) and isinstance(high.value, int | float)
        if low.value > high.value:
            raise ExpressionError(f"BETWEEN {low.text} AND {high.text}: the low value is above "
                                  "the high one", "", None)
    if negated:
        return _any([_ordering("<", value, low), _ordering(">", value, high)])
    return _all([_ordering(">=", value, low), _ordering("<=", value, high)])


def _in(value: _Node, items: list[str], negated: bool) -> _Node:
    name = value.prop
    if name is None:
        raise ExpressionError(f"IN needs a property on its left, not {value.text}", "", None)
    wanted = frozenset(items)

    def run(props: Properties) -> Value:
        v = props.get(name)
        if v is None:
            return None
        return (v in wanted) is not negated

    return _Node(run, condition=True, text=f"{name} {'NOT ' if negated else ''}IN (...)")


# ------------------------------------------------------------------------------- the parser
class _Parser:
    """Recursive descent over the token list; each method returns a _Node."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0

    # -- token helpers --------------------------------------------------------------------------
    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def _peek(self, ahead: int = 1) -> _Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def _take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def _is(self, kind: str, *texts: str) -> bool:
        tok = self.tok
        return tok.kind == kind and (not texts or tok.text in texts)

    def _expect(self, kind: str, text: str, what: str) -> _Token:
        if not self._is(kind, text):
            self._fail(f"expected {what}")
        return self._take()

    def _fail(self, message: str, at: _Token | None = None) -> None:
        tok = at or self.tok
        found = "the end" if tok.kind == "end" else repr(tok.text)
        raise ExpressionError(f"{message} at character {tok.at + 1}, found {found}", self.text,
                              tok.at)

    def _nest(self) -> None:
        self.depth += 1
        if self.depth > SQL92_NESTING_MAX:
            self._fail(f"nested deeper than {SQL92_NESTING_MAX} levels")

    def _checked(self, at: _Token, build: Callable[..., _Node], *args: Any) -> _Node:
        """``build(*args)``, its ExpressionError placed at ``at``."""
        try:
            return build(*args)
        except ExpressionError as e:
            if e.position is not None:
                raise
            raise ExpressionError(f"{e.reason} (at character {at.at + 1})", self.text,
                                  at.at) from None

    # -- grammar ------------------------------------------------------------------------------
    def parse(self) -> _Node:
        if self.tok.kind == "end":
            raise ExpressionError("the SQL92 expression is empty", self.text, 0)
        start = self.tok
        node = self._or()
        if self.tok.kind != "end":
            self._fail("unexpected text after the expression")
        return self._checked(start, _condition, node)

    def _or(self) -> _Node:
        start = self.tok
        terms = [self._and()]
        while self._is("keyword", "OR"):
            self._take()
            at = self.tok
            term = self._and()
            terms.append(self._checked(at, _condition, term))
        if len(terms) == 1:
            return terms[0]
        terms[0] = self._checked(start, _condition, terms[0])
        return _any(terms)

    def _and(self) -> _Node:
        start = self.tok
        terms = [self._not()]
        while self._is("keyword", "AND"):
            self._take()
            at = self.tok
            term = self._not()
            terms.append(self._checked(at, _condition, term))
        if len(terms) == 1:
            return terms[0]
        terms[0] = self._checked(start, _condition, terms[0])
        return _all(terms)

    def _not(self) -> _Node:
        if self._is("keyword", "NOT"):
            at = self._take()
            self._nest()
            inner = self._not()
            self.depth -= 1
            return self._checked(at, _not_condition, inner)
        return self._equality()

    def _equality(self) -> _Node:
        left = self._comparison()
        while True:
            at = self.tok
            if self._is("op", "=", "<>", "!="):
                op = "=" if self._take().text == "=" else "<>"
                right = self._comparison()
                left = self._checked(at, _equality, op, left, right)
            elif self._is("keyword", "IS"):
                self._take()
                negated = self._is("keyword", "NOT")
                if negated:
                    self._take()
                self._expect("keyword", "NULL", "NULL after IS" + (" NOT" if negated else ""))
                left = _is_null(left, negated)
            else:
                return left

    def _comparison(self) -> _Node:
        left = self._unary()
        while True:
            at = self.tok
            negated = self._is("keyword", "NOT") and self._peek().kind == "keyword" and \
                self._peek().text in ("BETWEEN", "IN")
            if negated:
                self._take()
            if self._is("op", ">", ">=", "<", "<=") and not negated:
                op = self._take().text
                right = self._unary()
                left = self._checked(at, _ordering, op, left, right)
            elif self._is("keyword", "BETWEEN"):
                self._take()
                low = self._unary()
                self._expect("keyword", "AND", "AND between the BETWEEN values")
                high = self._unary()
                left = self._checked(at, _between, left, low, high, negated)
            elif self._is("keyword", "IN"):
                self._take()
                items = self._in_list()
                left = self._checked(at, _in, left, items, negated)
            else:
                return left

    def _in_list(self) -> list[str]:
        self._expect("op", "(", "'(' after IN")
        items = [self._string("a string in the IN list")]
        while self._is("op", ","):
            self._take()
            items.append(self._string("a string in the IN list"))
            if len(items) > SQL92_IN_VALUES_MAX:
                self._fail(f"more than {SQL92_IN_VALUES_MAX} values in one IN list")
        self._expect("op", ")", "',' or ')' in the IN list")
        return items

    def _string(self, what: str) -> str:
        if not self._is("string"):
            self._fail(f"expected {what}")
        return self._take().text[1:-1].replace("''", "'")

    def _unary(self) -> _Node:
        if self._is("op", "+", "-"):
            at = self._take()
            self._nest()
            inner = self._unary()
            self.depth -= 1
            return self._checked(at, _sign, at.text, inner)
        return self._primary()

    def _primary(self) -> _Node:
        tok = self.tok
        if tok.kind == "op" and tok.text == "(":
            self._take()
            self._nest()
            node = self._or()
            self.depth -= 1
            self._expect("op", ")", "')'")
            return node
        if tok.kind == "string":
            return _const(self._string("a string"), tok.text)
        if tok.kind == "int":
            self._take()
            return _const(self._integer(tok), tok.text)
        if tok.kind == "float":
            self._take()
            value = float(tok.text)
            if not math.isfinite(value):
                self._fail("decimal number out of range", tok)
            return _const(value, tok.text)
        if tok.kind == "keyword" and tok.text in ("TRUE", "FALSE", "NULL"):
            self._take()
            return _const({"TRUE": True, "FALSE": False, "NULL": None}[tok.text], tok.text)
        if tok.kind == "word":
            self._take()
            return _Node(_property(tok.text), prop=tok.text, text=tok.text)
        self._fail("expected a value, a property or '('")
        raise AssertionError("unreachable")

    def _integer(self, tok: _Token) -> int:
        digits = tok.text.rstrip("lL")
        if len(digits) > 1 and digits.startswith("0"):
            self._fail("an integer may not start with 0", tok)
        value = int(digits)
        if value > _INT64_MAX:
            self._fail("integer out of the 64-bit range", tok)
        return value


def _sign(op: str, node: _Node) -> _Node:
    if node.constant:
        if not _is_number(node.value):
            raise ExpressionError(f"{op}{node.text}: only numbers have a sign", "", None)
        assert isinstance(node.value, int | float)
        return _const(-node.value if op == "-" else node.value, f"{op}{node.text}")
    if node.prop is None:
        raise ExpressionError(f"{op}({node.text}): only numbers and properties have a sign", "",
                              None)
    if op == "+":
        return node
    # A property's value is a string, which RocketMQ does not negate: always unknown.
    return _Node(_const(None, "NULL").run, text=f"-{node.text}")


# ------------------------------------------------------------------------------- the API
@dataclasses.dataclass(frozen=True, slots=True)
class Sql92Predicate:
    """A parsed SQL92 expression; ``matches`` tells whether a message's properties satisfy it."""

    expression: str
    _run: _Eval = dataclasses.field(repr=False, compare=False)

    def evaluate(self, properties: Properties) -> bool | None:
        """TRUE, FALSE or None (unknown); None too when a value could not be read as a number."""
        try:
            v = self._run(properties)
        except _Unreadable:
            return None
        return v if isinstance(v, bool) else None

    def matches(self, properties: Properties) -> bool:
        """Whether a message with these properties is delivered (the expression is TRUE)."""
        try:
            return self._run(properties) is True
        except _Unreadable:
            return False


def parse_sql92(expression: str) -> Sql92Predicate:
    """Parse one SQL92 expression.

    Raises:
        ExpressionError: the expression is longer than SQL92_LENGTH_MAX, nested deeper than
            SQL92_NESTING_MAX, or does not parse; the message names the character where.
    """
    if len(expression) > SQL92_LENGTH_MAX:
        raise ExpressionError(f"the SQL92 expression has {len(expression)} characters, more "
                              f"than {SQL92_LENGTH_MAX}", expression[:80], None)
    node = _Parser(expression).parse()
    return Sql92Predicate(expression, node.run)
