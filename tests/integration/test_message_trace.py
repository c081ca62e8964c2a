"""Message trace end to end: a broker with ``trace_topic_enable``, an SDK producer and push
consumer with ``enable_msg_trace``; ``orbitmq message trace --msg-id`` then shows the message's
producer group and client, the broker and queue that stored it, the consumer group that
consumed it (a failed first attempt, its retry) and the times of each step. A full trace buffer
drops records and counts them, and the sends themselves all succeed."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from orbitmq.cli.main import cli
from orbitmq.client import (
    Admin,
    ConsumeContext,
    ConsumeResult,
    MessageTrace,
    Producer,
    PushConsumer,
    TraceConfig,
)
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.protocol.topics import TRACE_TOPIC
from orbitmq.protocol.trace_codec import TraceType, decode_trace_data
from orbitmq.testing import EmbeddedCluster

TOPIC = "TracedOrders"
WAIT_S = 30.0
FAST = TraceConfig(flush_interval_ms=100)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("trace"), trace_topic_enable=True) as c:
        yield c


def _wait(what: str, check: Any, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_the_broker_creates_the_trace_topic(cluster: EmbeddedCluster) -> None:
    with Admin(cluster.namesrv) as admin:
        route = admin.topic_route(TRACE_TOPIC)
    assert [(q.read_queue_nums, q.write_queue_nums) for q in route.queue_datas] == [(1, 1)]


def test_a_traced_message_shows_its_journey(cluster: EmbeddedCluster) -> None:
    attempts: list[int] = []
    done = threading.Event()

    def listener(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        attempts.append(messages[0].reconsume_times)
        if len(attempts) == 1:
            context.delay_level_when_next_consume = 1  # retried after 1 s
            return ConsumeResult.RECONSUME_LATER
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("trace-workers", cluster.namesrv, enable_msg_trace=True,
                            trace_config=FAST, consume_from="FIRST")
    consumer.subscribe(TOPIC, "*", listener)
    with Producer("trace-producers", cluster.namesrv, enable_msg_trace=True,
                  trace_config=FAST) as producer:
        consumer.start()
        try:
            sent = producer.send(Message(TOPIC, b"order 17", tags="created", keys=["order-17"]))
            assert done.wait(WAIT_S), f"consumed {len(attempts)} time(s)"
        finally:
            consumer.shutdown()
        assert consumer.trace_stats is not None and consumer.trace_stats.dropped == 0
    stats = producer.trace_stats
    assert stats is not None and (stats.appended, stats.sent_records, stats.dropped) == (1, 1, 0)
    assert attempts == [0, 1]

    with Admin(cluster.namesrv) as admin:
        def complete() -> MessageTrace | None:
            t = admin.message_trace(sent.msg_id)
            done_calls = [c for c in t.consumed if c.cost_ms is not None]
            return t if t.published and len(done_calls) == 2 and t.groups else None

        trace = _wait("the trace records", complete)
        raw = admin.query_messages(TRACE_TOPIC, sent.msg_id)
    # the records in the trace topic are RocketMQ's format, found by the message id and key
    records = [r for m in raw for r in decode_trace_data(bytes(m.body))
               if r.msg_id == sent.msg_id]
    assert {r.type for r in records} == {TraceType.PUB, TraceType.SUB_BEFORE, TraceType.SUB_AFTER}
    assert all("order-17" in m.keys and sent.msg_id in m.keys for m in raw)

    [pub] = trace.published
    broker = cluster.brokers[0]
    assert (pub.producer_group, pub.success, pub.broker_addr) == (
        "trace-producers", True, broker.address)
    assert pub.client_host and pub.cost_ms >= 0 and pub.offset_msg_id == sent.offset_msg_id
    assert (trace.topic, trace.tags, trace.keys) == (TOPIC, "created", "order-17")
    assert trace.stored is not None
    assert (trace.stored.queue_id, trace.stored.queue_offset) == (sent.queue.queue_id,
                                                                  sent.queue_offset)
    assert trace.stored.broker_name == sent.queue.broker_name
    assert trace.stored.store_time_ms >= pub.time_ms
    first, second = trace.consumed
    assert (first.consumer_group, first.success, first.outcome, first.retry_times) == (
        "trace-workers", False, "FAILED", 0)
    assert (second.success, second.outcome, second.retry_times) == (True, "SUCCESS", 1)
    assert second.time_ms >= first.time_ms + 900  # the retry's delay level 1 (1 s)
    assert trace.wait_ms(first) is not None and trace.wait_ms(first) >= 0
    [group] = trace.groups
    assert (group.group, group.retries, group.dead_letter_time_ms) == ("trace-workers", 1, None)
    with Admin(cluster.namesrv) as admin:  # the consumer committed its offset at shutdown
        assert admin.message_trace(sent.msg_id).groups[0].consumed is True

    with Admin(cluster.namesrv) as admin:  # by the broker's offset message id: the same journey
        by_offset = admin.message_trace(sent.offset_msg_id)
    assert by_offset.msg_id == sent.msg_id and by_offset.published == trace.published
    out = CliRunner().invoke(cli, ["message", "trace", "--namesrv", cluster.namesrv,
                                   "--msg-id", sent.msg_id])
    assert out.exit_code == 0, out.output
    for expected in ("trace-producers", "trace-workers", broker.address, "#CostTime",
                     f"queue {sent.queue.queue_id} offset {sent.queue_offset}"):
        assert expected in out.output, out.output
    js = CliRunner().invoke(cli, ["message", "trace", "--namesrv", cluster.namesrv,
                                  "--msg-id", sent.msg_id, "--format", "json"])
    assert js.exit_code == 0, js.output
    data = json.loads(js.output)
    assert data["published"][0]["producer_group"] == "trace-producers"
    assert [c["consumer_group"] for c in data["consumed"]] == ["trace-workers"] * 2


def test_an_unknown_id_is_one_line_and_a_failure(cluster: EmbeddedCluster) -> None:
    out = CliRunner().invoke(cli, ["message", "trace", "--namesrv", cluster.namesrv,
                                   "--msg-id", "7F000001000078AB0000DEADBEEF0001"])
    assert out.exit_code != 0
    assert "no trace and no message found" in out.output


def test_a_full_buffer_drops_and_counts_and_never_fails_a_send(cluster: EmbeddedCluster) -> None:
    tiny = TraceConfig(buffer_max=2, batch_records_max=10_000, flush_interval_ms=3_600_000)
    with Producer("trace-tiny", cluster.namesrv, enable_msg_trace=True,
                  trace_config=tiny) as producer:
        results = [producer.send(Message(TOPIC, b"x%d" % i)) for i in range(5)]
        stats = producer.trace_stats
        assert stats is not None and (stats.appended, stats.dropped) == (2, 3)
    assert all(r.status.value == "SEND_OK" for r in results)
    assert (stats.sent_records, stats.lost) == (2, 0)  # shutdown sent what the buffer held


def test_a_traced_transaction_shows_its_half_message_and_its_end(cluster: EmbeddedCluster) -> None:
    from orbitmq.client import LocalTransactionState, TransactionListener, TransactionProducer

    class Commit(TransactionListener):
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    with TransactionProducer("trace-tx", cluster.namesrv, listener=Commit(),
                             enable_msg_trace=True, trace_config=FAST) as producer:
        sent = producer.send_in_transaction(Message(TOPIC, b"paid", keys=["order-18"]))
    with Admin(cluster.namesrv) as admin:
        trace = _wait("the transaction's trace", lambda: (
            lambda t: t if t.published and t.transactions and t.stored else None)(
                admin.message_trace(sent.msg_id)))
    [pub] = trace.published
    assert (pub.producer_group, pub.message_type) == ("trace-tx", "TRANS_HALF")
    [end] = trace.transactions
    assert (end.state, end.from_check, end.producer_group) == ("COMMIT_MESSAGE", False, "trace-tx")
    assert trace.topic == TOPIC and trace.stored is not None
    assert trace.keys == "order-18"


def test_an_untraced_message_shows_the_brokers_side(cluster: EmbeddedCluster) -> None:
    with Producer("untraced", cluster.namesrv) as producer:
        sent = producer.send(Message(TOPIC, b"plain"))
    with Admin(cluster.namesrv) as admin:
        by_offset_id = admin.message_trace(sent.offset_msg_id)
        no_topic = admin.message_trace(sent.msg_id)
        with_topic = _wait("the message's index", lambda: (
            lambda t: t if t.stored else None)(admin.message_trace(sent.msg_id, topic=TOPIC)))
    assert by_offset_id.stored is not None and by_offset_id.topic == TOPIC
    assert by_offset_id.msg_id == sent.msg_id  # the message's own id, from the broker
    assert by_offset_id.published == [] and by_offset_id.consumed == []
    assert no_topic.stored is None and any("give the topic" in p for p in no_topic.problems)
    assert with_topic.stored is not None
    assert (with_topic.stored.queue_id, with_topic.stored.queue_offset) == (
        sent.queue.queue_id, sent.queue_offset)


def test_a_dead_letter_is_shown(cluster: EmbeddedCluster) -> None:
    calls = threading.Event()

    def failing(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        calls.set()
        return ConsumeResult.RECONSUME_LATER

    with Producer("trace-dlq-producers", cluster.namesrv, enable_msg_trace=True,
                  trace_config=FAST) as producer:
        sent = producer.send(Message("TracedDlq", b"poison"))
    consumer = PushConsumer("trace-dlq", cluster.namesrv, enable_msg_trace=True,
                            trace_config=FAST, consume_from="FIRST", max_reconsume_times=0)
    consumer.subscribe("TracedDlq", "*", failing)
    with Admin(cluster.namesrv) as admin:
        consumer.start()
        try:
            assert calls.wait(WAIT_S)
            trace = _wait("the dead letter", lambda: (
                lambda t: t if t.groups and t.groups[0].dead_letter_time_ms else None)(
                    admin.message_trace(sent.msg_id)))
        finally:
            consumer.shutdown()
    [group] = trace.groups
    assert group.group == "trace-dlq" and group.dead_letter_time_ms >= trace.stored.store_time_ms
    out = CliRunner().invoke(cli, ["message", "trace", "--namesrv", cluster.namesrv,
                                   "--msg-id", sent.msg_id])
    assert out.exit_code == 0 and "#DeadLetter" in out.output
    row = next(line for line in out.output.splitlines() if line.startswith("trace-dlq "))
    assert not row.rstrip().endswith(" no"), row


def test_a_checked_transaction_traces_the_checks_answer(tmp_path: Any) -> None:
    from orbitmq.client import LocalTransactionState, TransactionListener, TransactionProducer

    class Later(TransactionListener):
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOWN  # the broker's check decides

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            return LocalTransactionState.COMMIT

    with EmbeddedCluster(tmp_path, trace_topic_enable=True, transaction_timeout_ms=300,
                         transaction_check_interval_ms=200) as checked, \
            TransactionProducer("trace-checked", checked.namesrv, listener=Later(),
                                enable_msg_trace=True, trace_config=FAST) as producer:
        sent = producer.send_in_transaction(Message(TOPIC, b"later"))
        with Admin(checked.namesrv) as admin:
            trace = _wait("the check's answer in the trace", lambda: (
                lambda t: t if any(x.from_check for x in t.transactions) else None)(
                    admin.message_trace(sent.msg_id)))
    states = [(x.state, x.from_check) for x in trace.transactions]
    assert ("UNKNOW", False) in states and ("COMMIT_MESSAGE", True) in states


def test_a_trace_context_is_shown(cluster: EmbeddedCluster) -> None:
    # what the gRPC endpoint stores for a 5.x message's trace_context (test_grpc_trace_context)
    context = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with Producer("ctx-producer", cluster.namesrv) as producer:
        sent = producer.send(Message(TOPIC, b"ctx", properties={"TRACE_CONTEXT": context}))
    with Admin(cluster.namesrv) as admin:
        assert admin.message_trace(sent.offset_msg_id).trace_context == context
    out = CliRunner().invoke(cli, ["message", "trace", "--namesrv", cluster.namesrv,
                                   "--msg-id", sent.offset_msg_id])
    assert out.exit_code == 0 and f"trace context (OpenTelemetry): {context}" in out.output


def test_a_namespaced_clients_trace_names_its_groups_and_topic_without_the_namespace(
        cluster: EmbeddedCluster) -> None:
    """RocketMQ's clients record groups and topics without their namespace (NamespaceUtil's
    withoutNamespace in the trace hooks); the records still go to the one trace topic."""
    done = threading.Event()

    def listener(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("ns-trace-workers", cluster.namesrv, namespace="tenant-a",
                            enable_msg_trace=True, trace_config=FAST, consume_from="FIRST")
    consumer.subscribe(TOPIC, "*", listener)
    with Producer("ns-trace-producers", cluster.namesrv, namespace="tenant-a",
                  enable_msg_trace=True, trace_config=FAST) as producer:
        consumer.start()
        try:
            sent = producer.send(Message(TOPIC, b"order 18", keys=["order-18"]))
            assert done.wait(WAIT_S)
        finally:
            consumer.shutdown()
    with Admin(cluster.namesrv) as admin:
        def complete() -> MessageTrace | None:
            t = admin.message_trace(sent.msg_id)
            return t if t.published and [c for c in t.consumed if c.cost_ms is not None] else None

        trace = _wait("the namespaced client's trace records", complete)
        raw = admin.query_messages(TRACE_TOPIC, sent.msg_id)
    assert trace.published[0].producer_group == "ns-trace-producers"
    assert trace.consumed[0].consumer_group == "ns-trace-workers"
    [pub] = [r for m in raw for r in decode_trace_data(bytes(m.body))
             if r.msg_id == sent.msg_id and r.type is TraceType.PUB]
    assert (pub.topic, pub.group) == (TOPIC, "ns-trace-producers")
    # the admin client has no namespace: it finds the message where the broker stored it
    assert trace.topic == f"tenant-a%{TOPIC}" and trace.stored is not None
    assert [g.group for g in trace.groups] == ["tenant-a%ns-trace-workers"]
