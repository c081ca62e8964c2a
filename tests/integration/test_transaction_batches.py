"""Transactions by the batch (issue 19): the failure cases of test_transactions.py re-run for a
batch of messages stored as one half message, committed or rolled back with one
END_TRANSACTION_BATCH and checked back as a unit; plus the refusals, the verdicts that arrive late
or twice, the check limit, and a broker that crashes in the middle of a batch's commit.

A real name server and broker on 127.0.0.1, the SDK over TCP, producers in child processes for the
crash case, a consumer long-polling the real topic the whole time. Half messages older than 0.5 s
are checked every 0.4 s.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from transaction_support import (
    Child,
    Env,
    HoldingProducer,
    Recorder,
    Watcher,
    children,
    unique,
    wait_until,
)

from orbitmq.broker.transaction.batch import committed_batch
from orbitmq.client import PushConsumer
from orbitmq.client.consumer.consume_types import ConsumeResult
from orbitmq.client.producer.transaction_producer import LocalTransactionState, TransactionProducer
from orbitmq.errors import BrokerError, ClientError, ConnectionClosedError, TimeoutError
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import OrbitMQRequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import (
    EndTransactionBatchRequestHeader,
    SendTransactionBatchRequestHeader,
)
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.protocol.stored import EncodedBatch

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = Env(tmp_path_factory.mktemp("txb"), transaction_timeout_ms=500,
            transaction_check_interval_ms=400)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def kids() -> Iterator[list[Child]]:
    yield from children()


def batch(topic: str, tag: str, n: int = 3) -> list[Message]:
    return [Message(topic, f"{tag}-{i}".encode(), keys=[f"{tag}-k{i}"], tags="t") for i in range(n)]


def bodies(messages: list[MessageExt]) -> list[bytes]:
    return sorted(m.body for m in messages)


def invoke(env: Env, code: int, fields: dict[str, str], body: bytes = b"") -> RemotingCommand:
    cmd = RemotingCommand.request(code, dict(fields), body=body)
    return env.loop.call(env.raw.invoke(env.broker_addr, cmd, 5.0), 10)


# -- failure case 1: the batch cannot be stored --------------------------------------------------
def test_broker_down_batch_not_stored_local_transaction_never_runs(tmp_path: Path) -> None:
    env = Env(tmp_path, reject_transaction_message=True)
    try:
        topic = env.create_topic("TxbDown")
        rec = Recorder()
        with TransactionProducer("txb-down", env.ns, listener=rec, send_timeout=2.0) as producer:
            with pytest.raises(BrokerError) as refused:  # a broker refusing transactions
                producer.send_batch_in_transaction(batch(topic, "no"), COMMIT)
            assert refused.value.code == ResponseCode.NO_PERMISSION
            env.cluster.stop_broker(0)  # and a broker that is gone
            with pytest.raises((ConnectionClosedError, TimeoutError, BrokerError)):
                producer.send_batch_in_transaction(batch(topic, "never"), COMMIT)
        assert rec.executed == []
    finally:
        env.close()


def test_malformed_batches_are_refused_naming_the_problem(env: Env) -> None:
    topic = env.create_topic(unique("TxbBad"))
    entry = (0, b"x", {"UNIQ_KEY": "U1"})

    def send(entries: list[tuple[int, bytes, dict[str, str]]], **fields: object) -> RemotingCommand:
        header = dataclasses.replace(SendTransactionBatchRequestHeader(
            "txb-bad", topic, -1, 1, len(entries), "UNIQ_KEY\x01TX1\x02"), **fields)
        return invoke(env, OrbitMQRequestCode.SEND_TRANSACTION_BATCH, header.to_ext_fields(),
                      encode_batch(entries))

    cases = [
        (send([(0, b"x", {})]), ResponseCode.MESSAGE_ILLEGAL, "needs a UNIQ_KEY"),
        (send([entry, (0, b"y", {"UNIQ_KEY": "U2", "DELAY": "3"})]), ResponseCode.MESSAGE_ILLEGAL,
         "delayed or transaction"),
        (send([entry], count=2), ResponseCode.INVALID_PARAMETER, "count: 2"),
        (send([entry], properties="KEYS\x01k\x02"), ResponseCode.MESSAGE_ILLEGAL,
         "transaction id as UNIQ_KEY"),
        (send([entry], count=0), ResponseCode.INVALID_PARAMETER, "count"),
    ]
    for resp, code, remark in cases:
        assert (resp.code, remark in (resp.remark or "")) == (code, True), resp.remark
    truncated = invoke(env, OrbitMQRequestCode.SEND_TRANSACTION_BATCH, SendTransactionBatchRequestHeader(
        "txb-bad", topic, -1, 1, 1, "UNIQ_KEY\x01TX1\x02").to_ext_fields(), encode_batch([entry])[:-3])
    assert truncated.code == ResponseCode.MESSAGE_ILLEGAL and "malformed" in truncated.remark
    assert env.stored(topic) == [] and not [t for t in env.pending().values()
                                            if t.producer_group == "txb-bad"]


# -- failure case 2: the local transaction fails ---------------------------------------------------
def test_failed_local_transaction_rolls_the_batch_back_and_no_consumer_sees_it(env: Env) -> None:
    topic = env.create_topic(unique("TxbRollback"))
    watcher = Watcher(env, topic)
    rec = Recorder(on_check=ROLLBACK)
    try:
        with TransactionProducer(unique("txb-rb"), env.ns, listener=rec) as producer:
            declined = producer.send_batch_in_transaction(batch(topic, "declined"), ROLLBACK)
            rec.on_execute = RuntimeError("database down")
            crashed = producer.send_batch_in_transaction(batch(topic, "crashed"))
            assert (declined.local_state, crashed.local_state) == (ROLLBACK, UNKNOWN)
            assert rec.executed == [declined.transaction_id, crashed.transaction_id]
            wait_until(lambda: rec.batch_checks_of(crashed.transaction_id), what="a batch check")
            env.wait_resolved(declined.transaction_id, crashed.transaction_id)
            assert not rec.batch_checks_of(declined.transaction_id)
            rec.on_execute = COMMIT
            control = producer.send_batch_in_transaction(batch(topic, "control"))
        wait_until(lambda: len(watcher.ids()) >= 3, what="the control batch")
    finally:
        seen = watcher.stop()
    assert len(seen) == 3 and bodies(env.stored(topic)) == [b"control-0", b"control-1", b"control-2"]
    assert control.batch_size == 3 and not rec.checks, "batches are never checked one by one"


def test_batch_invisible_until_commit_and_checked_as_a_unit(env: Env) -> None:
    topic = env.create_topic(unique("TxbInvisible"))
    watcher = Watcher(env, topic)
    rec = Recorder(on_execute=None, on_check=UNKNOWN)
    try:
        with TransactionProducer(unique("txb-slow"), env.ns, listener=rec) as producer:
            sent = producer.send_batch_in_transaction(batch(topic, "slow", 4),
                                                      properties={"order": "17"})
            assert sent.local_state is UNKNOWN and sent.batch_size == 4
            wait_until(lambda: len(rec.batch_checks_of(sent.transaction_id)) >= 2,
                       what="two checks of the batch")
            assert watcher.ids() == [] and env.stored(topic) == []
            first = rec.batch_checks_of(sent.transaction_id)[0]
            assert (first.topic, first.properties, first.check_times) == (topic, {"order": "17"}, 1)
            assert [m.body for m in first.messages] == [f"slow-{i}".encode() for i in range(4)]
            rec.on_check = COMMIT
            wait_until(lambda: len(watcher.ids()) >= 4, what="the committed batch")
            env.wait_resolved(sent.transaction_id)
    finally:
        seen = watcher.stop()
    delivered = sorted(env.stored(topic), key=lambda m: m.queue_offset)
    assert [m.body for m in delivered] == [f"slow-{i}".encode() for i in range(4)]
    assert sorted(seen) == sorted(m.msg_id for m in delivered) == sorted(first.msg_ids)
    assert len({m.queue_id for m in delivered}) == 1  # one queue, in order
    assert [m.keys for m in delivered] == [[f"slow-k{i}"] for i in range(4)]
    assert all("TRAN_MSG" not in m.properties and "TRAN_BATCH" not in m.properties
               for m in delivered)
    counts = [b.check_times for b in rec.batch_checks_of(sent.transaction_id)]
    assert counts == list(range(1, len(counts) + 1))


# -- failure case 3: the producer dies between the batch and END_TRANSACTION_BATCH -----------------
@pytest.mark.parametrize("outcome", ["commit", "fail"])
def test_killed_producer_batch_is_checked_back_through_another_process(
        env: Env, kids: list[Child], tmp_path: Path, outcome: str) -> None:
    topic = env.create_topic(unique("TxbCrash"))
    group = unique("txb-crash")
    db = str(tmp_path / "orders.db")
    watcher = Watcher(env, topic)
    try:
        first = Child("execute-batch", env.ns, group, db, topic, "order-17", outcome)
        kids.append(first)
        tx_id = first.wait_line("local-done").split()[1]
        first.kill()
        assert env.pending()[tx_id].topic == topic
        second = Child("check", env.ns, group, db, topic)
        kids.append(second)
        second.wait_line("ready")
        verdict = "COMMIT" if outcome == "commit" else "ROLLBACK"
        assert second.wait_line(f"checked {tx_id}") == f"checked {tx_id} {verdict}"
        env.wait_resolved(tx_id)
        if outcome == "commit":
            wait_until(lambda: len(watcher.ids()) >= 3, what="the committed batch")
        assert second.finish() == 0
    finally:
        seen = watcher.stop()
    delivered = env.stored(topic)
    if outcome == "commit":
        assert len(seen) == 3
        assert sorted((m.body, tuple(m.keys)) for m in delivered) == [
            (f"order order-17-{i}".encode(), (f"order-17-{i}",)) for i in range(3)]
    else:
        assert seen == [] and delivered == []


# -- failure case 4: END_TRANSACTION_BATCH is lost --------------------------------------------------
def test_lost_end_of_a_batch_is_resolved_by_the_check(env: Env) -> None:
    topic = env.create_topic(unique("TxbLost"))
    watcher = Watcher(env, topic)
    rec = Recorder()
    producer = HoldingProducer(unique("txb-lost"), env.ns, listener=rec)
    env.loop.call(producer.start())
    try:
        sent = env.loop.call(producer.send_batch_in_transaction(batch(topic, "paid")))
        assert sent.local_state is COMMIT and len(producer.held) == 1
        assert producer.held[0].code == OrbitMQRequestCode.END_TRANSACTION_BATCH
        assert sent.transaction_id in env.pending()
        (check, *_) = wait_until(lambda: rec.batch_checks_of(sent.transaction_id), what="a check")
        assert (check.topic, len(check.messages), check.check_times) == (topic, 3, 1)
        env.wait_resolved(sent.transaction_id)
        wait_until(lambda: len(watcher.ids()) >= 3, what="the committed batch")
    finally:
        env.loop.call(producer.shutdown())
        seen = watcher.stop()
    assert len(seen) == 3 and bodies(env.stored(topic)) == [b"paid-0", b"paid-1", b"paid-2"]


# -- failure case 5: the consumer fails after the commit -------------------------------------------
def test_consumer_failing_after_a_batch_commit_gets_each_message_until_it_succeeds(env: Env) -> None:
    topic = env.create_topic(unique("TxbRetry"), queues=1)
    attempts: dict[bytes, int] = {}
    done = threading.Event()
    lock = threading.Lock()
    consumer = PushConsumer(unique("coupon-batch"), env.ns, rebalance_interval_ms=500,
                            pull_suspend_time_ms=1000, await_termination_ms=2000)

    @consumer.subscribe(topic)
    def grant(messages: list[MessageExt], context: object) -> ConsumeResult:
        with lock:
            for m in messages:
                attempts[m.body] = attempts.get(m.body, 0) + 1
            if min(attempts.values()) < 2 or len(attempts) < 2:
                raise RuntimeError("coupon service down")
            if all(n >= 2 for n in attempts.values()) and len(attempts) == 2:
                done.set()
        return ConsumeResult.SUCCESS

    consumer.start()
    try:
        wait_until(lambda: consumer.assigned_queues(topic), what="the consumer's queues")
        with TransactionProducer(unique("order-batch"), env.ns, listener=Recorder()) as producer:
            sent = producer.send_batch_in_transaction(batch(topic, "paid", 2))
        assert sent.local_state is COMMIT
        wait_until(done.is_set, what="both messages consumed after retries")
    finally:
        consumer.shutdown()
    assert set(attempts) == {b"paid-0", b"paid-1"} and all(n >= 2 for n in attempts.values())


# -- exactly once --------------------------------------------------------------------------------
def test_late_repeated_and_misdirected_batch_verdicts_never_deliver_twice(env: Env) -> None:
    topic = env.create_topic(unique("TxbOnce"))
    group = unique("txb-once")
    with TransactionProducer(group, env.ns, listener=Recorder(on_check=UNKNOWN)) as producer:
        sent = producer.send_batch_half(batch(topic, "once"))
        single = producer.send_in_transaction(Message(topic, b"single"), UNKNOWN)
        _, _, clo = decode_offset_msg_id(sent.offset_msg_id)
        end = EndTransactionBatchRequestHeader(group, sent.queue_offset, clo, 8,
                                               sent.transaction_id)
        as_single = EndTransactionRequestHeader(group, sent.queue_offset, clo, 8,
                                                sent.transaction_id)
        refused = env.end_transaction(as_single.to_ext_fields())
        assert refused.code == ResponseCode.SYSTEM_ERROR and "END_TRANSACTION_BATCH" in refused.remark
        wrong_id = dataclasses.replace(end, transaction_id="NOT-THIS-ONE")
        assert "transaction id wrong" in invoke(env, OrbitMQRequestCode.END_TRANSACTION_BATCH,
                                                 wrong_id.to_ext_fields()).remark
        _, _, single_clo = decode_offset_msg_id(single.offset_msg_id)
        on_single = EndTransactionBatchRequestHeader(group, single.queue_offset, single_clo, 8,
                                                     single.transaction_id)
        assert "single transaction" in invoke(env, OrbitMQRequestCode.END_TRANSACTION_BATCH,
                                              on_single.to_ext_fields()).remark
        first = invoke(env, OrbitMQRequestCode.END_TRANSACTION_BATCH, end.to_ext_fields())
        assert first.code == ResponseCode.SUCCESS and first.ext_fields["count"] == "3"
        producer.end_transaction(sent, COMMIT)  # the SDK by receipt: answered, nothing stored
        again = invoke(env, OrbitMQRequestCode.END_TRANSACTION_BATCH, end.to_ext_fields())
        assert (again.code, again.remark) == (ResponseCode.SUCCESS, "transaction already committed")
        with pytest.raises(BrokerError) as conflict:
            producer.end_transaction(sent, ROLLBACK)
        assert conflict.value.code == ResponseCode.TRANSACTION_FAILED
        with pytest.raises(ClientError):
            producer.end_transaction(sent, UNKNOWN)
        producer.end_transaction(single, ROLLBACK)
    assert bodies(env.stored(topic)) == [b"once-0", b"once-1", b"once-2"]


def test_a_broker_crash_in_the_middle_of_a_commit_delivers_the_rest_once(tmp_path: Path) -> None:
    """The commit's append was cut after two of five messages and its op message never written
    (what a crash leaves: the store keeps a prefix of an append). The restarted broker finds the
    prefix and stores the rest; the producer's late verdict is answered without a second copy."""
    env = Env(tmp_path, transaction_timeout_ms=300, transaction_check_interval_ms=200)
    try:
        topic = env.create_topic("TxbCrashCommit", queues=1)
        rec = Recorder(on_check=UNKNOWN)
        with TransactionProducer("txb-cut", env.ns, listener=rec) as producer:
            sent = producer.send_batch_half(batch(topic, "cut", 5))
            broker = env.cluster.brokers[0]
            svc = broker.transactions
            half = svc.half.read_at(decode_offset_msg_id(sent.offset_msg_id)[2])

            async def append_prefix() -> None:
                whole = committed_batch(half, svc.half.store_host, svc.store)
                assert isinstance(whole, EncodedBatch)
                cut = whole.rel_positions[2]
                prefix = EncodedBatch(whole.topic, whole.queue_id, whole.id_prefix,
                                      whole.blob[:cut], whole.rel_positions[:2])
                assert svc.ctx.saver.append(prefix).ok

            env.cluster.call(append_prefix())
            wait_until(lambda: len(env.stored(topic)) == 2, what="the cut commit's prefix")
            port = broker.server.port
            env.cluster.stop_broker(0)
            env.cluster.start_broker(0, dataclasses.replace(env.cluster.broker_config(0),
                                                            listen_port=port))
            env.wait_resolved(sent.transaction_id)  # recovered by the check service's scan
            producer.end_transaction(sent, COMMIT)  # late: already committed, nothing stored
        got = sorted(env.stored(topic), key=lambda m: m.queue_offset)
        assert [m.body for m in got] == [f"cut-{i}".encode() for i in range(5)]
        assert len({m.msg_id for m in got}) == 5
        assert rec.batch_checks_of(sent.transaction_id) == [], "a prefix means commit: not asked"
    finally:
        env.close()


def test_after_check_max_a_batch_is_discarded_never_delivered(tmp_path: Path) -> None:
    env = Env(tmp_path, transaction_timeout_ms=300, transaction_check_interval_ms=200,
              transaction_check_max=2)
    try:
        topic = env.create_topic("TxbCheckMax")
        watcher = Watcher(env, topic)
        rec = Recorder(on_check=UNKNOWN)
        with TransactionProducer("txb-max", env.ns, listener=rec) as producer:
            sent = producer.send_batch_in_transaction(batch(topic, "undecided"), UNKNOWN)
            env.wait_resolved(sent.transaction_id)  # discarded
            with pytest.raises(BrokerError) as late:
                producer.end_transaction(sent, COMMIT)
            assert late.value.code == ResponseCode.TRANSACTION_FAILED
        assert [b.check_times for b in rec.batch_checks_of(sent.transaction_id)] == [1, 2]
        assert watcher.stop() == [] and env.stored(topic) == []
    finally:
        env.close()


def test_pending_batches_are_listed_with_their_size(env: Env) -> None:
    topic = env.create_topic(unique("TxbList"))
    with TransactionProducer(unique("txb-list"), env.ns, listener=Recorder(on_check=UNKNOWN)) as p:
        sent = p.send_batch_half(batch(topic, "listed", 7))
        single = p.send_in_transaction(Message(topic, b"one"), UNKNOWN)
        pending = env.pending()
        assert (pending[sent.transaction_id].messages, pending[single.msg_id].messages) == (7, 1)
        p.end_transaction(sent, ROLLBACK)
        p.end_transaction(single, ROLLBACK)
