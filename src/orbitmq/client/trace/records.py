"""The records a traced client writes: what RocketMQ's trace hooks build, from our SDK's sends and
listener calls.

- a send answered by the broker: one Pub record per message (its id, topic, tags, keys, the
  broker address it went to, body length, the round trip in ms, its type, the broker's offset
  message id, whether the status was SEND_OK). A oneway send has no answer and no record (as in
  RocketMQ); a batch gets one record per message;
- a listener call: SubBefore and SubAfter records (:mod:`orbitmq.client.trace.consume`);
- an ended transaction: one EndTransaction record (commit, rollback or unknown; whether a
  broker's check asked for it).

A message whose TRACE_ON property is ``false`` is not traced, as in RocketMQ.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from orbitmq.client.namespace import unwrap
from orbitmq.client.trace.dispatcher import TraceDispatcher
from orbitmq.protocol.message import Message, PropertyKey
from orbitmq.protocol.trace_codec import (
    DEFAULT_REGION_ID,
    TraceMessageType,
    TraceRecord,
    TraceType,
)

if TYPE_CHECKING:
    from orbitmq.client.results import SendResult

__all__ = ["pub_record", "pub_records", "end_transaction_record", "message_type_of"]

_TIMER_PROPERTIES = ("TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def message_type_of(msg: Message) -> TraceMessageType:
    """RocketMQ's MessageType of a message a producer sends."""
    if msg.delay_level == 0 and not msg.properties:
        return TraceMessageType.NORMAL
    if msg.properties.get(PropertyKey.TRAN_MSG) == "true":
        return TraceMessageType.TRANS_HALF
    if msg.delay_level > 0 or any(p in msg.properties for p in _TIMER_PROPERTIES):
        return TraceMessageType.DELAY
    return TraceMessageType.NORMAL


def _keys_text(msg: Message) -> str | None:
    keys = msg.keys
    if not keys:
        return None
    return keys if isinstance(keys, str) else " ".join(keys)


def pub_record(dispatcher: TraceDispatcher, group: str, msg: Message, result: SendResult,
               store_host: str, started_s: float, cost_ms: int,
               msg_type: TraceMessageType | None = None, namespace: str | None = None) -> None:
    """Append the Pub record of one sent message (its topic without the client's ``namespace``,
    as RocketMQ's clients write it).

    The hot path of a traced send: the record is written straight as TraceDataEncoder's text
    (the fields are safe: a message whose topic, tags or keys held a separator could not have
    been sent, and the ids and the address are ours).
    """
    props = msg.properties
    region = DEFAULT_REGION_ID
    if props:
        if props.get(PropertyKey.TRACE_ON) == "false":
            return
        region = props.get(PropertyKey.MSG_REGION) or DEFAULT_REGION_ID
    kind = message_type_of(msg) if msg_type is None else msg_type
    body = msg.body
    size = body.nbytes if isinstance(body, memoryview) else len(body)
    keys = _keys_text(msg)
    msg_id = result.msg_id
    ok = "true" if result.status.value == "SEND_OK" else "false"
    dispatcher.append_text(
        f"Pub\x01{int(started_s * 1000)}\x01{region}\x01{group}\x01{unwrap(msg.topic, namespace)}"
        f"\x01{msg_id}\x01"
        f"{msg.tags or 'null'}\x01{keys or 'null'}\x01{store_host}\x01{size}\x01{cost_ms}"
        f"\x01{int(kind)}\x01{result.offset_msg_id}\x01{ok}\x02", msg_id, keys)


def pub_records(dispatcher: TraceDispatcher, group: str, messages: Sequence[Message],
                results: Sequence[SendResult], store_host: str, started_s: float,
                msg_type: TraceMessageType | None = None, namespace: str | None = None) -> None:
    """Append the Pub records of sent ``messages`` (their ``results`` in the same order); the
    send's round trip is shared among them, as RocketMQ shares it among a context's beans."""
    cost = max(0, int((time.time() - started_s) * 1000) // max(len(messages), 1))
    for msg, result in zip(messages, results, strict=True):
        pub_record(dispatcher, group, msg, result, store_host, started_s, cost, msg_type,
                   namespace)


def end_transaction_record(dispatcher: TraceDispatcher, group: str, msg: Message, msg_id: str,
                           store_host: str, transaction_id: str | None, state: str,
                           from_check: bool, namespace: str | None = None) -> None:
    """Append the EndTransaction record of a half message's end (``state``: RocketMQ's
    LocalTransactionState name: COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW; the topic without
    the client's ``namespace``)."""
    if msg.properties.get(PropertyKey.TRACE_ON) == "false":
        return
    dispatcher.append(TraceRecord(
        TraceType.END_TRANSACTION, timestamp_ms=int(time.time() * 1000),
        region_id=msg.properties.get(PropertyKey.MSG_REGION) or DEFAULT_REGION_ID, group=group,
        topic=unwrap(msg.topic, namespace), msg_id=msg_id, tags=msg.tags, keys=_keys_text(msg),
        store_host=store_host, msg_type=TraceMessageType.TRANS_COMMIT,
        transaction_id=transaction_id, transaction_state=state, from_transaction_check=from_check))
