"""Transactional messages: AsyncTransactionProducer (asyncio) and TransactionProducer (blocking).

A transaction ties a local database transaction and a message together, so that both happen or
neither does (RocketMQ's two-phase scheme):

1. the producer sends a *half message* (TRAN_MSG=true, PGROUP, sysFlag prepared); the broker stores
   it where no consumer looks;
2. only if the broker stored it, the listener's ``execute_local_transaction(msg, arg)`` runs;
3. its verdict goes to the broker that stored the half message in END_TRANSACTION (oneway): COMMIT
   delivers the message, ROLLBACK drops it, UNKNOWN leaves it pending;
4. a half message left pending (verdict UNKNOWN, END_TRANSACTION lost, producer crashed) is checked
   back: the broker sends CHECK_TRANSACTION_STATE to a live producer of the group, which answers
   with ``check_local_transaction(msg)`` in an END_TRANSACTION marked fromTransactionCheck.

The listener must answer checks from durable state (its database), not from memory: after a crash
another process of the group answers. ``msg.properties["UNIQ_KEY"]`` (in execute) and
``msg.msg_id`` (in check) are the transaction id to key that state by (see :func:`transaction_id`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Self, TypeVar, cast

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.namespace import unwrap, wrap
from orbitmq.client.producer import transaction_end
from orbitmq.client.producer.column_send import check_chunk_limits, check_send_topic, send_in_chunks
from orbitmq.client.producer.producer import AsyncProducer, Producer
from orbitmq.client.producer.send_codec import (
    EncodedMessage,
    PreparedMessage,
    build_send_request,
    parse_send_response,
    prepare_message,
)
from orbitmq.client.producer.transaction_batch import (
    PreparedBatch,
    build_send_batch_request,
    encode_batch_messages,
    parse_send_batch_response,
    prepare_messages_half,
    prepare_transaction_batch,
    prepare_transaction_columns,
)
from orbitmq.client.producer.transaction_checks import (
    CHECK_REQUEST_HOLD_MAX,
    CheckAnswers,
    call_listener,
)
from orbitmq.client.producer.transaction_end import HalfReceipt
from orbitmq.client.producer.transaction_state import (
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
    TransactionPhase,
    TransactionSendResult,
    TransactionTracker,
    coerce_state,
    transaction_id,
)
from orbitmq.client.results import SendResult, SendStatus
from orbitmq.client.trace.records import end_transaction_record
from orbitmq.client.validation import DEFAULT_TOPIC, check_message
from orbitmq.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    OrbitMQError,
    TimeoutError,
)
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.protocol.column_batch import IdBlock, MessageColumns
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import Message, MessageExt, MessageSysFlag, PropertyKey

__all__ = [
    "AsyncTransactionProducer",
    "TransactionProducer",
    "TransactionListener",
    "LocalTransactionState",
    "TransactionSendResult",
    "TransactionBatch",
    "transaction_id",
]

log = logging.getLogger(__name__)

R = TypeVar("R")
TX_COLUMNS_ROWS_MAX = 4096  # send_columns_half: rows of one transaction batch
TX_COLUMNS_BYTES_MAX = 1024 * 1024  # and its target size
TX_COLUMNS_IN_FLIGHT_MAX = 4
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)


class AsyncTransactionProducer(AsyncProducer):
    """Sends transactional messages (asyncio); also every send of :class:`AsyncProducer`.

    Args:
        group: the producer group; the broker checks back any live producer of it.
        namesrv: name server addresses.
        listener: runs the local transaction and answers checks. Its methods may be coroutine
            functions (awaited) or plain functions (called on the event loop: keep them short, or
            pass ``check_executor``).
        check_executor: run ``check_local_transaction`` there instead of on the loop.
        check_request_hold_max: checks answered at once at most; more are dropped (logged) and
            the broker asks again at its next round.
        topics: topics whose brokers to heartbeat from the start, so that a producer that has
            sent nothing yet (one restarted after a crash) is asked about its group's pending
            transactions. TBW102's brokers are always included.
        **options: the options of :class:`AsyncProducer`.
    """

    def __init__(
        self,
        group: str,
        namesrv: str | Sequence[str] | None = None,
        *,
        listener: TransactionListener,
        check_executor: concurrent.futures.Executor | None = None,
        check_request_hold_max: int = CHECK_REQUEST_HOLD_MAX,
        topics: Sequence[str] = (),
        **options: Any,
    ) -> None:
        if listener is None:
            raise ClientError("a TransactionProducer needs a TransactionListener")
        super().__init__(group, namesrv, **options)
        self._checks = CheckAnswers(self.group, listener, executor=check_executor,
                                    hold_max=check_request_hold_max, namespace=self.namespace)
        if self._trace is not None:
            self._checks.on_answered = self._trace_check_answer
        self._topics = [DEFAULT_TOPIC, *(wrap(self.namespace, t) for t in topics)]
        self._instance.register_request_handler(RequestCode.CHECK_TRANSACTION_STATE,
                                                self._checks.on_check)
        self._instance.register_request_handler(OrbitMQRequestCode.CHECK_TRANSACTION_BATCH_STATE,
                                                self._checks.on_check_batch)

    def _trace_check_answer(self, msg: MessageExt, broker_addr: str,
                            state: LocalTransactionState) -> None:
        """The EndTransaction record of a check's answer (``fromTransactionCheck``)."""
        if self._trace is None:
            return
        props = msg.properties
        topic = props.get(PropertyKey.REAL_TOPIC) or msg.topic
        traced = Message.with_system_properties(
            topic, b"-", properties={k: v for k, v in props.items()
                                     if k in (PropertyKey.MSG_REGION, PropertyKey.TRACE_ON)},
            tags=msg.tags, keys=msg.keys or None)
        msg_id = msg.uniq_key or msg.msg_id
        end_transaction_record(self._trace, unwrap(self.group, self.namespace), traced, msg_id,
                               broker_addr, props.get(PropertyKey.UNIQ_KEY) or msg_id,
                               state.value, from_check=True, namespace=self.namespace)

    @property
    def listener(self) -> TransactionListener:
        """Runs the local transactions and answers the brokers' checks."""
        return self._checks.listener

    @property
    def check_request_hold_max(self) -> int:
        """Checks answered at once at most."""
        return self._checks.hold_max

    async def start(self) -> Self:
        """Start, learn the brokers of ``topics`` (and TBW102) and heartbeat them at once."""
        await super().start()
        for topic in self._topics:
            try:
                await self._instance.update_route(topic)
            except OrbitMQError as e:
                log.info("route of %s not fetched at start: %s", topic, e)
        await self._instance.send_heartbeat_to_all()
        return self

    async def shutdown(self) -> None:
        await self._checks.close()
        await super().shutdown()

    # -- sending ---------------------------------------------------------------------------------
    async def send_in_transaction(self, msg: Message, arg: object = None, *,
                                  timeout: float | None = None) -> TransactionSendResult:
        """Send ``msg`` as a transaction around the listener's local transaction.

        Raises:
            ClientError: invalid (or delayed) message, or producer not started.
            BrokerError, TimeoutError, ConnectionClosedError: the half message was not stored;
                the local transaction did not run.
        """
        tx = await self.send_half(msg, timeout=timeout)
        if tx.runs_local:
            state, error = await call_listener(
                self.listener.execute_local_transaction, tx.message, arg)
            tx.local_done(state, error)
        else:
            tx.local_done(LocalTransactionState.ROLLBACK, None)
        await self._end_tracked(tx)
        return tx.result()

    async def send_half(self, msg: Message, *, timeout: float | None = None) -> TransactionTracker:
        """Phase one: the half message. Raises as :meth:`send_in_transaction` when not stored."""
        self._check_started()
        msg = self._in_namespace(msg)
        check_message(msg, self.max_message_size)
        if msg.delay_level > 0:
            raise ClientError("a transactional message cannot be delayed")
        if msg.priority is not None:
            raise ClientError("a transactional message cannot have a priority")
        tx = TransactionTracker()
        started = time.time()
        props = dict(msg.properties)
        props[PropertyKey.TRAN_MSG] = "true"
        props[PropertyKey.PGROUP] = self.group
        props.setdefault(PropertyKey.UNIQ_KEY, self._ids.next())
        half_msg = Message.with_system_properties(
            msg.topic, msg.body, properties=props, tags=msg.tags, keys=msg.keys, flag=msg.flag,
            delay_level=msg.delay_level)
        prepared = prepare_message(half_msg, props[PropertyKey.UNIQ_KEY], self.compress_over)
        prepared = dataclasses.replace(prepared, sys_flag=prepared.sys_flag | _PREPARED)
        try:
            sent = await self._store_half(prepared, timeout)
        except BaseException:
            tx.advance(TransactionPhase.HALF_FAILED)
            raise
        tx.half_stored(sent, half_msg)
        if self._trace is not None:
            self._trace_sent(self._trace, [half_msg], [sent], started)
        return tx

    async def _store_half(self, prepared: PreparedMessage, timeout: float | None) -> SendResult:
        return await self._store_in_half_queue(
            prepared.topic,
            lambda mq: build_send_request(prepared, mq, self.group, self.default_topic_queue_nums),
            lambda resp, mq: parse_send_response(resp, prepared, mq), timeout)

    async def _store_in_half_queue(self, topic: str, build: Callable[[MessageQueue], RemotingCommand],
                                   parse: Callable[[RemotingCommand, MessageQueue], R],
                                   timeout: float | None) -> R:
        """Send a half message (or a batch), trying another broker only when the last one surely
        did not store it: it refused with a retriable code, or could not be reached. After a
        timeout or a connection lost mid-request it may hold it; a second copy elsewhere could
        then be committed twice, so the error goes to the caller (the local transaction does not
        run) and the broker's check resolves the orphan (the listener finds nothing done:
        rollback)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.send_timeout if timeout is None else timeout)
        avoid: set[str] = set()
        last: OrbitMQError | None = None
        for _ in range(1 + self.retry_times_when_send_failed):
            mq = (await self._publish_info(topic)).select_queue(avoid)
            try:
                addr = await self._instance.find_broker_addr(mq.broker_name, mq.topic)
                conn = await self._instance.remoting.connection(addr)
            except ConnectionClosedError as e:  # nothing was sent
                last = e
            else:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise TimeoutError(f"half message to {topic!r} ran out of time")
                try:
                    return parse(await conn.invoke(build(mq), remaining), mq)
                except BrokerError as e:  # an answer: nothing stored
                    if not e.retriable:
                        raise
                    last = e
            log.info("half message to broker %s not stored: %s", mq.broker_name, last)
            avoid.add(mq.broker_name)
            self._instance.refresh_route_soon(topic)
            if loop.time() >= deadline:
                break
        assert last is not None
        raise last

    # -- transactions by the batch (OrbitMQ) -----------------------------------------------------
    async def send_batch_half(self, messages: Sequence[Message], *,
                              properties: Mapping[str, str] | None = None,
                              timeout: float | None = None) -> TransactionSendResult:
        """Phase one of a transaction batch: ``messages`` (one topic) stored by one broker as one
        half message, nothing delivered yet. The receipt (local state UNKNOWN) ends the batch
        later with :meth:`end_transaction`, from any producer of this group; until then the
        broker checks it back as a unit (``check_local_transaction_batch``).

        Args:
            properties: the batch's own properties (what a check shows in
                ``TransactionBatch.properties``; CHECK_IMMUNITY_TIME_IN_SECONDS is honoured).

        Raises:
            ClientError: invalid messages, several topics, a delayed message, or more bytes
                than ``max_message_size``.
            BrokerError, TimeoutError, ConnectionClosedError: the batch was not stored.
        """
        self._check_started()
        messages = list(messages)
        prepared = prepare_messages_half(messages, self._ids, properties or {},
                                         self.max_message_size)
        if prepared is None:  # reserved property names: the per-Message encoder places them
            topic, encoded = encode_batch_messages(
                messages, [self._message_id(m) for m in messages], self.max_message_size)
            return await self.send_encoded_batch_half(topic, encoded, properties=properties,
                                                      timeout=timeout)
        return await self._store_batch_half(prepared, timeout)

    async def send_columns_half(
        self, topic: str, columns: MessageColumns, *, properties: Mapping[str, str] | None = None,
        timeout: float | None = None, batch_rows_max: int = TX_COLUMNS_ROWS_MAX,
        batch_bytes_max: int = TX_COLUMNS_BYTES_MAX, in_flight_max: int = TX_COLUMNS_IN_FLIGHT_MAX,
    ) -> list[TransactionSendResult]:
        """:meth:`send_batch_half` of rows given as columns (``protocol.column_batch``), for
        bulk writers: cut into transaction batches of up to ``batch_rows_max`` rows and
        ``batch_bytes_max`` bytes, ``in_flight_max`` stored at a time, each with ``properties``
        and its own id; their receipts in row order (each ended on its own).

        Raises:
            as :meth:`AsyncProducer.send_columns`.
        """
        self._check_started()
        check_send_topic(topic)
        check_chunk_limits(batch_rows_max, batch_bytes_max, in_flight_max)
        rows, size_max, own = len(columns), self.max_message_size, properties or {}
        bytes_max = min(batch_bytes_max, size_max)

        def encode(start: int) -> tuple[PreparedBatch, int]:
            ids = IdBlock(*self._ids.next_block(min(batch_rows_max, rows - start)))
            return prepare_transaction_columns(topic, columns, start, ids, self._ids.next(), own,
                                               batch_rows_max, bytes_max, size_max)

        return await send_in_chunks(rows, encode, lambda p: self._store_batch_half(p, timeout),
                                    in_flight_max)

    async def send_encoded_batch_half(self, topic: str, encoded: Sequence[EncodedMessage], *,
                                      properties: Mapping[str, str] | None = None,
                                      timeout: float | None = None) -> TransactionSendResult:
        """:meth:`send_batch_half` of messages already encoded (``send_codec.encode_message``,
        each with its UNIQ_KEY)."""
        self._check_started()
        prepared = prepare_transaction_batch(topic, encoded, self._ids.next(), properties or {},
                                             self.max_message_size)
        return await self._store_batch_half(prepared, timeout)

    async def _store_batch_half(self, prepared: PreparedBatch,
                                timeout: float | None) -> TransactionSendResult:
        return await self._store_in_half_queue(
            prepared.topic, lambda mq: build_send_batch_request(
                prepared, mq, self.group, default_topic_queue_nums=self.default_topic_queue_nums),
            lambda resp, mq: parse_send_batch_response(resp, prepared, mq), timeout)

    async def send_batch_in_transaction(self, messages: Sequence[Message], arg: object = None, *,
                                        properties: Mapping[str, str] | None = None,
                                        timeout: float | None = None) -> TransactionSendResult:
        """A transaction batch around the listener's ``execute_local_transaction_batch``: all of
        ``messages`` delivered (COMMIT) or none (ROLLBACK); UNKNOWN leaves the batch to the
        broker's check. The verdict goes out oneway, as for a single transaction.

        Raises:
            as :meth:`send_batch_half` (the local transaction did not run).
        """
        ids = [self._message_id(m) for m in messages]
        topic, encoded = encode_batch_messages(messages, ids, self.max_message_size)
        sent = await self.send_encoded_batch_half(topic, encoded, properties=properties,
                                                  timeout=timeout)
        state, error = LocalTransactionState.ROLLBACK, None
        if sent.status is SendStatus.OK:
            batch = TransactionBatch(sent.transaction_id, topic, _with_ids(messages, ids),
                                     dict(properties or {}))
            state, error = await call_listener(
                self.listener.execute_local_transaction_batch, batch, arg)
        await self._end_oneway(sent, state, error)
        return dataclasses.replace(sent, local_state=state)

    def _message_id(self, msg: Message) -> str:
        return msg.properties.get(PropertyKey.UNIQ_KEY) or self._ids.next()

    async def _end_oneway(self, sent: TransactionSendResult, state: LocalTransactionState,
                          error: BaseException | None) -> None:
        """END_TRANSACTION_BATCH (oneway) after a batch's local transaction; a failure is logged:
        the broker's check resolves the batch."""
        ref = transaction_end.HalfMessageRef.of(sent)
        remark = None if error is None else f"executeLocalTransactionBranch exception: {error!r}"
        try:
            addr = await transaction_end.half_message_addr(self._instance, ref)
            await self._send_end_transaction(addr, transaction_end.end_request(
                self.group, state, ref, remark=remark))
        except OrbitMQError as e:
            log.warning("END_TRANSACTION_BATCH failed tx=%s: %s; the broker will check",
                        sent.transaction_id, e)

    async def end_transaction(self, result: HalfReceipt, state: LocalTransactionState, *,
                              timeout: float | None = None) -> None:
        """Commit (``LocalTransactionState.COMMIT``) or roll back (``ROLLBACK``) the transaction
        whose half message ``result`` is the receipt of, and wait for the broker's answer.

        ``result`` is the SendResult of :meth:`send_half` (``tracker.send_result``), the
        TransactionSendResult of :meth:`send_in_transaction`, or the
        :class:`~orbitmq.client.HalfMessageRef` read from either: a transaction
        left UNKNOWN can be decided later, by any producer of this group (in another process
        too), from its receipt.
        Ending a transaction again with the same verdict answers success and delivers nothing
        twice, so a caller that does not know whether its last attempt arrived simply repeats it.
        Transient refusals (SERVICE_NOT_AVAILABLE, SYSTEM_BUSY, FLUSH_DISK_TIMEOUT) and lost
        connections are tried again, ``retry_times_when_send_failed`` times.

        Args:
            timeout: seconds for each attempt (default ``send_timeout``).

        Raises:
            ClientError: ``state`` is UNKNOWN, ``result`` is no receipt, or not started.
            BrokerError: the broker refused: TRANSACTION_FAILED when the transaction already
                ended the other way (or was discarded after its checks), SYSTEM_ERROR when no
                half message of this group lies where the receipt says.
            TimeoutError, ConnectionClosedError: no answer after the last attempt.
        """
        self._check_started()
        await transaction_end.end_transaction(
            self._instance, self.group, result, state,
            timeout=self.send_timeout if timeout is None else timeout,
            attempts=1 + self.retry_times_when_send_failed)

    async def _end_tracked(self, tx: TransactionTracker) -> None:
        """Phase two of :meth:`send_in_transaction`: END_TRANSACTION (oneway) to the broker that
        stored the half message. A failure is logged, not raised: the broker's check resolves
        the transaction."""
        sent = tx.send_result
        assert sent is not None and tx.local_state is not None
        tx.advance(TransactionPhase.ENDED)
        try:
            ref = transaction_end.HalfMessageRef.of(sent)
        except ClientError as e:
            log.warning("END_TRANSACTION not sent msg=%s: %s; the broker will check", sent.msg_id, e)
            return
        addr = await transaction_end.half_message_addr(self._instance, ref)
        remark = (None if tx.error is None
                  else f"executeLocalTransactionBranch exception: {tx.error!r}")
        cmd = transaction_end.build_end_transaction_request(
            self.group, tx.local_state, commit_log_offset=ref.commit_log_offset,
            half_queue_offset=ref.half_queue_offset, msg_id=ref.msg_id,
            transaction_id=ref.transaction_id, remark=remark)
        try:
            await self._send_end_transaction(addr, cmd)
        except OrbitMQError as e:
            log.warning("END_TRANSACTION to %s failed msg=%s: %s; the broker will check",
                        addr, sent.msg_id, e)
            return
        if self._trace is not None and tx.message is not None:
            end_transaction_record(self._trace, unwrap(self.group, self.namespace), tx.message,
                                   sent.msg_id, addr, sent.transaction_id, tx.local_state.value,
                                   from_check=False, namespace=self.namespace)

    async def _send_end_transaction(self, addr: str, cmd: RemotingCommand) -> None:
        """Hands END_TRANSACTION to the connection (a seam for tests that lose it)."""
        await self._instance.remoting.invoke_oneway(addr, cmd)

class TransactionProducer(Producer):
    """Sends transactional messages (blocking); also every send of :class:`Producer`.

    The local transaction runs in the thread that calls :meth:`send_in_transaction`; checks are
    answered on a pool of ``check_thread_pool_nums`` threads. Other arguments as
    :class:`AsyncTransactionProducer`.
    """

    _thread_name = "orbitmq-tx-producer"

    def __init__(self, group: str, namesrv: str | Sequence[str] | None = None, *,
                 listener: TransactionListener, check_thread_pool_nums: int = 1,
                 **options: Any) -> None:
        if check_thread_pool_nums < 1:
            raise ClientError("check_thread_pool_nums must be >= 1")
        self._check_pool = concurrent.futures.ThreadPoolExecutor(
            check_thread_pool_nums, thread_name_prefix="orbitmq-tx-check")
        BlockingClient.__init__(self, AsyncTransactionProducer(
            group, namesrv, listener=listener, check_executor=self._check_pool, **options))

    @property
    def _tx(self) -> AsyncTransactionProducer:
        return cast(AsyncTransactionProducer, self._client)

    @property
    def listener(self) -> TransactionListener:
        return self._tx.listener

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._check_pool.shutdown(wait=False, cancel_futures=True)

    def send_in_transaction(self, msg: Message, arg: object = None, *,
                            timeout: float | None = None) -> TransactionSendResult:
        """See :meth:`AsyncTransactionProducer.send_in_transaction`; the local transaction runs
        in the calling thread."""
        tx = self._call(self._tx.send_half(msg, timeout=timeout))
        if tx.runs_local:
            state, error = self._run_local(tx.message, arg)
            tx.local_done(state, error)
        else:
            tx.local_done(LocalTransactionState.ROLLBACK, None)
        self._call(self._tx._end_tracked(tx))
        return tx.result()

    def end_transaction(self, result: HalfReceipt, state: LocalTransactionState, *,
                        timeout: float | None = None) -> None:
        """See :meth:`AsyncTransactionProducer.end_transaction`."""
        self._call(self._tx.end_transaction(result, state, timeout=timeout))

    def send_batch_half(self, messages: Sequence[Message], *,
                        properties: Mapping[str, str] | None = None,
                        timeout: float | None = None) -> TransactionSendResult:
        """See :meth:`AsyncTransactionProducer.send_batch_half`."""
        return self._call(self._tx.send_batch_half(messages, properties=properties,
                                                   timeout=timeout))

    def send_batch_in_transaction(self, messages: Sequence[Message], arg: object = None, *,
                                  properties: Mapping[str, str] | None = None,
                                  timeout: float | None = None) -> TransactionSendResult:
        """See :meth:`AsyncTransactionProducer.send_batch_in_transaction`; the local transaction
        runs in the calling thread."""
        tx = self._tx
        ids = [tx._message_id(m) for m in messages]
        topic, encoded = encode_batch_messages(messages, ids, tx.max_message_size)
        sent = self._call(tx.send_encoded_batch_half(topic, encoded, properties=properties,
                                                     timeout=timeout))
        state, error = LocalTransactionState.ROLLBACK, None
        if sent.status is SendStatus.OK:
            batch = TransactionBatch(sent.transaction_id, topic, _with_ids(messages, ids),
                                     dict(properties or {}))
            state, error = self._run_local_batch(batch, arg)
        self._call(tx._end_oneway(sent, state, error))
        return dataclasses.replace(sent, local_state=state)

    def _run_local_batch(self, batch: TransactionBatch, arg: object) -> tuple[
            LocalTransactionState, BaseException | None]:
        try:
            result = self.listener.execute_local_transaction_batch(batch, arg)
            if inspect.isawaitable(result):
                result = self._call(_awaited(result))
        except Exception as e:
            log.warning("execute_local_transaction_batch failed: %r", e)
            return LocalTransactionState.UNKNOWN, e
        return coerce_state(result), None

    def _run_local(self, msg: Message | None, arg: object) -> tuple[LocalTransactionState,
                                                                    BaseException | None]:
        assert msg is not None, "the half message is stored before the local transaction runs"
        try:
            result = self.listener.execute_local_transaction(msg, arg)
            if inspect.isawaitable(result):
                result = self._call(_awaited(result))
        except Exception as e:
            log.warning("execute_local_transaction failed: %r", e)
            return LocalTransactionState.UNKNOWN, e
        return coerce_state(result), None


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


def _with_ids(messages: Sequence[Message], ids: Sequence[str]) -> tuple[Message, ...]:
    """The messages as a listener sees them: each with its UNIQ_KEY among its properties."""
    return tuple(Message.with_system_properties(
        m.topic, m.body, properties={**m.properties, PropertyKey.UNIQ_KEY: msg_id}, tags=m.tags,
        keys=m.keys, flag=m.flag) for m, msg_id in zip(messages, ids, strict=True))
