"""Recalling timer messages (RocketMQ 5.3's RECALL_MESSAGE, 370) with OrbitMQ's SDK and CLI over
remoting, against a real name server and broker: a recalled message is never delivered, also
after a restart; a delivered one is refused with RocketMQ's code and remark.

"Never delivered" is checked without sleeping on hope: a marker message due after the recalled
one is sent too, and once the marker has arrived (the timer fires in time order) the recalled
message must not be in the topic.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from orbitmq.cli.main import cli
from orbitmq.client import Admin, Producer, PullConsumer, SendResult
from orbitmq.errors import BrokerError, ClientError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message
from orbitmq.protocol.recall_handle import decode_recall_handle
from orbitmq.testing import EmbeddedCluster

WAIT_S = 20.0
LEAD_MS = 2500  # how far ahead the recalled messages are due


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("recall"), recall_message_enable=True) as c:
        yield c


@pytest.fixture
def producer(cluster: EmbeddedCluster) -> Iterator[Producer]:
    with Producer("RecallPG", cluster.namesrv) as p:
        yield p


def _topic(cluster: EmbeddedCluster, name: str) -> str:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(name, read_queue_nums=1, write_queue_nums=1)
    return name


def _timer(producer: Producer, topic: str, body: bytes, due_ms: int) -> SendResult:
    return producer.send(Message(topic, body, properties={"TIMER_DELIVER_MS": str(due_ms)}))


def _handle(sent: SendResult) -> str:
    assert sent.recall_handle, "a timer message's send answers a recall handle"
    return sent.recall_handle


def _bodies(cluster: EmbeddedCluster, topic: str) -> list[bytes]:
    with PullConsumer("RecallReader", cluster.namesrv) as puller:
        out: list[bytes] = []
        for mq in puller.fetch_queues(topic):
            out += [bytes(m.body) for m in puller.pull(mq, 0, max_nums=64).messages]
        return out


def _wait_for(cluster: EmbeddedCluster, topic: str, body: bytes) -> list[bytes]:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = _bodies(cluster, topic)
        if body in got:
            return got
        assert time.monotonic() < deadline, f"{body!r} not delivered within {WAIT_S} s: {got}"
        time.sleep(0.1)


def test_a_recalled_timer_message_is_never_delivered(cluster: EmbeddedCluster,
                                                     producer: Producer) -> None:
    topic = _topic(cluster, "RecallT1")
    due = int(time.time() * 1000) + LEAD_MS
    sent = _timer(producer, topic, b"recalled", due)
    handle = _handle(sent)
    fields = decode_recall_handle(handle)
    assert (fields.topic, fields.broker_name, fields.due_ms, fields.message_id) == (
        topic, "broker-a", due, sent.msg_id)
    # RocketMQ's v1 format: URL-safe base64 of "v1 topic broker timestamp id".
    assert base64.urlsafe_b64decode(handle).decode().split(" ") == [
        "v1", topic, "broker-a", str(due + 1), sent.msg_id]
    assert producer.recall_message(topic, handle) == sent.msg_id
    assert producer.recall_message(topic, handle) == sent.msg_id  # again: the same answer
    _timer(producer, topic, b"marker", due + 300)
    assert _wait_for(cluster, topic, b"marker") == [b"marker"]
    assert cluster.brokers[0].timer.recalled == 1
    # Its time has passed: a recall now is refused as RocketMQ refuses it.
    with pytest.raises(BrokerError) as refused:
        producer.recall_message(topic, handle)
    assert refused.value.code == ResponseCode.ILLEGAL_OPERATION
    assert refused.value.remark == "recall failed, timestamp invalid"


def test_a_delivered_message_cannot_be_recalled(cluster: EmbeddedCluster, producer: Producer) -> None:
    topic = _topic(cluster, "RecallT2")
    sent = _timer(producer, topic, b"delivered", int(time.time() * 1000) + 500)
    _wait_for(cluster, topic, b"delivered")
    with pytest.raises(BrokerError) as refused:
        producer.recall_message(topic, _handle(sent))
    assert (refused.value.code, refused.value.remark) == (
        ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
    assert _bodies(cluster, topic) == [b"delivered"]


def test_refusals_carry_rocketmqs_codes(cluster: EmbeddedCluster, producer: Producer) -> None:
    topic = _topic(cluster, "RecallT3")
    other = _topic(cluster, "RecallT3b")
    sent = _timer(producer, topic, b"x", int(time.time() * 1000) + 60_000)
    handle = _handle(sent)
    with pytest.raises(BrokerError) as refused:
        producer.recall_message(other, handle)
    assert (refused.value.code, refused.value.remark) == (
        ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
    with pytest.raises(ClientError, match="recall handle is invalid"):
        producer.recall_message(topic, "not-a-handle!")
    plain = producer.send(Message(topic, b"plain"))
    assert plain.recall_handle is None  # only a timer message has one
    assert producer.recall_message(topic, handle) == sent.msg_id


def test_a_recall_survives_a_restart(cluster: EmbeddedCluster, producer: Producer) -> None:
    topic = _topic(cluster, "RecallT4")
    due = int(time.time() * 1000) + LEAD_MS + 1500
    sent = _timer(producer, topic, b"recalled", due)
    producer.recall_message(topic, _handle(sent))
    cluster.stop_broker(0)
    broker = cluster.start_broker(0)
    assert broker.timer.recalled == 0
    deadline = time.monotonic() + WAIT_S
    while True:  # the restarted broker's route, then the marker
        try:
            _timer(producer, topic, b"marker", due + 300)
            break
        except (BrokerError, ClientError, OSError):
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert _wait_for(cluster, topic, b"marker") == [b"marker"]
    assert broker.timer.recalled == 1


def test_the_cli_recalls_and_refuses_in_one_line(cluster: EmbeddedCluster, producer: Producer,
                                                 tmp_path: Path) -> None:
    topic = _topic(cluster, "RecallT5")
    sent = _timer(producer, topic, b"x", int(time.time() * 1000) + 60_000)
    runner = CliRunner()
    args = ["message", "recall", "--topic", topic, "--handle", _handle(sent),
            "--namesrv", cluster.namesrv]
    ok = runner.invoke(cli, args)
    assert ok.exit_code == 0, ok.output
    assert ok.stdout.strip() == f"RECALLED msg_id={sent.msg_id} topic={topic}"
    refused = runner.invoke(cli, ["message", "recall", "--topic", "RecallT3b", "--handle",
                                  _handle(sent), "--namesrv", cluster.namesrv])
    assert refused.exit_code != 0
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "topic not match" in refused.stderr
    bad = runner.invoke(cli, ["message", "recall", "--topic", topic, "--handle", "zz",
                              "--namesrv", cluster.namesrv])
    assert bad.exit_code != 0 and "recall handle is invalid" in bad.stderr


def test_a_recalled_delay_level_message_is_never_delivered(cluster: EmbeddedCluster,
                                                           producer: Producer) -> None:
    topic = _topic(cluster, "RecallT6")
    sent = producer.send(Message(topic, b"recalled", delay_level=2))  # 5 s
    fields = decode_recall_handle(_handle(sent))
    assert fields.message_id == sent.msg_id
    assert 4000 <= fields.due_ms - int(time.time() * 1000) <= 5000
    assert producer.recall_message(topic, _handle(sent)) == sent.msg_id
    producer.send(Message(topic, b"marker", delay_level=2))  # the same level: delivered after it
    assert _wait_for(cluster, topic, b"marker") == [b"marker"]
    assert cluster.brokers[0].schedule.recalled_skipped == 1


def test_a_timer_topic_of_one_queue_gets_the_marker_queue_at_start(cluster: EmbeddedCluster) -> None:
    from orbitmq.protocol.bodies import TopicConfig
    from orbitmq.protocol.topics import TIMER_TOPIC

    broker = cluster.brokers[0]

    async def as_before() -> None:  # as a broker made before recall left it
        broker.topics.update(TopicConfig(TIMER_TOPIC, 1, 1))
    cluster.call(as_before())
    cluster.stop_broker(0)
    broker = cluster.start_broker(0)
    tc = broker.topics.get(TIMER_TOPIC)
    assert (tc.read_queue_nums, tc.write_queue_nums) == (2, 2)
