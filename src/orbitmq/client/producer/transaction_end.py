"""Ending a transaction: END_TRANSACTION built in one place, and sent by a half message's receipt.

A transaction is ended three ways, all through this module:

- after the local transaction (``send_in_transaction``): oneway, as RocketMQ does; if it is lost
  the broker's check resolves the transaction;
- in answer to a broker's check: oneway, on the connection the check came on, marked
  ``fromTransactionCheck``;
- by the half message's receipt (:meth:`AsyncTransactionProducer.end_transaction
  <orbitmq.client.AsyncTransactionProducer.end_transaction>`): two-way, so
  that the caller learns the broker's answer, tried again on transient refusals and lost
  connections. This is how a transaction decided later, or in another process, is ended: the
  receipt (a :class:`~orbitmq.client.results.SendResult`) holds everything END_TRANSACTION
  needs, so it can be kept (in a database, in a Spark commit message) and used from any producer
  of the same group.

Repeating a verdict is safe: a broker answers the same verdict on an ended transaction with
SUCCESS and stores nothing, and a different one with TRANSACTION_FAILED.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

from orbitmq.client.instance import ClientInstance, check_response
from orbitmq.client.producer.transaction_state import LocalTransactionState, TransactionSendResult
from orbitmq.client.results import SendResult
from orbitmq.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    OrbitMQError,
    RemoteProtocolError,
    TimeoutError,
)
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import EndTransactionBatchRequestHeader
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.msgid import decode_offset_msg_id

__all__ = [
    "HalfMessageRef",
    "HalfReceipt",
    "END_RETRIABLE_CODES",
    "build_end_transaction_request",
    "build_end_transaction_batch_request",
    "end_request",
    "half_message_addr",
    "end_transaction",
]

log = logging.getLogger(__name__)


# Answers to END_TRANSACTION after which the same request may succeed: the broker could not store
# the committed message now, or stored it without the flush the sender waits for (asked again, it
# answers SUCCESS: the transaction is committed).
END_RETRIABLE_CODES = frozenset({
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.FLUSH_DISK_TIMEOUT,
})
RETRY_BACKOFF_S = 0.2  # before attempt n + 1: n * RETRY_BACKOFF_S


@dataclasses.dataclass(frozen=True, slots=True)
class HalfMessageRef:
    """Where a half message lies: what END_TRANSACTION names, read from its receipt.

    A plain record of strings and numbers, so that a caller can store it where it stores its
    own decisions and end the transaction from there later, in any process.

    Attributes:
        broker_name, topic: the broker that stored it and the topic it is delivered to.
        commit_log_offset: the half message's position in that broker's CommitLog.
        half_queue_offset: its offset in the broker's half queue (``tranStateTableOffset``).
        msg_id: its UNIQ_KEY; transaction_id: the transaction's id (the UNIQ_KEY too).
        store_addr: host:port of the store the receipt names, where END_TRANSACTION goes when no
            route names the broker any more.
        batch_size: for a transaction batch (OrbitMQ), how many messages it holds; 0 for a
            single message. A batch is ended with END_TRANSACTION_BATCH.
    """

    broker_name: str
    topic: str
    commit_log_offset: int
    half_queue_offset: int
    msg_id: str
    transaction_id: str
    store_addr: str
    batch_size: int = 0

    @classmethod
    def of(cls, result: HalfReceipt) -> HalfMessageRef:
        """The reference of the half message ``result`` is the receipt of (``result`` itself
        when it is one).

        Raises:
            ClientError: ``result.offset_msg_id`` is not an offset message id.
        """
        if isinstance(result, HalfMessageRef):
            return result
        try:
            host, port, commit_log_offset = decode_offset_msg_id(result.offset_msg_id)
        except RemoteProtocolError as e:
            raise ClientError(f"not the receipt of a stored half message: {e}") from None
        return cls(result.queue.broker_name, result.queue.topic, commit_log_offset,
                   result.queue_offset, result.msg_id, result.transaction_id or result.msg_id,
                   f"{host}:{port}", getattr(result, "batch_size", 0))


HalfReceipt = SendResult | TransactionSendResult | HalfMessageRef
"""What names a half message to end: its SendResult, its TransactionSendResult, or the
HalfMessageRef read from either (a form to keep, e.g. as JSON, and rebuild later)."""


def build_end_transaction_request(
    group: str,
    state: LocalTransactionState,
    *,
    commit_log_offset: int,
    half_queue_offset: int,
    msg_id: str,
    transaction_id: str | None,
    from_check: bool = False,
    remark: str | None = None,
    oneway: bool = True,
) -> RemotingCommand:
    """END_TRANSACTION of producer group ``group`` carrying ``state`` for the half message at
    ``commit_log_offset`` (half queue offset ``half_queue_offset``); ``remark`` tells the broker
    why (an exception of the listener)."""
    header = EndTransactionRequestHeader(
        producer_group=group, tran_state_table_offset=half_queue_offset,
        commit_log_offset=commit_log_offset, commit_or_rollback=state.commit_or_rollback,
        msg_id=msg_id, from_transaction_check=from_check, transaction_id=transaction_id)
    cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields(),
                                  oneway=oneway)
    if remark is not None:
        cmd.remark = remark
    return cmd


def build_end_transaction_batch_request(
    group: str,
    state: LocalTransactionState,
    *,
    commit_log_offset: int,
    half_queue_offset: int,
    transaction_id: str,
    from_check: bool = False,
    remark: str | None = None,
    oneway: bool = True,
) -> RemotingCommand:
    """END_TRANSACTION_BATCH (OrbitMQ) of ``group`` carrying ``state`` for the batch whose half
    message lies at ``commit_log_offset`` and whose id is ``transaction_id``."""
    header = EndTransactionBatchRequestHeader(
        producer_group=group, tran_state_table_offset=half_queue_offset,
        commit_log_offset=commit_log_offset, commit_or_rollback=state.commit_or_rollback,
        transaction_id=transaction_id, from_transaction_check=from_check)
    cmd = RemotingCommand.request(OrbitMQRequestCode.END_TRANSACTION_BATCH, header.to_ext_fields(),
                                  oneway=oneway)
    if remark is not None:
        cmd.remark = remark
    return cmd


def end_request(group: str, state: LocalTransactionState, ref: HalfMessageRef, *,
                from_check: bool = False, remark: str | None = None,
                oneway: bool = True) -> RemotingCommand:
    """The request that ends the transaction ``ref`` names: END_TRANSACTION for a single
    message, END_TRANSACTION_BATCH for a batch."""
    if ref.batch_size:
        return build_end_transaction_batch_request(
            group, state, commit_log_offset=ref.commit_log_offset,
            half_queue_offset=ref.half_queue_offset, transaction_id=ref.transaction_id,
            from_check=from_check, remark=remark, oneway=oneway)
    return build_end_transaction_request(
        group, state, commit_log_offset=ref.commit_log_offset,
        half_queue_offset=ref.half_queue_offset, msg_id=ref.msg_id,
        transaction_id=ref.transaction_id, from_check=from_check, remark=remark, oneway=oneway)


async def half_message_addr(instance: ClientInstance, ref: HalfMessageRef) -> str:
    """The address of the master that stored ``ref``: from the routes (refreshed once when they do
    not name the broker), else the store address of its receipt."""
    addr = instance.broker_addr(ref.broker_name)
    if addr is not None:
        return addr
    try:
        return await instance.find_broker_addr(ref.broker_name, ref.topic)
    except OrbitMQError as e:
        log.info("broker %s not in the route of %s (%s): ending msg=%s at %s", ref.broker_name,
                 ref.topic, e, ref.msg_id, ref.store_addr)
        return ref.store_addr


async def end_transaction(
    instance: ClientInstance,
    group: str,
    result: HalfReceipt,
    state: LocalTransactionState,
    *,
    timeout: float,
    attempts: int,
) -> None:
    """Commit or roll back the half message ``result`` is the receipt of, waiting for the answer;
    up to ``attempts`` tries, each of at most ``timeout`` seconds, while the broker refuses with
    one of END_RETRIABLE_CODES or the connection fails (see the module docstring: a repeated
    verdict is harmless).

    Raises:
        ClientError: ``state`` is UNKNOWN (that ends nothing), or ``result`` is not a receipt.
        BrokerError: the broker refused, e.g. TRANSACTION_FAILED (the transaction already ended
            the other way or was discarded after its checks) or SYSTEM_ERROR (no half message
            of ``group`` at that position).
        TimeoutError, ConnectionClosedError: no answer after the last attempt.
    """
    if state is LocalTransactionState.UNKNOWN:
        raise ClientError("UNKNOWN ends no transaction: commit or roll back, or leave the "
                          "transaction to the broker's check")
    ref = HalfMessageRef.of(result)
    last: OrbitMQError | None = None
    for attempt in range(max(1, attempts)):
        if attempt:
            await asyncio.sleep(RETRY_BACKOFF_S * attempt)
        cmd = end_request(group, state, ref, oneway=False)
        try:
            addr = await half_message_addr(instance, ref)
            resp = await instance.remoting.invoke(addr, cmd, timeout)
            check_response(resp)
            return
        except BrokerError as e:
            if e.code not in END_RETRIABLE_CODES:
                raise
            e.retriable = True
            last = e
        except (TimeoutError, ConnectionClosedError) as e:
            last = e
        log.info("END_TRANSACTION %s msg=%s attempt %d: %s", state.name, ref.msg_id, attempt + 1,
                 last)
    assert last is not None
    raise last
