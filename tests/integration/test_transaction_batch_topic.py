"""A transaction batch to a topic that does not exist yet (issue 36): created as a send creates it
when the broker auto-creates topics (same queue count as a first send), refused naming the topic
when it does not. A real name server and broker on 127.0.0.1, the SDK over TCP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from transaction_support import Env, Recorder, unique, wait_until

from orbitmq.client import Producer
from orbitmq.client.producer.transaction_producer import LocalTransactionState, TransactionProducer
from orbitmq.errors import TopicNotFoundError
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import OrbitMQRequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import SendTransactionBatchRequestHeader
from orbitmq.protocol.message import Message

COMMIT = LocalTransactionState.COMMIT


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = Env(tmp_path_factory.mktemp("txb-topic"))
    try:
        yield e
    finally:
        e.close()


def _batch(topic: str, n: int = 3) -> list[Message]:
    return [Message(topic, f"b-{i}".encode(), keys=[f"k{i}"]) for i in range(n)]


def test_a_batch_creates_its_missing_topic_as_a_send_does(env: Env) -> None:
    by_batch, by_send = unique("TxbNewTopic"), unique("SendNewTopic")
    with TransactionProducer(unique("txb-new"), env.ns, listener=Recorder()) as producer:
        sent = producer.send_batch_in_transaction(_batch(by_batch), COMMIT)
    assert sent.local_state is COMMIT
    with Producer(unique("send-new"), env.ns) as producer:
        producer.send(Message(by_send, b"first"))
    stored = wait_until(lambda: len(env.stored(by_batch)) == 3 and env.stored(by_batch),
                        what="the committed batch")
    assert sorted(m.body for m in stored) == [b"b-0", b"b-1", b"b-2"]
    queues = {t: len(env.admin.topic_status(t)) for t in (by_batch, by_send)}
    assert queues[by_batch] == queues[by_send] == 4  # the producer's defaultTopicQueueNums


def test_without_auto_create_a_batch_is_refused_naming_the_topic(tmp_path: Path) -> None:
    env = Env(tmp_path, auto_create_topic=False)
    try:
        topic = unique("TxbNoAuto")
        header = SendTransactionBatchRequestHeader("txb-no-auto", topic, 0, 1, 1,
                                                   "UNIQ_KEY\x01TX1\x02")
        cmd = RemotingCommand.request(OrbitMQRequestCode.SEND_TRANSACTION_BATCH,
                                      header.to_ext_fields(),
                                      body=encode_batch([(0, b"x", {"UNIQ_KEY": "U1"})]))
        resp = env.loop.call(env.raw.invoke(env.broker_addr, cmd, 5.0), 10)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST and topic in (resp.remark or "")
        with (TransactionProducer("txb-no-auto", env.ns, listener=Recorder()) as producer,
              pytest.raises(TopicNotFoundError, match=topic)):
            producer.send_batch_in_transaction(_batch(topic), COMMIT)
        assert topic not in env.admin.list_topics()
    finally:
        env.close()
