"""Ending a transaction: what END_TRANSACTION (one half message) and END_TRANSACTION_BATCH (one
half message holding a batch) share, so that both keep the same rules.

The half message is found by ``commitLogOffset`` and must be one of the asking producer group at
the queue offset the request names (each request adds its own checks through ``mismatch``).
COMMIT (8) delivers it and writes an op message; ROLLBACK (12) writes only the op message; 0
(unknown) leaves it to the check service. A verdict on a transaction that is no longer pending
stores nothing: the same verdict is answered SUCCESS, a different one TRANSACTION_FAILED. A
commit is answered once the committed messages are durable (the durable-save seam).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from orbitmq.broker.durable_save import APPENDED, put_answer
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.broker.transaction.state import HalfState
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.security.access_table import topic_permission
from orbitmq.security.model import Action
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

__all__ = ["Ending", "end_transaction", "commit_answer", "VERDICTS"]

log = logging.getLogger(__name__)

VERDICTS: dict[int, HalfState] = {
    int(MessageSysFlag.TRANSACTION_COMMIT_TYPE): HalfState.COMMITTED,
    int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE): HalfState.ROLLED_BACK,
}
_UNKNOWN = int(MessageSysFlag.TRANSACTION_NOT_TYPE)

Answer = RemotingCommand | Awaitable[RemotingCommand]


@dataclass(frozen=True)
class Ending:
    """One request to end a transaction, whichever header it came in."""

    what: str  # "transaction" or "transaction batch", for logs
    request: str  # the request's name, for logs
    verdict_code: int  # 0, 8 or 12: the header's TransactionVerdict refused any other value
    from_check: bool
    group: str
    ident: str  # the message or transaction id the producer named, for logs
    commit_log_offset: int


def end_transaction(svc: TransactionService, cmd: RemotingCommand, conn: RemotingConnection,
                    ending: Ending, mismatch: Callable[[MessageExt | None], str | None],
                    answer: Callable[[PutMessageResult, RemotingCommand, MessageExt], RemotingCommand],
                    ) -> Answer:
    """Settle the half message ``ending`` names; ``mismatch`` says why it is not the one the
    request means (None when it is), ``answer`` builds the answer to a commit once stored."""
    if svc.config.broker_id != 0:
        return cmd.response(ResponseCode.SLAVE_NOT_AVAILABLE, "a slave broker does not end transactions")
    source = "check" if ending.from_check else "producer"
    if ending.verdict_code == _UNKNOWN:
        log.info("%s left pending by %s group=%s id=%s peer=%s remark=%s", ending.what, source,
                 ending.group, ending.ident, conn.peer, cmd.remark)
        return cmd.response(ResponseCode.SUCCESS, "transaction state unknown: the broker will check")
    verdict = VERDICTS[ending.verdict_code]
    half = svc.half.read_at(ending.commit_log_offset)
    problem = mismatch(half)
    if problem is not None:
        log.warning("%s refused from %s: %s", ending.request, conn.peer, problem)
        return cmd.response(ResponseCode.SYSTEM_ERROR, problem)  # RocketMQ's code for these
    assert half is not None
    # Access control: ending it is publishing to its real topic (AccessDeniedError answers
    # NO_PERMISSION before anything is stored or settled).
    real_topic = half.properties.get(PropertyKey.REAL_TOPIC, "")
    svc.ctx.authorize_found(cmd, topic_permission(real_topic, Action.PUB))
    state = svc.state_of(half)
    if state is not HalfState.PENDING:
        return _already(cmd, half, state, verdict, source, ending.what)
    log.log(logging.INFO if ending.from_check else logging.DEBUG,
            "%s %s by %s group=%s id=%s", ending.what, verdict.value, source, ending.group, half.uniq_key)
    result = svc.settle(half, verdict)
    if result is None:
        return cmd.response(ResponseCode.SUCCESS)
    return svc.ctx.saver.answer(result, answer, cmd, half)


def _already(cmd: RemotingCommand, half: MessageExt, state: HalfState, verdict: HalfState,
             source: str, what: str) -> RemotingCommand:
    if state in (verdict, HalfState.SETTLED):
        log.info("%s already %s, %s by %s ignored id=%s", what, state.value, verdict.value, source,
                 half.uniq_key)
        return cmd.response(ResponseCode.SUCCESS, f"transaction already {state.value.lower()}")
    log.warning("%s already %s, conflicting %s by %s ignored id=%s", what, state.value,
                verdict.value, source, half.uniq_key)
    return cmd.response(ResponseCode.TRANSACTION_FAILED,
                        f"transaction already {state.value.lower()}: {verdict.value.lower()} ignored")


def commit_answer(result: PutMessageResult, cmd: RemotingCommand, stored: str,
                  fields: dict[str, str] | None = None) -> RemotingCommand:
    """The answer to a commit, once the ``stored`` messages are as durable as they get."""
    if result.status is PutMessageStatus.PUT_OK:
        return cmd.response(ResponseCode.SUCCESS, None, fields)
    code, remark = put_answer(result)
    if result.status in APPENDED:  # committed, but not durable in time
        return cmd.response(code, remark, fields)
    return cmd.response(code, f"storing the {stored} failed: {remark}; the transaction stays pending",
                        fields)
