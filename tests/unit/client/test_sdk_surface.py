"""What an SDK user meets before any server: the exception classes (one hierarchy that also fits
Python's builtin ones), reserved property names, the package logger, and type information."""

from __future__ import annotations

import builtins
import importlib.resources
import logging
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import orbitmq
from orbitmq import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    ExpressionError,
    Message,
    OrbitMQError,
    TimeoutError,
    TopicNotFoundError,
)
from orbitmq.client.instance import check_response
from orbitmq.errors import broker_error
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import RESERVED_PROPERTIES

REPO = Path(__file__).resolve().parents[3]


# -- errors ---------------------------------------------------------------------------------------
def test_timeouts_are_builtin_timeouts_too() -> None:
    with pytest.raises(builtins.TimeoutError):
        raise TimeoutError("no answer")
    assert issubclass(TimeoutError, OrbitMQError) and TimeoutError("x").retriable


def test_connection_errors_are_builtin_connection_errors_too() -> None:
    with pytest.raises(builtins.ConnectionError):
        raise ConnectionClosedError("cannot connect to 127.0.0.1:1: refused")
    assert issubclass(ConnectionClosedError, OrbitMQError)


def test_a_missing_topic_is_a_topic_not_found_error() -> None:
    answer = RemotingCommand(ResponseCode.TOPIC_NOT_EXIST, flag=1, remark="topic[T] not exist")
    with pytest.raises(TopicNotFoundError) as raised:
        check_response(answer)
    assert isinstance(raised.value, BrokerError) and raised.value.code == 17
    assert raised.value.remark == "topic[T] not exist"
    assert type(broker_error(ResponseCode.SYSTEM_ERROR)) is BrokerError


def test_one_hierarchy_exported_from_the_package() -> None:
    for cls in (ClientError, ExpressionError, BrokerError, TopicNotFoundError, TimeoutError,
                ConnectionClosedError):
        assert issubclass(cls, OrbitMQError)
        assert getattr(orbitmq, cls.__name__) is cls
    assert issubclass(ExpressionError, ClientError)
    assert orbitmq.MessageSelector.by_sql("a > 1").is_sql


# -- reserved property names ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["UNIQ_KEY", "TAGS", "KEYS", "DELAY", "WAIT", "TRAN_MSG"])
def test_reserved_property_names_are_refused(name: str) -> None:
    """--property UNIQ_KEY=abc used to replace the message id."""
    assert name in RESERVED_PROPERTIES
    with pytest.raises(ClientError, match=f"'{name}' is reserved"):
        Message("T", b"x", properties={name: "abc"})


def test_properties_of_our_own_pass() -> None:
    msg = Message("T", b"x", properties={"uniq_key": "lowercase is not reserved", "a": "5"})
    assert msg.properties["a"] == "5"
    resent = Message.with_system_properties("T", b"x", properties={"UNIQ_KEY": "ID"})
    assert resent.properties == {"UNIQ_KEY": "ID"}


# -- logging and typing ----------------------------------------------------------------------------
def test_the_package_logger_has_a_null_handler() -> None:
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("orbitmq").handlers)


def test_a_library_warning_without_logging_configured_prints_nothing() -> None:
    code = "import orbitmq, logging; logging.getLogger('orbitmq.client').warning('noise')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr == ""


def test_type_information_ships_with_the_package() -> None:
    assert importlib.resources.files("orbitmq").joinpath("py.typed").is_file()
    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]
    assert wheel["packages"] == ["src/orbitmq"] and "exclude" not in wheel
