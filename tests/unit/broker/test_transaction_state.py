"""The pure parts of transactional messages: state transitions on both sides, verdict coercion, and
the half / committed / re-stored / op messages the broker builds."""

from __future__ import annotations

import pytest

from orbitmq.broker.context import BrokerHost
from orbitmq.broker.transaction.half_store import HalfStore, check_times_of, origin_of
from orbitmq.broker.transaction.state import TRANSITIONS, HalfState, ResolutionTable
from orbitmq.client.producer.transaction_state import (
    PHASE_TRANSITIONS,
    LocalTransactionState,
    TransactionPhase,
    TransactionTracker,
    coerce_state,
    transaction_id,
)
from orbitmq.client.results import SendResult, SendStatus
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message, MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store.message_inner import MessageInner

MQ = MessageQueue("T", "broker-a", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


# -- broker side -------------------------------------------------------------------------------
def test_only_pending_transactions_move_and_terminal_states_stay() -> None:
    assert {s for s, nxt in TRANSITIONS.items() if not nxt} == {
        HalfState.COMMITTED, HalfState.ROLLED_BACK, HalfState.DISCARDED, HalfState.SETTLED}
    table = ResolutionTable(Clock())
    assert table.state_of(7) is HalfState.PENDING
    assert table.resolve(7, HalfState.COMMITTED)
    assert not table.resolve(7, HalfState.COMMITTED)  # a duplicate verdict
    assert not table.resolve(7, HalfState.ROLLED_BACK)  # a conflicting one
    assert table.state_of(7) is HalfState.COMMITTED


def test_floor_settles_old_origins_and_forgets_outcomes_after_a_while() -> None:
    clock = Clock()
    table = ResolutionTable(clock)
    table.resolve(3, HalfState.ROLLED_BACK)
    table.raise_floor(10, keep_ms=1000)
    assert table.state_of(3) is HalfState.ROLLED_BACK  # still remembered
    assert table.state_of(5) is HalfState.SETTLED and table.state_of(10) is HalfState.PENDING
    assert not table.resolve(5, HalfState.COMMITTED)
    clock.now += 1000
    table.raise_floor(4, keep_ms=1000)  # never lowers the floor
    assert table.floor == 10 and len(table) == 0
    assert table.state_of(3) is HalfState.SETTLED


def _half(props: dict[str, str], queue_offset: int = 5) -> MessageExt:
    inner = HalfStore.to_half(
        MessageInner("Orders", 3, b"body", dict(props), flag=2, sys_flag=4 | 1), "pg")
    assert (inner.topic, inner.queue_id, inner.sys_flag) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 1)
    return MessageExt(inner.topic, inner.body, queue_id=0, flag=2, queue_offset=queue_offset,
                      commit_log_offset=4096, sys_flag=inner.sys_flag, born_timestamp=111,
                      store_timestamp=222, properties=inner.properties, msg_id="U1")


def test_half_message_keeps_the_real_queue_and_drops_what_only_the_broker_sets() -> None:
    half = _half({PropertyKey.TRAN_MSG: "true", PropertyKey.UNIQ_KEY: "U1", PropertyKey.DELAY: "3",
                  PropertyKey.TRANSACTION_CHECK_TIMES: "9",
                  PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET: "1"})
    assert half.properties == {PropertyKey.TRAN_MSG: "true", PropertyKey.UNIQ_KEY: "U1",
                               PropertyKey.REAL_TOPIC: "Orders", PropertyKey.REAL_QID: "3",
                               PropertyKey.PGROUP: "pg"}
    assert origin_of(half) == 5 and check_times_of(half) == 0


def test_commit_renewal_discard_and_op_messages() -> None:
    store_host = ("10.0.0.1", 10911)
    hs = HalfStore(store=type("S", (), {"clock": staticmethod(lambda: 9)})(),  # type: ignore[arg-type]
                   host=BrokerHost(*store_host))
    half = _half({PropertyKey.TRAN_MSG: "true", PropertyKey.UNIQ_KEY: "U1"})
    committed = hs.committed(half)
    assert (committed.topic, committed.queue_id, committed.body, committed.flag) == ("Orders", 3, b"body", 2)
    assert committed.sys_flag == int(MessageSysFlag.TRANSACTION_COMMIT_TYPE) | 1
    assert committed.prepared_transaction_offset == 4096
    assert committed.properties == {PropertyKey.UNIQ_KEY: "U1", PropertyKey.PGROUP: "pg"}
    renewed = hs.renewed(half, 1)
    assert renewed.topic == "RMQ_SYS_TRANS_HALF_TOPIC" and renewed.store_host == store_host
    copy = MessageExt(renewed.topic, renewed.body, queue_offset=8, properties=renewed.properties)
    assert (origin_of(copy), check_times_of(copy)) == (5, 1)  # same transaction, one more check
    assert hs.discarded(half).topic == "TRANS_CHECK_MAX_TIME_TOPIC"
    op = hs.op_message(copy, HalfState.COMMITTED)
    assert (op.topic, op.body, op.properties[PropertyKey.TAGS]) == ("RMQ_SYS_TRANS_OP_HALF_TOPIC", b"8", "d")
    assert op.properties[PropertyKey.TRANSACTION_PREPARED_QUEUE_OFFSET] == "5"
    sent = decode_stored_message(hs.for_producer(half))
    assert (sent.topic, sent.queue_id, sent.commit_log_offset, sent.body) == ("Orders", 3, 4096, b"body")


# -- producer side -----------------------------------------------------------------------------
def test_local_states_on_the_wire_and_coercion() -> None:
    assert [s.commit_or_rollback for s in LocalTransactionState] == [8, 12, 0]
    assert coerce_state(LocalTransactionState.COMMIT) is LocalTransactionState.COMMIT
    for odd in (None, "COMMIT", True, 8):
        assert coerce_state(odd) is LocalTransactionState.UNKNOWN
    half = Message.with_system_properties("T", b"", properties={PropertyKey.UNIQ_KEY: "X"})
    assert transaction_id(half) == "X"
    assert transaction_id(MessageExt("T", b"", properties={PropertyKey.UNIQ_KEY: "Y"})) == "Y"


def test_tracker_refuses_steps_out_of_order() -> None:
    assert PHASE_TRANSITIONS[TransactionPhase.HALF_FAILED] == frozenset()
    failed = TransactionTracker()
    failed.advance(TransactionPhase.HALF_FAILED)
    with pytest.raises(ClientError):
        failed.local_done(LocalTransactionState.COMMIT, None)  # the local transaction never runs
    tx = TransactionTracker()
    with pytest.raises(ClientError):
        tx.result()
    sent = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "U", "O", MQ, 4, "U")
    tx.half_stored(sent, Message("T", b""))
    assert not tx.runs_local  # stored but not durable: roll back without running it
    tx.local_done(LocalTransactionState.ROLLBACK, None)
    tx.advance(TransactionPhase.ENDED)
    with pytest.raises(ClientError):
        tx.advance(TransactionPhase.ENDED)
    result = tx.result()
    assert (result.local_state, result.transaction_id, result.queue_offset) == (
        LocalTransactionState.ROLLBACK, "U", 4)
