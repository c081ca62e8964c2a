"""The SQL92 filter language (protocol/sql92.py): parsing, refusals that name the character, and
evaluation with RocketMQ's rules for missing properties and for strings compared with numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.errors import ClientError, ExpressionError
from orbitmq.protocol.sql92 import SQL92_LENGTH_MAX, SQL92_NESTING_MAX, parse_sql92


def matches(expression: str, **props: str) -> bool:
    return parse_sql92(expression).matches(props)


# -- comparisons ----------------------------------------------------------------------------------
@pytest.mark.parametrize("expression, value, expected", [
    ("a > 5", "10", True),  # '10' > '5' as strings would be False: numbers are compared
    ("a > 5", "5", False),
    ("a >= 5", "5", True),
    ("a < 5", "-3", True),
    ("a <= 5", "+5", True),
    ("a = 5", "5", True),
    ("a <> 5", "6", True),
    ("a != 5", "5", False),
    ("a > 5.5", "6", True),  # a decimal literal reads the property as a decimal
    ("a > 5.0", "10.25", True),
    ("a > 1e3", "1001", True),
    ("a = 'x'", "x", True),
    ("a = 'x'", "X", False),
    ("a <> 'x'", "y", True),
    ("a = 'it''s'", "it's", True),
    ("a = TRUE", "true", True),
    ("a = TRUE", "TRUE", True),
    ("a = FALSE", "no", True),
    ("a = 5", "05", True),  # read as the integer 5
])
def test_a_property_against_a_literal(expression: str, value: str, expected: bool) -> None:
    assert matches(expression, a=value) is expected


@pytest.mark.parametrize("expression, value", [
    ("a > 5", "abc"),  # not a number at all
    ("a > 5", "10.5"),  # an integer literal reads the property as an integer (RocketMQ's rule)
    ("a = 5", "five"),
    ("a > 5", " 7"),
])
def test_a_value_that_cannot_be_read_as_the_number_never_matches(expression: str, value: str) -> None:
    predicate = parse_sql92(expression)
    assert predicate.matches({"a": value}) is False
    assert predicate.evaluate({"a": value}) is None


def test_an_unreadable_value_makes_the_whole_expression_false_as_in_rocketmq() -> None:
    """RocketMQ stops evaluating at the conversion error: even an OR that would be TRUE by its
    other side does not match, unless that side is evaluated first."""
    assert not matches("a > 5 OR b = 'x'", a="abc", b="x")
    assert matches("b = 'x' OR a > 5", a="abc", b="x")


def test_two_properties_are_compared_as_decimals_or_as_strings() -> None:
    assert matches("a > b", a="10", b="9")
    assert not matches("a > b", a="x", b="9")
    assert matches("a = b", a="x", b="x")


# -- missing properties -------------------------------------------------------------------------
def test_a_missing_property_is_unknown_and_never_matches() -> None:
    for expression in ("a > 5", "a = 'x'", "a <> 'x'", "NOT a = 'x'", "a IN ('x')",
                       "a NOT IN ('x')", "a BETWEEN 1 AND 3", "a NOT BETWEEN 1 AND 3"):
        predicate = parse_sql92(expression)
        assert predicate.evaluate({}) is None, expression
        assert not predicate.matches({}), expression


def test_is_null_asks_for_presence() -> None:
    assert matches("a IS NULL")
    assert not matches("a IS NULL", a="")
    assert matches("a IS NOT NULL", a="")
    assert matches("(a > 5) IS NULL")  # an unknown comparison


def test_three_valued_and_or_not() -> None:
    assert matches("a IS NULL OR a > 5")
    assert matches("b = 1 OR a > 5", b="1")  # TRUE OR unknown
    assert not matches("b = 1 AND a > 5", b="1")  # TRUE AND unknown
    assert parse_sql92("b = 2 AND a > 5").evaluate({"b": "1"}) is False  # FALSE AND unknown
    assert parse_sql92("NOT (b = 1 AND a > 5)").evaluate({"b": "1"}) is None


# -- BETWEEN, IN, booleans ----------------------------------------------------------------------
def test_between_and_not_between() -> None:
    assert matches("a BETWEEN 1 AND 3", a="1") and matches("a BETWEEN 1 AND 3", a="3")
    assert not matches("a BETWEEN 1 AND 3", a="4")
    assert matches("a NOT BETWEEN 1 AND 3", a="0") and not matches("a NOT BETWEEN 1 AND 3", a="2")
    assert matches("a between -1.5 and 0.0", a="-0.5")
    assert not matches("a between -1.5 and 0", a="-0.5")  # `a <= 0` reads `a` as an integer


def test_in_compares_strings_exactly() -> None:
    assert matches("a IN ('x', 'y')", a="y")
    assert not matches("a IN ('1')", a="01")
    assert matches("a NOT IN ('x', 'y')", a="z")
    assert not matches("a NOT IN ('x')", a="x")


def test_literals_and_bare_properties_as_conditions() -> None:
    assert matches("TRUE") and not matches("FALSE")
    assert matches("flag", flag="True")  # a bare property is `flag = TRUE`
    assert not matches("flag", flag="yes")
    assert not matches("flag")


def test_keywords_in_any_case_comments_and_system_properties() -> None:
    assert matches("TAGS = 'red' and not (a < 2) -- comment", TAGS="red", a="3")
    assert matches("/* why */ a Is Not Null", a="1")


def test_not_binds_looser_than_a_comparison() -> None:
    assert matches("NOT a = 1", a="2")
    assert not matches("NOT a = 1", a="1")


def test_a_negated_property_is_unknown() -> None:
    assert parse_sql92("-a > 5").evaluate({"a": "-10"}) is None


# -- refusals -------------------------------------------------------------------------------------
@pytest.mark.parametrize("expression, position, words", [
    ("", 0, "empty"),
    ("a >", 3, "expected a value"),
    ("a > 'x'", 2, "cannot be compared"),  # strings are ordered only as numbers: refused
    ("a > TRUE", 2, "cannot be compared"),
    ("a = NULL", 2, "IS NULL"),
    ("5", 0, "not a condition"),
    ("'x' AND a = 1", 0, "not a condition"),
    ("a = 1 OR 7", 9, "not a condition"),
    ("a IN (1, 2)", 6, "string in the IN list"),
    ("'x' IN ('x')", 4, "property on its left"),
    ("a BETWEEN 5 AND 1", 2, "low value is above"),
    ("a BETWEEN 1 OR 2", 12, "AND between"),
    ("a = 'x", 4, "not closed"),
    ("a = 1 /* c", 6, "not closed"),
    ("(a = 1", 6, "')'"),
    ("a = 1)", 5, "after the expression"),
    ("a # 1", 2, "unexpected character"),
    ("a = 007", 4, "may not start with 0"),
    ("a = 99999999999999999999", 4, "64-bit"),
    ("a IS 1", 5, "NULL after IS"),
    ("a = -'x'", 4, "sign"),
])
def test_bad_expressions_are_refused_naming_the_place(expression: str, position: int,
                                                      words: str) -> None:
    with pytest.raises(ExpressionError) as refused:
        parse_sql92(expression)
    assert refused.value.position == position, refused.value
    assert words in str(refused.value)
    assert isinstance(refused.value, ClientError)


def test_bounds_on_length_and_nesting() -> None:
    with pytest.raises(ExpressionError, match="more than"):
        parse_sql92("a = 1 OR " * (SQL92_LENGTH_MAX // 9 + 1) + "a = 1")
    deep = "(" * (SQL92_NESTING_MAX + 1) + "a = 1" + ")" * (SQL92_NESTING_MAX + 1)
    with pytest.raises(ExpressionError, match="nested deeper"):
        parse_sql92(deep)
    nots = "NOT " * (SQL92_NESTING_MAX + 1) + "a = 1"
    with pytest.raises(ExpressionError, match="nested deeper"):
        parse_sql92(nots)
    long_and = " AND ".join(f"p{i} = 'v'" for i in range(2000))  # long but flat: evaluates
    assert parse_sql92(long_and).matches({f"p{i}": "v" for i in range(2000)})


# -- properties ----------------------------------------------------------------------------------
@given(a=st.integers(-1000, 1000), low=st.integers(-1000, 1000), span=st.integers(0, 1000))
def test_between_is_the_and_of_two_comparisons(a: int, low: int, span: int) -> None:
    high = low + span
    props = {"a": str(a)}
    assert matches(f"a BETWEEN {low} AND {high}", **props) == (low <= a <= high)
    assert matches(f"a NOT BETWEEN {low} AND {high}", **props) == (not low <= a <= high)


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_expression_error(text: str) -> None:
    try:
        predicate = parse_sql92(text)
    except ExpressionError:
        return
    predicate.evaluate({"a": "1", "b": "x"})  # never raises
