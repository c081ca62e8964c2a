"""NamespaceUtil's wrapping rules (protocol/namespaces.py)."""

from __future__ import annotations

import pytest

from orbitmq.protocol.namespaces import (
    NAMESPACE_CHARS_MAX,
    NamespaceError,
    check_namespace,
    is_already_wrapped,
    is_system_resource,
    namespace_of,
    unwrap,
    wrap,
)


@pytest.mark.parametrize(("name", "wrapped"), [
    ("orders", "shop%orders"),
    ("GID_billing", "shop%GID_billing"),
    ("%RETRY%billing", "%RETRY%shop%billing"),
    ("%DLQ%billing", "%DLQ%shop%billing"),
    ("shop%orders", "shop%orders"),                    # already in the namespace
    ("%RETRY%shop%billing", "%RETRY%shop%billing"),
    ("other%orders", "shop%other%orders"),             # another namespace's name stays inside ours
    ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"),    # system topics are in no namespace
    ("rmq_sys_wheel_timer", "rmq_sys_wheel_timer"),
    ("TBW102", "TBW102"),
    ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
    ("CID_RMQ_SYS_TRANS", "CID_RMQ_SYS_TRANS"),        # system groups too
    ("", ""),
])
def test_wrap_and_unwrap_round_trip(name: str, wrapped: str) -> None:
    assert wrap("shop", name) == wrapped
    if name and not name.startswith(("shop%", "%RETRY%shop%")) and not is_system_resource(name):
        assert unwrap(wrapped, "shop") == name


def test_no_namespace_changes_nothing() -> None:
    for ns in (None, ""):
        assert wrap(ns, "orders") == "orders"
        assert unwrap("shop%orders", ns) == "shop%orders"


def test_unwrap_only_its_own_namespace() -> None:
    assert unwrap("shop%orders", "shop") == "orders"
    assert unwrap("%RETRY%shop%billing", "shop") == "%RETRY%billing"
    assert unwrap("%DLQ%shop%billing", "shop") == "%DLQ%billing"
    assert unwrap("shop%orders", "bank") == "shop%orders"
    assert unwrap("shopping%orders", "shop") == "shopping%orders"
    assert unwrap("orders", "shop") == "orders"
    assert unwrap("RMQ_SYS_TRACE_TOPIC", "shop") == "RMQ_SYS_TRACE_TOPIC"


def test_namespace_of() -> None:
    assert namespace_of("shop%orders") == "shop"
    assert namespace_of("%RETRY%shop%billing") == "shop"
    assert namespace_of("%DLQ%shop%billing") == "shop"
    assert namespace_of("%RETRY%billing") == ""
    assert namespace_of("orders") == ""
    assert namespace_of("") == ""
    assert namespace_of("RMQ_SYS_TRANS_HALF_TOPIC") == ""


def test_already_wrapped() -> None:
    assert is_already_wrapped("shop%orders", "shop")
    assert is_already_wrapped("%RETRY%shop%g", "shop")
    assert not is_already_wrapped("shop%orders", "")
    assert not is_already_wrapped("shopx%orders", "shop")
    assert not is_already_wrapped("TBW102", "shop")


@pytest.mark.parametrize("bad", ["", "a%b", "a|b", "a.b", "名", " ns", "x" * (NAMESPACE_CHARS_MAX + 1)])
def test_invalid_namespaces_are_refused(bad: str) -> None:
    with pytest.raises(NamespaceError, match="namespace"):
        check_namespace(bad)


def test_valid_namespaces() -> None:
    for ok in ("shop", "MQ_INST_1234567890_BXjaUcvM", "a-b_c", "x" * NAMESPACE_CHARS_MAX):
        assert check_namespace(ok) == ok
