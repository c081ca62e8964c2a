"""END_TRANSACTION (37): a producer's verdict on a half message, after its local transaction or
in answer to a check.

Usually sent oneway (the answer is then dropped), so every outcome is also logged. The half message
is found by ``commitLogOffset`` and must be a half message of the producer group that asks, at the
queue offset the request names (RocketMQ's checks). COMMIT (8) delivers it to its real topic and
writes an op message; ROLLBACK (12) writes only the op message; 0 (unknown) leaves it to the check
service. A verdict on a transaction that is no longer pending changes nothing: the same verdict is
answered SUCCESS, a different one TRANSACTION_FAILED; neither stores anything.

A commit is answered once the committed message is durable (the durable-save seam: under
SYNC_FLUSH after the group commit that covers it), with the seam's response codes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from orbitmq.broker.durable_save import APPENDED, put_answer
from orbitmq.broker.topic_config_manager import TRANS_HALF_TOPIC
from orbitmq.broker.transaction.batch import is_batch
from orbitmq.broker.transaction.half_store import origin_of
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.broker.transaction.state import HalfState
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

__all__ = ["EndTransactionProcessor", "VERDICTS"]

log = logging.getLogger(__name__)

VERDICTS: dict[int, HalfState] = {
    int(MessageSysFlag.TRANSACTION_COMMIT_TYPE): HalfState.COMMITTED,
    int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE): HalfState.ROLLED_BACK,
}
_UNKNOWN = int(MessageSysFlag.TRANSACTION_NOT_TYPE)

_Answer = RemotingCommand | Awaitable[RemotingCommand]


class EndTransactionProcessor:
    """Handles END_TRANSACTION over the TransactionService's state."""

    def __init__(self, service: TransactionService) -> None:
        self.service = service

    def end_transaction(self, cmd: RemotingCommand, conn: RemotingConnection) -> _Answer:
        h = EndTransactionRequestHeader.from_ext_fields(cmd.ext_fields)
        svc = self.service
        if svc.config.broker_id != 0:
            return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE,
                                "a slave broker does not end transactions")
        source = "check" if h.from_transaction_check else "producer"
        if h.commit_or_rollback == _UNKNOWN:
            log.info("transaction left pending by %s group=%s msg=%s peer=%s remark=%s", source,
                     h.producer_group, h.msg_id, conn.peer, cmd.remark)
            return cmd.response(ResponseCode.SUCCESS, "transaction state unknown: the broker will check")
        verdict = VERDICTS.get(h.commit_or_rollback)
        if verdict is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"illegal commitOrRollback {h.commit_or_rollback}: expected 0, 8 or 12")
        half = svc.half.read_at(h.commit_log_offset)
        problem = _mismatch(half, h)
        if problem is not None:
            log.warning("END_TRANSACTION refused from %s: %s", conn.peer, problem)
            return cmd.response(ResponseCode.SYSTEM_ERROR, problem)
        assert half is not None
        state = svc.state_of(half)
        if state is not HalfState.PENDING:
            return _already(cmd, half, state, verdict, source)
        log.log(logging.INFO if h.from_transaction_check else logging.DEBUG,
                "transaction %s by %s origin=%d msg=%s group=%s", verdict.value, source,
                origin_of(half), half.uniq_key, h.producer_group)
        result = svc.settle(half, verdict)
        if result is None:
            return cmd.response(ResponseCode.SUCCESS)
        return svc.ctx.saver.answer(result, _answer, cmd)


def _mismatch(half: MessageExt | None, h: EndTransactionRequestHeader) -> str | None:
    """Why the request does not name a half message of this group, or None when it does."""
    if half is None:
        return f"find prepared transaction message failed: nothing at commitLogOffset {h.commit_log_offset}"
    if half.topic != TRANS_HALF_TOPIC:
        return f"the message at commitLogOffset {h.commit_log_offset} is not a half message"
    group = half.properties.get(PropertyKey.PGROUP)
    if group != h.producer_group:
        return f"the producer group wrong: the half message belongs to {group!r}, not {h.producer_group!r}"
    if half.queue_offset != h.tran_state_table_offset:
        return (f"the transaction state table offset wrong: {h.tran_state_table_offset}, "
                f"the half message is at {half.queue_offset}")
    if is_batch(half):
        return (f"the half message at commitLogOffset {h.commit_log_offset} is a transaction "
                "batch: end it with END_TRANSACTION_BATCH (9102)")
    return None


def _already(cmd: RemotingCommand, half: MessageExt, state: HalfState, verdict: HalfState,
             source: str) -> RemotingCommand:
    if state in (verdict, HalfState.SETTLED):
        log.info("transaction already %s, %s by %s ignored msg=%s", state.value, verdict.value,
                 source, half.uniq_key)
        return cmd.response(ResponseCode.SUCCESS, f"transaction already {state.value.lower()}")
    log.warning("transaction already %s, conflicting %s by %s ignored msg=%s", state.value,
                verdict.value, source, half.uniq_key)
    return cmd.response(ResponseCode.TRANSACTION_FAILED,
                        f"transaction already {state.value.lower()}: {verdict.value.lower()} ignored")


def _answer(result: PutMessageResult, cmd: RemotingCommand) -> RemotingCommand:
    """The answer to a commit, once its committed message is as durable as it gets."""
    if result.status is PutMessageStatus.PUT_OK:
        return cmd.response(ResponseCode.SUCCESS)
    code, remark = put_answer(result)
    if result.status in APPENDED:  # committed, but not durable in time
        return cmd.response(code, remark)
    return cmd.response(code, f"storing the committed message failed: {remark}; "
                              "the transaction stays pending")
