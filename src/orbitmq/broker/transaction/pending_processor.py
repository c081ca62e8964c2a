"""LIST_PENDING_TRANSACTIONS (OrbitMQ, protocol/codes.py): the unresolved transactions of the
broker's TransactionService, oldest first, for operators (``orbitmq transaction list``)."""

from __future__ import annotations

from typing import Any

import orjson

from orbitmq.broker.transaction.batch import batch_size
from orbitmq.broker.transaction.half_store import check_times_of
from orbitmq.broker.transaction.service import TransactionService
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.transport.connection import RemotingConnection

__all__ = ["PendingTransactionsProcessor", "LIST_LIMIT_DEFAULT"]

LIST_LIMIT_DEFAULT = 1000


class PendingTransactionsProcessor:
    """The LIST_PENDING_TRANSACTIONS handler over the transaction service."""

    def __init__(self, service: TransactionService) -> None:
        self.service = service

    def list_pending(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """LIST_PENDING_TRANSACTIONS (OrbitMQ): unresolved transactions, oldest first."""
        raw = cmd.ext_fields.get("limit", "").strip()
        if raw and not (raw.isascii() and raw.isdigit() and 0 < int(raw) < 2**31):
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"limit {raw[:40]!r} is not a positive int32")
        limit = int(raw) if raw else LIST_LIMIT_DEFAULT
        latest, partial = self.service.pending_copies(self.service.half.half_bounds()[1])
        now = self.service.store.clock()
        items = [_describe(origin, half, now) for origin, half in sorted(latest.items())]
        body = {
            "brokerName": self.service.config.broker_name,
            "brokerAddr": self.service.ctx.host.address,
            "transactions": items[:limit],
            "truncated": partial or len(items) > limit,
        }
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))


def _describe(origin: int, half: MessageExt, now_ms: int) -> dict[str, Any]:
    props = half.properties
    return {
        "topic": props.get(PropertyKey.REAL_TOPIC, ""),
        "queueId": int(props.get(PropertyKey.REAL_QID, "0") or 0),
        "msgId": half.msg_id,
        "transactionId": half.uniq_key or "",
        "offsetMsgId": half.offset_msg_id,
        "producerGroup": props.get(PropertyKey.PGROUP, ""),
        "tags": half.tags or "",
        "keys": " ".join(half.keys),
        "bornTimestamp": half.born_timestamp,
        "ageMs": max(0, now_ms - min(half.born_timestamp, half.store_timestamp)),
        "checkTimes": check_times_of(half),
        "originOffset": origin,
        "halfOffset": half.queue_offset,
        "commitLogOffset": half.commit_log_offset,
        "messages": batch_size(half),
    }
