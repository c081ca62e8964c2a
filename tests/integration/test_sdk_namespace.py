"""The SDK's ``namespace=`` option against a real name server and broker (in-process, on
127.0.0.1 ephemeral ports): two namespaces use the same topic and group names and never see each
other's messages; applications see bare topics; the broker stores ``NS%name`` (retries in
``%RETRY%NS%group``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import ROOT, auth_cluster
from push_support import wait_until

from orbitmq import (
    Admin,
    ConsumeResult,
    Credentials,
    LocalTransactionState,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionListener,
    TransactionProducer,
)
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import BrokerError, ClientError
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster

FAST = {"rebalance_interval_ms": 1000, "persist_consumer_offset_interval_ms": 1000}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * 1024 * 1024,
                                message_delay_level="1s 1s 1s 1s 1s 1s")
    with EmbeddedCluster(tmp_path_factory.mktemp("ns"), store=store) as c:
        yield c


def create_topic(cluster: EmbeddedCluster, topic: str) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        wait_until(lambda: topic in admin.list_topics(), 10, f"route of {topic}")


def test_two_namespaces_send_and_consume_apart(cluster: EmbeddedCluster) -> None:
    for ns in ("shop", "bank"):
        create_topic(cluster, f"{ns}%Orders")
    for ns in ("shop", "bank"):
        with Producer("Checkout", namesrv=cluster.namesrv, namespace=ns) as producer:
            assert producer.async_client.group == f"{ns}%Checkout"
            msg = Message("Orders", f"{ns}-0".encode())
            result = producer.send(msg)
            assert result.queue.topic == "Orders" and msg.topic == "Orders"
            batch = producer.send_batch([Message("Orders", f"{ns}-{i}".encode()) for i in (1, 2)])
            assert batch.queue.topic == "Orders"
            assert {q.topic for q in producer.fetch_publish_queues("Orders")} == {"Orders"}

    lock, seen = threading.Lock(), []
    failed_once: set[str] = set()

    def listener(messages: list[MessageExt], context: object) -> ConsumeResult:
        with lock:
            seen.extend((m.topic, m.body.decode(), m.reconsume_times) for m in messages)
            fresh = [m.msg_id for m in messages if m.msg_id not in failed_once]
            failed_once.update(fresh)
        return ConsumeResult.RECONSUME_LATER if fresh else ConsumeResult.SUCCESS

    consumer = PushConsumer("Billing", namesrv=cluster.namesrv, namespace="shop", **FAST)
    consumer.subscribe("Orders", "*", listener)
    consumer.start()
    try:
        def all_retried() -> bool:
            with lock:
                return {b for _, b, times in seen if times >= 1} == {"shop-0", "shop-1", "shop-2"}
        wait_until(all_retried, 30, "every shop message consumed again after a failure")
    finally:
        consumer.shutdown()
    assert consumer.group == "shop%Billing"
    with lock:
        assert {t for t, _, _ in seen} == {"Orders"}
        assert {b for _, b, _ in seen} == {"shop-0", "shop-1", "shop-2"}  # nothing of bank's
    with Admin(cluster.namesrv) as admin:
        topics = set(admin.list_topics())
    assert "%RETRY%shop%Billing" in topics and "Orders" not in topics

    with PullConsumer("Audit", namesrv=cluster.namesrv, namespace="bank") as puller:
        queues = puller.fetch_queues("Orders")
        assert {q.topic for q in queues} == {"Orders"}
        got = []
        for mq in queues:
            result = puller.pull(mq, 0, max_nums=32)
            got += [(m.topic, m.body.decode()) for m in result.messages]
            puller.update_offset(mq, result.next_begin_offset)
            assert puller.max_offset(mq) == result.next_begin_offset
        assert sorted(got) == [("Orders", f"bank-{i}") for i in range(3)]
        assert {mq.topic for mq in puller.local_offsets()} == {"Orders"}
        puller.persist_offsets()
        assert all(puller.fetch_offset(mq) >= 0 for mq in queues)


@pytest.mark.parametrize("bad", ["a%b", "white space", "x" * 65, "名前"])
def test_bad_namespaces_are_refused_by_every_client(cluster: EmbeddedCluster, bad: str) -> None:
    for make in (lambda: Producer("G", namesrv=cluster.namesrv, namespace=bad),
                 lambda: PushConsumer("G", namesrv=cluster.namesrv, namespace=bad),
                 lambda: PullConsumer("G", namesrv=cluster.namesrv, namespace=bad)):
        with pytest.raises(ClientError, match="namespace"):
            make()


def test_a_namespace_rule_keeps_a_remoting_user_in_its_namespace(tmp_path: Path) -> None:
    """Rules name stored names: ``Topic:shop%*`` lets carol's SDK clients in namespace shop send
    and pull, and refuses the same topic name in namespace bank."""
    carol = Credentials("carol", "carol-secret-1")
    with auth_cluster(tmp_path, with_alice=False) as secured:
        with Admin(secured.namesrv, credentials=ROOT) as admin:
            for ns in ("shop", "bank"):
                admin.create_topic(f"{ns}%Orders", read_queue_nums=1, write_queue_nums=1)
            admin.create_user(carol.access_key, carol.secret_key)
            admin.create_acl("User:carol", ["Topic:shop%*"], "Pub,Sub")
            admin.create_acl("User:carol", ["Group:shop%*"], "Sub")
        with Producer("Checkout", namesrv=secured.namesrv, namespace="shop",
                      credentials=carol) as producer:
            assert producer.send(Message("Orders", b"allowed")).queue.topic == "Orders"
        with PullConsumer("Audit", namesrv=secured.namesrv, namespace="shop",
                          credentials=carol) as puller:
            [mq] = puller.fetch_queues("Orders")
            assert [m.body for m in puller.pull(mq, 0).messages] == [b"allowed"]
        with Producer("Checkout", namesrv=secured.namesrv, namespace="bank",
                      credentials=carol) as producer, \
                pytest.raises(BrokerError, match="carol"):
            producer.send(Message("Orders", b"refused"))


def test_a_transaction_in_a_namespace_is_checked_back_with_the_bare_topic(tmp_path: Path) -> None:
    seen: list[str] = []

    class Undecided(TransactionListener):
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOWN

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            seen.append(msg.topic)
            return LocalTransactionState.COMMIT

    with EmbeddedCluster(tmp_path, transaction_timeout_ms=500,
                         transaction_check_interval_ms=500) as quick:
        create_topic(quick, "shop%Payments")
        with TransactionProducer("Pay", namesrv=quick.namesrv, namespace="shop",
                                 listener=Undecided(), topics=["Payments"]) as producer:
            producer.send_in_transaction(Message("Payments", b"paid"))
            wait_until(lambda: seen, 30, "the broker's check-back")
        assert seen[0] == "Payments"
        with PullConsumer("Audit", namesrv=quick.namesrv, namespace="shop") as puller:
            got: list[MessageExt] = []

            def committed() -> bool:  # the check's answer is on its way when the listener returns
                got[:] = [m for q in puller.fetch_queues("Payments") for m in puller.pull(q, 0).messages]
                return bool(got)
            wait_until(committed, 30, "the committed message")
            assert [(m.topic, m.body) for m in got] == [("Payments", b"paid")]
