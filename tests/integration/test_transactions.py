"""Transactional messages end to end (issue 5): a real name server and broker on 127.0.0.1, the SDK
over TCP, and producers in child processes (with a SQLite database of their own) for the crash
cases.

The failure cases of the seed documents, each with a consumer long-polling the real topic the whole
time, so that "never visible" means what a subscriber would see: the half message cannot be stored;
the local transaction fails; the producer dies (kill -9) between its half message and
END_TRANSACTION; END_TRANSACTION is lost; the consumer fails after the commit (retried through
%RETRY%group, every delay level set to 1 s here). And: exactly one delivery despite late and repeated verdicts,
checking that survives a broker restart, the check limit, and ``orbitmq transaction list``.

Intervals are short by config: half messages older than 0.5 s are checked every 0.4 s.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from transaction_support import (
    WAIT_S,
    Child,
    Env,
    HoldingProducer,
    Recorder,
    Watcher,
    check_times,
    children,
    unique,
    wait_until,
)

from orbitmq.cli.main import cli
from orbitmq.client import PushConsumer, SendStatus
from orbitmq.client.consumer.consume_types import ConsumeResult
from orbitmq.client.producer.transaction_producer import (
    LocalTransactionState,
    TransactionListener,
    TransactionProducer,
)
from orbitmq.errors import BrokerError, ConnectionClosedError, TimeoutError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.message import Message, MessageExt
from orbitmq.protocol.msgid import decode_offset_msg_id

COMMIT = LocalTransactionState.COMMIT
ROLLBACK = LocalTransactionState.ROLLBACK
UNKNOWN = LocalTransactionState.UNKNOWN
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    e = Env(tmp_path_factory.mktemp("tx"), transaction_timeout_ms=500,
            transaction_check_interval_ms=400)
    try:
        yield e
    finally:
        e.close()


@pytest.fixture
def kids() -> Iterator[list[Child]]:
    yield from children()


# -- failure case 1: the half message cannot be stored --------------------------------------------
def test_broker_down_half_message_not_stored_local_transaction_never_runs(tmp_path: Path) -> None:
    env = Env(tmp_path)
    try:
        topic = env.create_topic("TxBrokerDown")
        rec = Recorder()
        with TransactionProducer("tx-down", env.ns, listener=rec, send_timeout=2.0) as producer:
            assert producer.fetch_publish_queues(topic)  # the route is known: the broker then dies
            env.cluster.stop_broker(0)
            with pytest.raises((ConnectionClosedError, TimeoutError, BrokerError)):
                producer.send_in_transaction(Message(topic, b"never"), COMMIT)
        assert rec.executed == []
    finally:
        env.close()


def test_broker_refusing_transactions_local_transaction_never_runs(tmp_path: Path) -> None:
    env = Env(tmp_path, reject_transaction_message=True)
    try:
        topic = env.create_topic("TxRejected")
        rec = Recorder()
        with TransactionProducer("tx-rejected", env.ns, listener=rec) as producer:
            with pytest.raises(BrokerError) as refused:
                producer.send_in_transaction(Message(topic, b"no"), COMMIT)
            assert refused.value.code == ResponseCode.NO_PERMISSION
            assert "transaction message is forbidden" in refused.value.remark
            assert producer.send(Message(topic, b"plain")).status is SendStatus.OK
        assert rec.executed == []
        assert [m.body for m in env.stored(topic)] == [b"plain"]
    finally:
        env.close()


# -- failure case 2: the local transaction fails ---------------------------------------------------
def test_failed_local_transaction_rolls_back_and_no_consumer_sees_it(env: Env) -> None:
    topic = env.create_topic(unique("TxRollback"))
    watcher = Watcher(env, topic)
    rec = Recorder(on_check=ROLLBACK)  # asked later, the database says: not done
    try:
        with TransactionProducer(unique("tx-rb"), env.ns, listener=rec) as producer:
            declined = producer.send_in_transaction(Message(topic, b"declined"), ROLLBACK)
            rec.on_execute = RuntimeError("database down")
            crashed = producer.send_in_transaction(Message(topic, b"crashed"))
            assert (declined.local_state, crashed.local_state) == (ROLLBACK, UNKNOWN)
            assert rec.executed == [declined.transaction_id, crashed.transaction_id]
            wait_until(lambda: rec.checks_of(crashed.msg_id), what="a check of the failed one")
            env.wait_resolved(declined.msg_id, crashed.msg_id)
            assert not rec.checks_of(declined.msg_id), "rolled back at once: nothing to check"
            rec.on_execute = COMMIT
            control = producer.send_in_transaction(Message(topic, b"control"))
        wait_until(lambda: control.msg_id in watcher.ids(), what="the control message")
    finally:
        seen = watcher.stop()
    assert seen == [control.msg_id]
    assert [m.msg_id for m in env.stored(topic)] == [control.msg_id]


def test_half_message_invisible_until_commit_while_consumers_long_poll(env: Env) -> None:
    topic = env.create_topic(unique("TxInvisible"))
    watcher = Watcher(env, topic)
    rec = Recorder(on_execute=None, on_check=UNKNOWN)
    try:
        with TransactionProducer(unique("tx-slow"), env.ns, listener=rec) as producer:
            result = producer.send_in_transaction(Message(topic, b"slow", tags="t"))
            assert result.local_state is UNKNOWN and result.queue.topic == topic
            wait_until(lambda: len(rec.checks_of(result.msg_id)) >= 2, what="two checks")
            assert watcher.ids() == [] and env.stored(topic) == []
            rec.on_check = COMMIT
            wait_until(lambda: result.msg_id in watcher.ids(), what="the committed message")
            env.wait_resolved(result.msg_id)
    finally:
        seen = watcher.stop()
    assert seen == [result.msg_id]
    counts = [check_times(m) for m in rec.checks_of(result.msg_id)]
    assert counts == list(range(1, len(counts) + 1))  # every check counted, one by one
    (delivered,) = env.stored(topic)
    assert (delivered.body, delivered.tags, delivered.topic) == (b"slow", "t", topic)
    assert "TRAN_MSG" not in delivered.properties and "REAL_TOPIC" not in delivered.properties


# -- failure case 3: the producer dies between half message and END_TRANSACTION -------------------
@pytest.mark.parametrize("outcome", ["commit", "fail"])
def test_killed_producer_is_checked_back_through_another_process_of_its_group(
        env: Env, kids: list[Child], tmp_path: Path, outcome: str) -> None:
    topic = env.create_topic(unique("TxCrash"))
    group = unique("tx-crash")
    db = str(tmp_path / "orders.db")
    watcher = Watcher(env, topic)
    try:
        first = Child("execute", env.ns, group, db, topic, "order-17", outcome)
        kids.append(first)
        tx_id = first.wait_line("local-done").split()[1]
        first.kill()
        assert tx_id in env.pending()
        second = Child("check", env.ns, group, db, topic)
        kids.append(second)
        second.wait_line("ready")
        verdict = "COMMIT" if outcome == "commit" else "ROLLBACK"
        assert second.wait_line(f"checked {tx_id}") == f"checked {tx_id} {verdict}"
        env.wait_resolved(tx_id)
        if outcome == "commit":
            wait_until(lambda: tx_id in watcher.ids(), what="the committed message")
        assert second.finish() == 0
    finally:
        seen = watcher.stop()
    delivered = [m for m in env.stored(topic) if m.msg_id == tx_id]
    if outcome == "commit":
        assert seen == [tx_id]
        assert [(m.body, m.keys) for m in delivered] == [(b"order order-17", ["order-17"])]
    else:
        assert seen == [] and delivered == []


# -- failure case 4: END_TRANSACTION is lost -------------------------------------------------------
def test_lost_end_transaction_is_resolved_by_the_check(env: Env) -> None:
    topic = env.create_topic(unique("TxLost"))
    watcher = Watcher(env, topic)
    rec = Recorder()  # committed locally, and says so when asked
    producer = HoldingProducer(unique("tx-lost"), env.ns, listener=rec)
    env.loop.call(producer.start())
    try:
        result = env.loop.call(producer.send_in_transaction(Message(topic, b"paid")))
        assert result.local_state is COMMIT and len(producer.held) == 1  # never reached the broker
        assert result.msg_id in env.pending()
        (check, *_) = wait_until(lambda: rec.checks_of(result.msg_id), what="the check-back")
        assert (check.topic, check.body, check_times(check)) == (topic, b"paid", 1)
        env.wait_resolved(result.msg_id)
        wait_until(lambda: result.msg_id in watcher.ids(), what="the committed message")
    finally:
        env.loop.call(producer.shutdown())
        seen = watcher.stop()
    assert seen == [result.msg_id]
    assert [m.msg_id for m in env.stored(topic)] == [result.msg_id]


def test_a_check_answered_while_the_producer_closes_still_commits(env: Env) -> None:
    """Closing a producer lets a check's verdict that is on its way go out: dropped, the broker
    would find no producer of the group to ask again and discard the transaction."""
    topic = env.create_topic(unique("TxClose"))
    asked, answer = threading.Event(), threading.Event()

    class SlowCheck(TransactionListener):
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return UNKNOWN

        def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
            asked.set()
            answer.wait(WAIT_S)
            return COMMIT

    producer = TransactionProducer(unique("tx-close"), env.ns, listener=SlowCheck(),
                                   topics=[topic]).start()
    verdict_later = threading.Timer(0.3, answer.set)  # the verdict comes while closing
    try:
        result = producer.send_in_transaction(Message(topic, b"paid"))
        assert asked.wait(WAIT_S), "the broker's check-back"
        verdict_later.start()
    finally:
        producer.shutdown()
        verdict_later.cancel()
        answer.set()
    wait_until(lambda: [m.msg_id for m in env.stored(topic)] == [result.msg_id],
               what="the committed message")
    env.wait_resolved(result.msg_id)


# -- failure case 5: the consumer fails after the commit -------------------------------------------
def test_consumer_failing_after_commit_gets_the_message_until_it_succeeds(env: Env) -> None:
    topic = env.create_topic(unique("TxRetry"))
    attempts: list[tuple[str, int]] = []
    granted = threading.Event()
    consumer = PushConsumer(unique("coupon-service"), env.ns, rebalance_interval_ms=500,
                            pull_suspend_time_ms=1000, await_termination_ms=2000)

    @consumer.subscribe(topic)
    def grant_coupon(messages: list[MessageExt], context: object) -> ConsumeResult:
        for m in messages:
            attempts.append((m.msg_id, m.reconsume_times))
        if len(attempts) < 3:
            raise RuntimeError("coupon service down")  # == RECONSUME_LATER
        granted.set()
        return ConsumeResult.SUCCESS

    consumer.start()
    try:
        wait_until(lambda: consumer.assigned_queues(topic), what="the consumer's queues")
        with TransactionProducer(unique("order-service"), env.ns, listener=Recorder()) as producer:
            paid = producer.send_in_transaction(Message(topic, b"order paid", keys=["order-5"]))
        assert paid.local_state is COMMIT
        wait_until(granted.is_set, what="the coupon granted at the third attempt")
    finally:
        consumer.shutdown()
    assert attempts == [(paid.msg_id, 0), (paid.msg_id, 1), (paid.msg_id, 2)]


# -- exactly once ------------------------------------------------------------------------------
def test_late_and_repeated_verdicts_never_deliver_twice(env: Env) -> None:
    topic = env.create_topic(unique("TxOnce"))
    group = unique("tx-once")
    rec = Recorder()
    producer = HoldingProducer(group, env.ns, listener=rec)
    env.loop.call(producer.start())
    try:
        result = env.loop.call(producer.send_in_transaction(Message(topic, b"once")))
        (check, *_) = wait_until(lambda: rec.checks_of(result.msg_id), what="the check-back")
        env.wait_resolved(result.msg_id)  # committed through the check, on a re-stored copy
    finally:
        env.loop.call(producer.shutdown())
    late = producer.held[0].ext_fields  # the producer's own verdict, for the first copy, late
    for _ in range(2):
        answer = env.end_transaction(late)
        assert (answer.code, answer.remark) == (ResponseCode.SUCCESS, "transaction already committed")
    conflicting = env.end_transaction({**late, "commitOrRollback": "12"})
    assert conflicting.code == ResponseCode.TRANSACTION_FAILED
    again = EndTransactionRequestHeader(group, check.queue_offset, check.commit_log_offset, 8,
                                        check.msg_id, True, check.msg_id).to_ext_fields()
    assert env.end_transaction(again).code == ResponseCode.SUCCESS  # a repeated check answer
    assert [m.msg_id for m in env.stored(topic)] == [result.msg_id]


# -- restart and limits ------------------------------------------------------------------------
def test_broker_restart_keeps_checking_pending_half_messages(tmp_path: Path) -> None:
    env = Env(tmp_path, transaction_timeout_ms=300, transaction_check_interval_ms=200)
    try:
        topic = env.create_topic("TxRestart")
        rec = Recorder(on_check=UNKNOWN)
        with TransactionProducer("tx-restart", env.ns, listener=rec,
                                 heartbeat_broker_interval=0.2) as producer:
            result = producer.send_in_transaction(Message(topic, b"across a restart"), UNKNOWN)
            wait_until(lambda: rec.checks_of(result.msg_id), what="a check before the restart")
            port = env.cluster.brokers[0].server.port
            env.cluster.stop_broker(0)
            rec.on_check = COMMIT  # only a broker started after this point can get this answer
            env.cluster.start_broker(0, dataclasses.replace(env.cluster.broker_config(0),
                                                            listen_port=port))
            wait_until(lambda: _stored_once_routed(env, topic), what="the commit after the restart")
        counts = [check_times(m) for m in rec.checks_of(result.msg_id)]
        # Strictly rising, never back to 1 (a check made while the producer had not yet
        # heartbeated the restarted broker counts without reaching it, as in RocketMQ).
        assert counts[0] == 1 and all(a < b for a, b in itertools.pairwise(counts)), counts
        assert len(counts) >= 2
        assert [m.msg_id for m in env.stored(topic)] == [result.msg_id]
        assert result.msg_id not in env.pending()
    finally:
        env.close()


def test_after_check_max_the_message_is_discarded_never_delivered(tmp_path: Path) -> None:
    env = Env(tmp_path, transaction_timeout_ms=300, transaction_check_interval_ms=200,
              transaction_check_max=2)
    try:
        topic = env.create_topic("TxCheckMax")
        watcher = Watcher(env, topic)
        rec = Recorder(on_check=UNKNOWN)
        with TransactionProducer("tx-max", env.ns, listener=rec) as producer:
            result = producer.send_in_transaction(Message(topic, b"undecided"), UNKNOWN)
            env.wait_resolved(result.msg_id)  # discarded
            late = EndTransactionRequestHeader(
                "tx-max", result.queue_offset, decode_offset_msg_id(result.offset_msg_id)[2], 8,
                result.msg_id, False, result.transaction_id).to_ext_fields()
            assert env.end_transaction(late).code == ResponseCode.TRANSACTION_FAILED
        assert [check_times(m) for m in rec.checks_of(result.msg_id)] == [1, 2]
        kept = wait_until(lambda: _query(env, TRANS_CHECK_MAX_TIME_TOPIC, result.msg_id),
                          what="the discarded message in TRANS_CHECK_MAX_TIME_TOPIC")
        assert [m.body for m in kept] == [b"undecided"]
        assert watcher.stop() == [] and env.stored(topic) == []
    finally:
        env.close()


def _stored_once_routed(env: Env, topic: str) -> list:
    try:
        return env.stored(topic)
    except BrokerError:  # no route while the restarted broker has not registered yet
        return []


def _query(env: Env, topic: str, key: str) -> list:
    try:
        return env.admin.query_messages(topic, key)
    except BrokerError:  # no route yet: the topic is created with the first discard
        return []


# -- the CLI ---------------------------------------------------------------------------------------
def test_cli_transaction_list_shows_unresolved_with_age_and_checks(env: Env) -> None:
    topic = env.create_topic(unique("TxCli"))
    group = unique("tx-cli")
    rec = Recorder(on_check=UNKNOWN)
    runner = CliRunner()
    with TransactionProducer(group, env.ns, listener=rec) as producer:
        result = producer.send_in_transaction(Message(topic, b"pending", keys=["order-9"]), UNKNOWN)
        wait_until(lambda: (t := env.pending().get(result.msg_id)) and t.check_times >= 1,
                   what="a checked pending transaction")
        text = runner.invoke(cli, ["transaction", "list", "--namesrv", env.ns])
        as_json = runner.invoke(cli, ["transaction", "list", "--namesrv", env.ns, "--format", "json"])
        rec.on_check = ROLLBACK
        env.wait_resolved(result.msg_id)
    assert text.exit_code == 0, text.output
    assert text.output.splitlines()[0].split()[:5] == ["TOPIC", "MSG_ID", "PRODUCER_GROUP", "AGE",
                                                       "CHECKS"]
    (line,) = [ln for ln in text.output.splitlines() if result.msg_id in ln]
    assert line.split()[0] == topic and group in line and "order-9" in line
    assert as_json.exit_code == 0, as_json.output
    (row,) = [r for r in map(json.loads, as_json.output.splitlines()) if r["msg_id"] == result.msg_id]
    assert (row["topic"], row["producer_group"], row["keys"]) == (topic, group, "order-9")
    assert row["check_times"] >= 1 and row["age_ms"] >= 500
