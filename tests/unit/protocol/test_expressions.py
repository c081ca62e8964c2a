"""One reading of subscription expressions for the SDK and the broker (protocol/expressions.py):
tags, SQL92, MessageSelector, and the broker's filters built from them."""

from __future__ import annotations

import pytest

from orbitmq import ExpressionError, MessageSelector
from orbitmq.broker import message_filter
from orbitmq.broker.message_filter import SqlFilter, TagFilter, build_filter, stored_properties
from orbitmq.broker.tables.client_manager import _with_codes
from orbitmq.client.consumer import pull_service, push_consumer
from orbitmq.client.consumer.pull_codec import build_pull_request
from orbitmq.client.consumer.push_consumer import build_subscription
from orbitmq.protocol.bodies import ExpressionType, MessageQueue, SubscriptionData
from orbitmq.protocol.expressions import (
    compile_expression,
    expression_type_of,
    parse_tags,
    sql_like_tag_expression,
)
from orbitmq.protocol.headers import PullMessageRequestHeader
from orbitmq.protocol.message import java_string_hash
from orbitmq.protocol.stored import encode_stored_message

MQ = MessageQueue("T", "broker-a", 0)


# -- tags -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("expression", [None, "", "   ", "*", " * "])
def test_every_message_is_none_for_the_sdk_and_the_broker_alike(expression: str | None) -> None:
    """They used to disagree: the broker's parser gave an empty set for '*', the client's None."""
    assert parse_tags(expression) is None
    assert message_filter.parse_tags(expression) is None
    assert build_filter(expression) is None
    assert MessageSelector.by_tag(expression).tags is None
    assert build_subscription("T", expression).tags_set == []


def test_the_sdk_and_the_broker_use_one_tag_parser() -> None:
    assert message_filter.parse_tags is parse_tags
    assert not hasattr(pull_service, "parse_tags") and not hasattr(push_consumer, "parse_tags")


def test_tags_are_split_on_bars_and_trimmed() -> None:
    assert parse_tags(" a || b ||") == frozenset({"a", "b"})
    assert parse_tags("order created") == frozenset({"order created"})
    sub = build_subscription("T", "created || paid")
    assert sub.tags_set == ["created", "paid"]
    assert sub.code_set == [java_string_hash("created"), java_string_hash("paid")]
    assert sub.expression_type == "TAG"


@pytest.mark.parametrize("expression, words", [("||", "names no tag"), ("a || *", "'*'")])
def test_tag_expressions_that_match_nothing_are_refused(expression: str, words: str) -> None:
    with pytest.raises(ExpressionError, match=words):
        parse_tags(expression)
    with pytest.raises(ExpressionError):
        build_filter(expression)


@pytest.mark.parametrize("expression", ["a > 5", "color = 'red'", "a IS NOT NULL",
                                        "x between 1 and 3", "(a)"])
def test_sql_looking_tag_expressions_are_refused_by_the_sdk(expression: str) -> None:
    assert sql_like_tag_expression(expression) is not None
    with pytest.raises(ExpressionError, match="by_sql"):
        MessageSelector.by_tag(expression)
    with pytest.raises(ExpressionError):
        build_pull_request("g", MQ, 0, 32, expression, None)  # nothing can be sent
    with pytest.raises(ExpressionError):
        build_subscription("T", expression)


def test_tags_with_spaces_and_words_are_still_tags() -> None:
    for tags in ("Hot in summer", "TagA || TagB", "order-created"):
        assert sql_like_tag_expression(tags) is None
        assert MessageSelector.by_tag(tags).expression == tags


# -- types and SQL92 ------------------------------------------------------------------------------
def test_expression_types() -> None:
    assert expression_type_of(None) is expression_type_of("") is expression_type_of("tag")
    assert expression_type_of("sql92") is ExpressionType.SQL92
    with pytest.raises(ExpressionError, match="unknown expression type"):
        expression_type_of("JSONPATH")


def test_sql_selectors_go_on_the_wire_with_their_type() -> None:
    selector = MessageSelector.by_sql("  a > 5 ")
    assert (selector.expression, selector.is_sql, selector.tags) == ("a > 5", True, None)
    header = PullMessageRequestHeader.from_ext_fields(
        build_pull_request("g", MQ, 0, 32, selector, None).ext_fields)
    assert (header.subscription, header.expression_type) == ("a > 5", "SQL92")
    sub = build_subscription("T", selector)
    assert (sub.sub_string, sub.expression_type, sub.tags_set, sub.code_set) == \
        ("a > 5", "SQL92", [], [])
    with pytest.raises(ExpressionError, match="character"):
        MessageSelector.by_sql("a >")


def test_compiled_expressions_match_tags_or_properties() -> None:
    tags = compile_expression("a || b")
    assert tags.matches("a", {}) and not tags.matches("c", {}) and not tags.matches(None, {})
    sql = compile_expression("x > 1", "SQL92")
    assert sql.matches(None, {"x": "2"}) and not sql.matches("a", {})
    assert compile_expression("*").matches_all and not sql.matches_all


# -- the broker's filters -------------------------------------------------------------------------
def stored(props: dict[str, str]) -> bytes:
    return encode_stored_message(topic="T", body=b"body", properties=props)


def test_the_broker_evaluates_sql_on_the_stored_properties() -> None:
    flt = build_filter("a > 5 AND TAGS = 'red'", "SQL92")
    assert isinstance(flt, SqlFilter)
    assert flt.match_tags_code(123) and flt.match_tags_code(None)  # no prefilter possible
    assert flt.match_message(stored({"a": "10", "TAGS": "red"}))
    assert not flt.match_message(stored({"a": "3", "TAGS": "red"}))
    assert not flt.match_message(stored({"TAGS": "red"}))
    assert not flt.match_message(b"\x00" * 20)  # not a message: never delivered
    assert stored_properties(stored({"k": "v"})) == {"k": "v"}


def test_the_broker_filters_tags_by_code_then_by_string() -> None:
    flt = build_filter("red || blue")
    assert isinstance(flt, TagFilter)
    assert flt.match_tags_code(java_string_hash("red")) and not flt.match_tags_code(7)
    assert flt.match_message(stored({"TAGS": "blue"}))


def test_heartbeat_subscriptions_get_codes_only_for_tags() -> None:
    tag = _with_codes(SubscriptionData("T", "a || b", code_set=[0]))
    assert tag.code_set == [java_string_hash("a"), java_string_hash("b")]
    sql = _with_codes(SubscriptionData("T", "a || b = 'x'", expression_type="SQL92"))
    assert sql.tags_set == [] and sql.code_set == []
    broken = _with_codes(SubscriptionData("T", "a >", expression_type="SQL92"))
    assert broken.code_set == []


# -- Spark options --------------------------------------------------------------------------------
def test_spark_options_take_tags_or_sql_through_the_same_parsers() -> None:
    from orbitmq.spark.options import OptionError, parse_read_options

    ns = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    tags = parse_read_options({**ns, "tags": " b || a "}, streaming=False)
    assert tags.tag_set == frozenset({"a", "b"}) and not tags.selector.is_sql
    sql = parse_read_options({**ns, "sql": "a > 5"}, streaming=False)
    assert sql.selector == MessageSelector.by_sql("a > 5") and sql.tag_set is None
    for bad, option in (({"sql": "a >"}, "sql"), ({"sql": "a > 1", "tags": "x"}, "sql"),
                        ({"tags": "||"}, "tags"), ({"tags": "a > 5"}, "tags")):
        with pytest.raises(OptionError) as refused:
            parse_read_options({**ns, **bad}, streaming=False)
        assert refused.value.option == option
