"""The SDK calls that Spark and the CLI use instead of raw requests, against a real name server and
broker on 127.0.0.1 (ephemeral ports, real files): ending a transaction by its receipt, the raw
pull next to the decoded one, and creating a topic on chosen broker addresses.

Visibility is checked with a sentinel: a plain message sent to the same queue after the step
under test. Dispatch follows the CommitLog's order, so once the sentinel can be pulled, anything
the step stored can be pulled too; what is missing then was never delivered.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from collections.abc import Iterator

import pytest

from orbitmq.client import (
    Admin,
    AsyncPullConsumer,
    HalfMessageRef,
    Producer,
    PullConsumer,
    PullStatus,
    RawPullResult,
)
from orbitmq.client.producer.transaction_producer import (
    AsyncTransactionProducer,
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
)
from orbitmq.errors import BrokerError, ClientError, ConnectionClosedError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.testing import EmbeddedCluster

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
_ids = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


class Undecided(TransactionListener):
    """Leaves every transaction for later: the test ends them by their receipts."""

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return UNKNOWN


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("sdk-calls")) as c:
        yield c


def one_queue_topic(cluster: EmbeddedCluster, prefix: str) -> tuple[str, MessageQueue]:
    topic = unique(prefix)
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
    return topic, MessageQueue(topic, "broker-a", 0)


def delivered_up_to_sentinel(cluster: EmbeddedCluster, mq: MessageQueue,
                             timeout_s: float = 10.0) -> list[MessageExt]:
    """Send a sentinel to ``mq``'s topic and read the queue until it shows up (bounded); every
    message but the sentinels (this one and earlier ones), in queue order."""
    with Producer(unique("sentinel-p"), cluster.namesrv) as producer:
        sentinel = producer.send(Message(mq.topic, b"sentinel")).msg_id
    deadline = time.monotonic() + timeout_s
    with PullConsumer(unique("sentinel-c"), cluster.namesrv) as consumer:
        while True:
            seen, offset = [], 0
            while True:
                r = consumer.pull(mq, offset, 64)
                seen.extend(r.messages)
                if r.status is not PullStatus.FOUND:
                    break
                offset = r.next_begin_offset
            if any(m.msg_id == sentinel for m in seen):
                return [m for m in seen if m.body != b"sentinel"]
            assert time.monotonic() < deadline, f"sentinel not delivered to {mq}"
            time.sleep(0.05)


# -- ending a transaction by its receipt -------------------------------------------------------
def test_commit_by_send_result_delivers_once_even_when_repeated(cluster: EmbeddedCluster):
    topic, mq = one_queue_topic(cluster, "EndCommit")
    group = unique("end-commit")
    with TransactionProducer(group, cluster.namesrv, listener=Undecided()) as tp:
        result = tp.send_in_transaction(Message(topic, b"decided-later"))
        assert result.local_state is UNKNOWN
        assert delivered_up_to_sentinel(cluster, mq) == []  # pending: not visible
        tp.end_transaction(result, COMMIT)
        tp.end_transaction(result, COMMIT)  # a repeat (a retry after a lost answer): harmless
        with pytest.raises(BrokerError) as refused:  # the other verdict now: refused
            tp.end_transaction(result, ROLLBACK)
        assert refused.value.code == ResponseCode.TRANSACTION_FAILED
        assert "already committed" in refused.value.remark
    got = delivered_up_to_sentinel(cluster, mq)
    assert [(m.msg_id, m.body) for m in got] == [(result.msg_id, b"decided-later")]


def test_rollback_by_send_result_delivers_nothing(cluster: EmbeddedCluster):
    topic, mq = one_queue_topic(cluster, "EndRollback")
    with TransactionProducer(unique("end-rollback"), cluster.namesrv, listener=Undecided()) as tp:
        result = tp.send_in_transaction(Message(topic, b"never"))
        tp.end_transaction(result, ROLLBACK)
        with pytest.raises(BrokerError) as refused:
            tp.end_transaction(result, COMMIT)
        assert refused.value.code == ResponseCode.TRANSACTION_FAILED
        with pytest.raises(ClientError, match="UNKNOWN ends no transaction"):
            tp.end_transaction(result, UNKNOWN)
    assert delivered_up_to_sentinel(cluster, mq) == []


def test_another_producer_of_the_group_ends_it_from_a_kept_reference(cluster: EmbeddedCluster):
    """The receipt is kept as plain data (what Spark's commit markers hold) and a different
    producer of the same group, started later, commits from it; one of another group cannot."""
    topic, mq = one_queue_topic(cluster, "EndElsewhere")
    group = unique("end-elsewhere")

    async def scenario() -> tuple[dict[str, object], str]:
        async with AsyncTransactionProducer(group, cluster.namesrv, listener=Undecided()) as tp:
            tracker = await tp.send_half(Message(topic, b"from-a-ref"))
            assert tracker.send_result is not None
            ref = HalfMessageRef.of(tracker.send_result)
        kept = {f: getattr(ref, f) for f in HalfMessageRef.__dataclass_fields__}
        stranger = AsyncTransactionProducer(unique("other-group"), cluster.namesrv,
                                            listener=Undecided())
        async with stranger:
            with pytest.raises(BrokerError) as wrong:
                await stranger.end_transaction(HalfMessageRef(**kept), COMMIT)  # type: ignore[arg-type]
        assert wrong.value.code == ResponseCode.SYSTEM_ERROR and "producer group" in wrong.value.remark
        async with AsyncTransactionProducer(group, cluster.namesrv, listener=Undecided()) as later:
            await later.end_transaction(HalfMessageRef(**kept), COMMIT)  # type: ignore[arg-type]
        return kept, ref.msg_id

    kept, msg_id = asyncio.run(scenario())
    assert kept["commit_log_offset"] >= 0 and kept["broker_name"] == "broker-a"  # type: ignore[operator]
    assert [m.msg_id for m in delivered_up_to_sentinel(cluster, mq)] == [msg_id]


def test_a_receipt_whose_route_is_gone_is_ended_at_its_store_address(cluster: EmbeddedCluster):
    """The broker name no route knows (renamed, or the topic deleted from the name servers): the
    store address inside the receipt's offset id still reaches the broker that holds the half."""
    topic, mq = one_queue_topic(cluster, "EndNoRoute")
    group = unique("end-noroute")
    with TransactionProducer(group, cluster.namesrv, listener=Undecided()) as tp:
        result = tp.send_in_transaction(Message(topic, b"by-address"))
        ref = HalfMessageRef.of(result)
        assert ref.store_addr == cluster.brokers[0].server.address
        moved = HalfMessageRef(**{**{f: getattr(ref, f) for f in HalfMessageRef.__dataclass_fields__},
                                  "broker_name": "broker-gone"})
        tp.end_transaction(moved, COMMIT)
    assert [m.body for m in delivered_up_to_sentinel(cluster, mq)] == [b"by-address"]


def test_a_receipt_that_is_not_one_is_refused_before_the_wire(cluster: EmbeddedCluster):
    topic, _mq = one_queue_topic(cluster, "EndBad")
    with Producer(unique("plain"), cluster.namesrv) as producer:
        plain = producer.send(Message(topic, b"plain"))
    with TransactionProducer(unique("end-bad"), cluster.namesrv, listener=Undecided()) as tp:
        with pytest.raises(BrokerError) as not_half:  # a stored message, not a half message
            tp.end_transaction(plain, COMMIT)
        assert not_half.value.code == ResponseCode.SYSTEM_ERROR
        with pytest.raises(ClientError, match="not the receipt"):
            tp.end_transaction(type(plain)(plain.status, plain.msg_id, "not-an-offset-id",
                                           plain.queue, plain.queue_offset), COMMIT)


# -- the raw pull ----------------------------------------------------------------------------------
def _fill(cluster: EmbeddedCluster, topic: str) -> None:
    big = b"z" * 10_000  # over compress_over: stored compressed
    with Producer(unique("raw-p"), cluster.namesrv) as producer:
        for i in range(40):
            body = big + str(i).encode() if i % 10 == 3 else f"m{i}".encode()
            producer.send(Message(topic, body, tags=f"t{i % 3}", keys=[f"k{i}"],
                                  properties={"n": str(i)}))


def _decoded(raw: RawPullResult) -> list[MessageExt]:
    msgs = list(iter_stored_messages(raw.body, check_crc=True, decompress=True))
    return [m for m in msgs if raw.tags is None or m.tags in raw.tags]


@pytest.mark.parametrize("expression", ["*", "t1 || t2"])
def test_raw_pull_equals_the_decoded_pull(cluster: EmbeddedCluster, expression: str):
    topic, mq = one_queue_topic(cluster, "RawPull")
    _fill(cluster, topic)
    with PullConsumer(unique("raw-c"), cluster.namesrv) as consumer:
        offset, pulls = 0, 0
        while True:
            decoded = consumer.pull(mq, offset, 16, expression)
            raw = consumer.pull_raw(mq, offset, 16, expression)
            pulls += 1
            assert (raw.status, raw.next_begin_offset, raw.min_offset, raw.max_offset) == (
                decoded.status, decoded.next_begin_offset, decoded.min_offset, decoded.max_offset)
            assert _decoded(raw) == decoded.messages
            if decoded.status is not PullStatus.FOUND:
                assert raw.body == b"" and decoded.status is PullStatus.NO_NEW_MSG
                break
            assert isinstance(raw.body, bytes) and raw.body
            offset = decoded.next_begin_offset
        assert offset == 40 and pulls >= 3
        assert raw.tags == (None if expression == "*" else frozenset({"t1", "t2"}))
        far, far_decoded = consumer.pull_raw(mq, 1000), consumer.pull(mq, 1000)
        assert far.status is PullStatus.OFFSET_ILLEGAL and far.body == b"" and not far.removed
        assert (far.next_begin_offset, far.min_offset, far.max_offset) == (
            far_decoded.next_begin_offset, far_decoded.min_offset, far_decoded.max_offset)
        assert far.max_offset == 40 and far.remark  # the broker says why (its store status)


def test_async_raw_pull_hands_back_the_stored_bytes(cluster: EmbeddedCluster):
    topic, mq = one_queue_topic(cluster, "RawAsync")
    _fill(cluster, topic)

    async def pull() -> tuple[RawPullResult, list[MessageExt]]:
        async with AsyncPullConsumer(unique("raw-a"), cluster.namesrv) as consumer:
            raw = await consumer.pull_raw(mq, 0, 32)
            return raw, (await consumer.pull(mq, 0, 32)).messages

    raw, messages = asyncio.run(pull())
    assert raw.status is PullStatus.FOUND and raw.tags is None
    assert _decoded(raw) == messages and len(messages) == 32
    big = next(m for m in messages if m.queue_offset == 3)
    assert big.body == b"z" * 10_000 + b"3"
    assert len(raw.body) < len(big.body)  # as stored: the big body still compressed
    assert [m.properties["n"] for m in messages] == [str(i) for i in range(32)]


def test_a_bulk_raw_pull_of_megabytes_holds_the_stored_bytes_of_the_decoded_pulls(
        cluster: EmbeddedCluster):
    """A bulk pull of batches (the broker sends back-to-back messages as one slice each run)
    hands back the same stored messages as decoded pulls of 32 at a time."""
    topic, mq = one_queue_topic(cluster, "RawBig")
    with Producer(unique("raw-big-p"), cluster.namesrv) as producer:
        for lo in range(0, 300, 25):  # 300 x 8 KiB, back to back in batches
            producer.send_batch([Message(topic, bytes([i % 251]) * 8000, keys=[f"k{i}"])
                                 for i in range(lo, lo + 25)])
    with PullConsumer(unique("raw-big-c"), cluster.namesrv) as consumer:
        raw = consumer.pull_raw(mq, 0, 300, bulk=True)
        assert raw.status is PullStatus.FOUND and raw.next_begin_offset == 300
        assert isinstance(raw.body, bytes) and len(raw.body) > 1024 * 1024
        decoded, offset = [], 0
        while offset < 300:
            got = consumer.pull(mq, offset, 32)
            decoded += got.messages
            offset = got.next_begin_offset
    assert _decoded(raw) == decoded
    assert [m.body for m in decoded] == [bytes([i % 251]) * 8000 for i in range(300)]


def test_raw_pull_refusals_raise_as_the_decoded_pull_does(cluster: EmbeddedCluster):
    known, _mq = one_queue_topic(cluster, "RawKnown")
    with PullConsumer(unique("raw-r"), cluster.namesrv) as consumer:
        consumer.fetch_queues(known)  # the route names broker-a: the pulls reach it
        mq = MessageQueue("NoSuchTopicRaw", "broker-a", 0)
        with pytest.raises(BrokerError) as decoded:
            consumer.pull(mq, 0)
        with pytest.raises(BrokerError) as raw:
            consumer.pull_raw(mq, 0)
        assert raw.value.code == decoded.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(ClientError):
            consumer.pull_raw(MessageQueue("T", "broker-a", 0), -1)
        with pytest.raises(ClientError):
            consumer.pull_raw(MessageQueue("T", "broker-a", 0), 0, 1025)


# -- topic admin by broker address -------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_create_topic_on_broker_addresses(cluster: EmbeddedCluster):
    addr = cluster.brokers[0].server.address
    topic = unique("OnBroker")
    with Admin(cluster.namesrv) as admin:
        assert admin.create_topic_on_brokers([addr, f" {addr} "], topic, read_queue_nums=3,
                                             write_queue_nums=2, order=True) == [addr]
        deadline = time.monotonic() + 10
        while topic not in admin.list_topics():  # registered with the name server by the broker
            assert time.monotonic() < deadline, "topic never reached the name server"
            time.sleep(0.05)
        [qd] = admin.topic_route(topic).queue_datas
        assert (qd.read_queue_nums, qd.write_queue_nums) == (3, 2)
        for bad, why in [([], "no broker address"), (["nohost"], "not host:port"),
                         ([f"{addr.split(':')[0]}:70000"], "not host:port")]:
            with pytest.raises(ClientError, match=why):
                admin.create_topic_on_brokers(bad, topic)
        with pytest.raises(ClientError, match="queue counts"):
            admin.create_topic_on_brokers([addr], topic, read_queue_nums=0)
        with pytest.raises(ClientError):
            admin.create_topic_on_brokers([addr], "bad topic!")
        with pytest.raises(ConnectionClosedError):
            admin.create_topic_on_brokers([f"127.0.0.1:{_closed_port()}"], topic)
