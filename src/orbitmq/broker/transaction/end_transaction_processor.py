"""END_TRANSACTION (37): a producer's verdict on a half message, after its local transaction or
in answer to a check.

Usually sent oneway (the answer is then dropped), so every outcome is also logged. The rules
(finding the half message, verdicts on settled transactions, durable commits) are ending.py's,
shared with END_TRANSACTION_BATCH; this adds what names a single half message.
"""

from __future__ import annotations

import logging

from orbitmq.broker.tables.topic_config_manager import TRANS_HALF_TOPIC
from orbitmq.broker.transaction.batch import is_batch
from orbitmq.broker.transaction.ending import Answer, Ending, commit_answer, end_transaction
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.store.status import PutMessageResult
from orbitmq.transport.connection import RemotingConnection

__all__ = ["EndTransactionProcessor"]

log = logging.getLogger(__name__)


class EndTransactionProcessor:
    """Handles END_TRANSACTION over the TransactionService's state."""

    def __init__(self, service: TransactionService) -> None:
        self.service = service

    def end_transaction(self, cmd: RemotingCommand, conn: RemotingConnection) -> Answer:
        h = EndTransactionRequestHeader.from_ext_fields(cmd.ext_fields)
        ending = Ending("transaction", "END_TRANSACTION", h.commit_or_rollback,
                        h.from_transaction_check, h.producer_group, h.msg_id, h.commit_log_offset)
        return end_transaction(self.service, cmd, conn, ending, lambda half: _mismatch(half, h),
                               _answer)


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


def _answer(result: PutMessageResult, cmd: RemotingCommand, half: MessageExt) -> RemotingCommand:
    return commit_answer(result, cmd, "committed message")
