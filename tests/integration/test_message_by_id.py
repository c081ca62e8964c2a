"""A message id that names no message: the broker answers QUERY_NOT_FOUND (never SYSTEM_ERROR, which
means the server failed), the SDK raises a BrokerError naming the id and where it looked, and
``orbitmq message get`` prints one line and exits non-zero (issue 36).

Both kinds of id: an offset message id (VIEW_MESSAGE_BY_ID on the broker it names, at an offset
where no message starts, or past the end) and a producer's message id (a UNIQ_KEY, looked up by
QUERY_MESSAGE in its topic).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from orbitmq.cli.main import cli
from orbitmq.client import Admin, Producer
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message
from orbitmq.protocol.msgid import create_offset_msg_id, decode_offset_msg_id
from orbitmq.testing import EmbeddedCluster

TOPIC = "ById"
WAIT_S = 20.0
NEVER_GIVEN = "7F000001000078AB0000DEADBEEF0001"  # a UNIQ_KEY no producer made


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("by-id")) as c:
        yield c


@pytest.fixture(scope="module")
def sent(cluster: EmbeddedCluster) -> tuple[str, str]:
    """A stored, indexed message of TOPIC: (offset msg id, msg id)."""
    with Producer("by-id-producer", cluster.namesrv) as producer:
        result = producer.send(Message(TOPIC, b"here"))
    with Admin(cluster.namesrv) as admin:
        deadline = time.monotonic() + WAIT_S  # the broker indexes a message just after storing it
        while not admin.query_messages(TOPIC, result.msg_id):
            assert time.monotonic() < deadline, "the message was never indexed"
            time.sleep(0.05)
    return result.offset_msg_id, result.msg_id


def _unknown_offset_ids(offset_msg_id: str) -> list[str]:
    """Offset ids of the same broker where no message starts: inside the message, past the end."""
    host, port, offset = decode_offset_msg_id(offset_msg_id)
    return [create_offset_msg_id(host, port, offset + 1), create_offset_msg_id(host, port, 2**40)]


def test_the_sdk_raises_not_found_naming_the_id(cluster: EmbeddedCluster,
                                                sent: tuple[str, str]) -> None:
    offset_msg_id, msg_id = sent
    with Admin(cluster.namesrv) as admin:
        assert admin.view_message(offset_msg_id).body == b"here"
        assert admin.view_message(msg_id, TOPIC).body == b"here"
        for unknown in _unknown_offset_ids(offset_msg_id):
            with pytest.raises(BrokerError) as caught:
                admin.view_message(unknown)
            assert caught.value.code == ResponseCode.QUERY_NOT_FOUND
            offset = decode_offset_msg_id(unknown)[2]
            assert caught.value.remark == (f"no message {unknown}: nothing starts at commit log "
                                           f"offset {offset} of {cluster.brokers[0].address}")
        with pytest.raises(BrokerError) as caught:
            admin.view_message(NEVER_GIVEN, TOPIC)
        assert caught.value.code == ResponseCode.QUERY_NOT_FOUND
        assert caught.value.remark == f"no message {NEVER_GIVEN} in {TOPIC!r}"
        assert admin.query_messages(TOPIC, NEVER_GIVEN) == []


@pytest.mark.parametrize("which", ["inside-a-message", "past-the-end", "never-given"])
def test_message_get_prints_one_line(cluster: EmbeddedCluster, sent: tuple[str, str],
                                     which: str) -> None:
    if which == "never-given":
        args, expected = ["--topic", TOPIC, NEVER_GIVEN], f"no message {NEVER_GIVEN} in {TOPIC!r}"
    else:
        unknown = _unknown_offset_ids(sent[0])[which == "past-the-end"]
        args, expected = [unknown], f"no message {unknown}: nothing starts at commit log offset"
    result = CliRunner().invoke(cli, ["message", "get", *args, "--namesrv", cluster.namesrv])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: not found: "), result.output
    assert expected in lines[0] and "SYSTEM_ERROR" not in lines[0]

