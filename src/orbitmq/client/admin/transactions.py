"""The admin view of unresolved transactions (``orbitmq transaction list``): the answer of the
OrbitMQ-only LIST_PENDING_TRANSACTIONS request, parsed (see protocol/codes.py for its body)."""

from __future__ import annotations

import dataclasses

import orjson

from orbitmq.errors import RemoteProtocolError

__all__ = ["PendingTransaction", "PendingTransactions", "parse_pending_transactions"]


@dataclasses.dataclass(frozen=True, slots=True)
class PendingTransaction:
    """A transaction whose half message is stored and not yet committed, rolled back or discarded.

    Attributes:
        broker_name: the broker holding it.
        topic, queue_id: where a commit delivers the message.
        msg_id: the UNIQ_KEY (also the transaction id); offset_msg_id: the latest half copy's id.
        producer_group: the group the broker checks back.
        age_ms: since the producer sent it. check_times: checks sent so far.
        messages: how many messages the transaction holds (1 but for a transaction batch).
    """

    broker_name: str
    topic: str
    queue_id: int
    msg_id: str
    transaction_id: str
    offset_msg_id: str
    producer_group: str
    tags: str
    keys: str
    born_timestamp: int
    age_ms: int
    check_times: int
    half_offset: int
    messages: int = 1


@dataclasses.dataclass(frozen=True, slots=True)
class PendingTransactions:
    """Pending transactions over the brokers asked; ``truncated`` when a broker cut its list."""

    transactions: tuple[PendingTransaction, ...]
    truncated: bool = False


def parse_pending_transactions(body: bytes | memoryview) -> PendingTransactions:
    """One broker's answer.

    Raises:
        RemoteProtocolError: not the expected JSON.
    """
    try:
        data = orjson.loads(body)
        broker = str(data.get("brokerName", ""))
        items = tuple(
            PendingTransaction(
                broker_name=broker, topic=str(t["topic"]), queue_id=int(t.get("queueId", 0)),
                msg_id=str(t.get("msgId", "")), transaction_id=str(t.get("transactionId", "")),
                offset_msg_id=str(t.get("offsetMsgId", "")),
                producer_group=str(t.get("producerGroup", "")), tags=str(t.get("tags", "")),
                keys=str(t.get("keys", "")), born_timestamp=int(t.get("bornTimestamp", 0)),
                age_ms=int(t.get("ageMs", 0)), check_times=int(t.get("checkTimes", 0)),
                half_offset=int(t.get("halfOffset", 0)), messages=int(t.get("messages", 1)),
            )
            for t in data.get("transactions", [])
        )
        return PendingTransactions(items, bool(data.get("truncated", False)))
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
        raise RemoteProtocolError(f"malformed pending transaction list: {e}") from None
