"""How a broker answers sends, seen at its request dispatcher: under ASYNC_FLUSH in the handler's
own call (no future, no task per send); under SYNC_FLUSH with one loop future per send, the sends
of one loop iteration waiting on one group commit (one store future, one timer), each answered
once the sync covers it; END_TRANSACTION and send-backs through the same seam."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.config import FlushDiskType
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader
from orbitmq.protocol.message import MessageSysFlag, PropertyKey
from orbitmq.protocol.msgid import decode_offset_msg_id
from orbitmq.transport.connection import RemotingConnection


@pytest.fixture
def sync_h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    cfg = broker_config(tmp_path_factory.mktemp("sync-answers"))
    cfg = dataclasses.replace(cfg, store=dataclasses.replace(
        cfg.store, flush_disk_type=FlushDiskType.SYNC_FLUSH))
    h = BrokerHarness(cfg)
    try:
        yield h
    finally:
        h.close()


@pytest.fixture
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path_factory.mktemp("async-answers")))
    try:
        yield h
    finally:
        h.close()


def _sends(h: BrokerHarness, count: int) -> list[RemotingCommand]:
    h.send_ok("Answers", b"creates the topic")  # a topic-creating send waits for its route
    fields = h.send_header("Answers").to_v2_ext_fields()
    return [RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, dict(fields), b"%d" % i)
            for i in range(count)]


def test_async_flush_sends_are_answered_in_the_handlers_call(h: BrokerHarness) -> None:
    cmds = _sends(h, 5)
    conn = RemotingConnection(None)  # the answers are returned, not written
    answers = h.on_loop(lambda: [h.broker.server.dispatch(c, conn) for c in cmds])
    assert [type(a) for a in answers] == [RemotingCommand] * 5
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 5  # type: ignore[union-attr]
    offsets = [int(a.ext_fields["queueOffset"]) for a in answers]  # type: ignore[union-attr]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5


def test_sync_flush_sends_of_one_iteration_share_one_group_commit(sync_h: BrokerHarness) -> None:
    cmds = _sends(sync_h, 5)
    conn = RemotingConnection(None)
    broker = sync_h.broker

    async def send_all() -> tuple[int, list[RemotingCommand]]:
        answers = [broker.server.dispatch(c, conn) for c in cmds]  # one loop iteration
        assert all(isinstance(a, asyncio.Future) and not a.done() for a in answers)
        groups = len(broker.saver._groups)
        return groups, await asyncio.gather(*answers)  # type: ignore[arg-type]

    groups, answers = sync_h.call(send_all())
    assert groups == 1  # five sends, one store future, one timer
    assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 5
    assert broker.store.flushed_physical_offset() >= max(
        int(a.ext_fields["msgId"][-16:], 16) for a in answers)
    assert broker.saver._groups == {}


def test_sync_flush_commit_and_send_back_are_answered_once_durable(sync_h: BrokerHarness) -> None:
    """END_TRANSACTION and CONSUMER_SEND_MSG_BACK save through the same seam: their answers
    come once the group commit covers what they stored."""
    store = sync_h.broker.store
    half = sync_h.send("TxDurable", b"half", props={PropertyKey.TRAN_MSG: "true",
                                                   PropertyKey.PGROUP: "tx-group"})
    assert half.code == ResponseCode.SUCCESS, half.remark
    _, _, half_offset = decode_offset_msg_id(half.ext_fields["msgId"])
    end = EndTransactionRequestHeader(
        producer_group="tx-group", tran_state_table_offset=int(half.ext_fields["queueOffset"]),
        commit_log_offset=half_offset, commit_or_rollback=int(MessageSysFlag.TRANSACTION_COMMIT_TYPE),
        msg_id=half.ext_fields["msgId"])
    before = store.max_physical_offset()  # where the committed copy goes
    committed = sync_h.invoke(RequestCode.END_TRANSACTION, end.to_ext_fields())
    assert committed.code == ResponseCode.SUCCESS, committed.remark
    assert store.flushed_physical_offset() > before  # the committed copy is on disk

    sent = sync_h.send_ok("BackDurable", b"failed once")
    _, _, offset = decode_offset_msg_id(sent.ext_fields["msgId"])
    created = sync_h.invoke(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                            body=SubscriptionGroupConfig(group_name="back-group").to_json())
    assert created.code == ResponseCode.SUCCESS, created.remark
    before = store.max_physical_offset()
    back = ConsumerSendMsgBackRequestHeader(offset=offset, group="back-group", delay_level=0)
    answer = sync_h.invoke(RequestCode.CONSUMER_SEND_MSG_BACK, back.to_ext_fields())
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert store.max_physical_offset() > before  # the retry copy was stored...
    assert store.flushed_physical_offset() >= store.max_physical_offset()  # ...and synced
