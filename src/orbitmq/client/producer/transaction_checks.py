"""The brokers' transaction checks, answered for one producer group.

A half message left pending (verdict UNKNOWN, END_TRANSACTION lost, producer crashed) is checked
back: a broker sends CHECK_TRANSACTION_STATE (one message) or OrbitMQ's
CHECK_TRANSACTION_BATCH_STATE (one batch) to a live producer of the group. :class:`CheckAnswers`
takes them off the connection at once and answers each later, from a task, with the listener's
``check_local_transaction`` (``check_local_transaction_batch``) verdict in an END_TRANSACTION
(END_TRANSACTION_BATCH) marked fromTransactionCheck, on the connection the check came by. At
most ``hold_max`` checks are answered at once; more are dropped (logged) and the broker asks
again at its next round. Closing lets the answers under way go out, for up to
``CHECK_ANSWER_DRAIN_MAX_S``: a verdict the listener gave is sent, not dropped with the
connection (the broker would otherwise check again, and with no producer of the group left,
discard the transaction after ``transaction_check_max`` checks).

:func:`call_listener` runs any listener method, the local transaction included: a coroutine
function is awaited, a plain function called (on ``executor`` when given); an exception or
anything but a LocalTransactionState is UNKNOWN.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from orbitmq.client.namespace import unwrap
from orbitmq.client.producer import transaction_end
from orbitmq.client.producer.transaction_batch import read_batch_check
from orbitmq.client.producer.transaction_state import (
    LocalTransactionState,
    TransactionBatch,
    TransactionListener,
    coerce_state,
)
from orbitmq.errors import ClientError, ConnectionClosedError, RemoteProtocolError
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.extension_headers import CheckTransactionBatchStateRequestHeader
from orbitmq.protocol.headers import CheckTransactionStateRequestHeader
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.transport.connection import RemotingConnection

__all__ = ["CHECK_ANSWER_DRAIN_MAX_S", "CHECK_REQUEST_HOLD_MAX", "CheckAnswers", "call_listener"]

log = logging.getLogger(__name__)

CHECK_REQUEST_HOLD_MAX = 2000  # RocketMQ's checkRequestHoldMax: checks waiting for an answer
CHECK_ANSWER_DRAIN_MAX_S = 3.0  # how long closing waits for the answers under way


async def call_listener(method: Callable[..., Any], *args: Any,
                        executor: concurrent.futures.Executor | None = None
                        ) -> tuple[LocalTransactionState, BaseException | None]:
    """The listener's verdict; an exception or anything but a LocalTransactionState is UNKNOWN.
    ``executor``: run ``method`` there instead of on the loop."""
    try:
        if executor is not None:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(executor, method, *args)
        else:
            result = method(*args)
        if inspect.isawaitable(result):
            result = await result
    except Exception as e:
        log.warning("transaction listener %s failed: %r", getattr(method, "__name__", method), e)
        return LocalTransactionState.UNKNOWN, e
    return coerce_state(result), None


class CheckAnswers:
    """Answers the transaction checks of ``group`` with ``listener`` (see the module docstring).

    ``on_check`` and ``on_check_batch`` are the request handlers to register with the client
    instance; :meth:`close` lets the answers under way finish (for up to ``drain_max_s``), then
    cancels what is left.
    """

    def __init__(self, group: str, listener: TransactionListener, *,
                 executor: concurrent.futures.Executor | None = None,
                 hold_max: int = CHECK_REQUEST_HOLD_MAX, namespace: str | None = None) -> None:
        if hold_max < 1:
            raise ClientError("check_request_hold_max must be >= 1")
        self.group = group
        self.listener = listener
        self.hold_max = hold_max
        self.namespace = namespace  # a checked message shows its topic bare (client/namespace.py)
        self._executor = executor
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        # called after a check's answer went out (message, broker address, verdict): the
        # producer's message trace writes its EndTransaction record there
        self.on_answered: Callable[[MessageExt, str, LocalTransactionState], None] | None = None

    async def close(self, drain_max_s: float = CHECK_ANSWER_DRAIN_MAX_S) -> None:
        self._closing = True  # checks arriving from now on are left to the broker's next round
        tasks = list(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=drain_max_s)
        if late:
            log.warning("%d transaction check answers still under way after %.1f s at close: "
                        "dropped, the broker checks again", len(late), drain_max_s)
            for task in late:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _spawn(self, answer: Coroutine[Any, Any, None]) -> None:
        if self._closing:
            answer.close()
            log.info("transaction check dropped: the producer is closing, the broker asks again")
            return
        task = asyncio.ensure_future(answer)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def on_check_batch(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        """CHECK_TRANSACTION_BATCH_STATE: answered later by a task, with END_TRANSACTION_BATCH."""
        try:
            header, batch, group = read_batch_check(cmd)
        except RemoteProtocolError as e:
            log.warning("malformed transaction batch check from %s: %s", conn.peer, e)
            return None
        if group and group != self.group:
            log.warning("transaction batch check for group %s reached producer of %s", group,
                        self.group)
            return None
        if len(self._tasks) >= self.hold_max:
            log.warning("transaction batch check dropped tx=%s: %d checks under way",
                        batch.transaction_id, len(self._tasks))
            return None
        self._spawn(self._answer_batch_check(header, batch, conn))
        return None

    async def _answer_batch_check(self, h: CheckTransactionBatchStateRequestHeader,
                                  batch: TransactionBatch, conn: RemotingConnection) -> None:
        state, error = await call_listener(self.listener.check_local_transaction_batch, batch,
                                           executor=self._executor)
        log.info("transaction batch check answered %s tx=%s from=%s", state.name,
                 batch.transaction_id, conn.peer)
        cmd = transaction_end.build_end_transaction_batch_request(
            self.group, state, commit_log_offset=h.commit_log_offset,
            half_queue_offset=h.tran_state_table_offset, transaction_id=h.transaction_id,
            from_check=True,
            remark=None if error is None else f"checkLocalTransaction exception: {error!r}")
        try:
            conn.invoke_oneway(cmd)
        except ConnectionClosedError:
            log.info("broker connection closed before a check answer tx=%s", batch.transaction_id)

    def on_check(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        """CHECK_TRANSACTION_STATE: answered later by a task, with END_TRANSACTION on ``conn``."""
        try:
            header = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
            msg = decode_stored_message(cmd.body, check_crc=False, decompress=True)
        except RemoteProtocolError as e:
            log.warning("malformed transaction check from %s: %s", conn.peer, e)
            return None
        group = msg.properties.get(PropertyKey.PGROUP)
        if group and group != self.group:
            log.warning("transaction check for group %s reached producer of %s", group, self.group)
            return None
        if len(self._tasks) >= self.hold_max:
            log.warning("transaction check dropped msg=%s: %d checks under way", msg.msg_id,
                        len(self._tasks))
            return None
        if self.namespace:
            msg.topic = unwrap(msg.topic, self.namespace)
        self._spawn(self._answer_check(header, msg, conn))
        return None

    async def _answer_check(self, h: CheckTransactionStateRequestHeader, msg: MessageExt,
                            conn: RemotingConnection) -> None:
        state, error = await call_listener(self.listener.check_local_transaction, msg,
                                           executor=self._executor)
        log.info("transaction check answered %s msg=%s from=%s", state.name, msg.msg_id, conn.peer)
        remark = None if error is None else f"checkLocalTransaction exception: {error!r}"
        cmd = transaction_end.build_end_transaction_request(
            self.group, state, commit_log_offset=h.commit_log_offset,
            half_queue_offset=h.tran_state_table_offset, msg_id=h.msg_id or msg.msg_id,
            transaction_id=h.transaction_id or msg.uniq_key, from_check=True, remark=remark)
        try:
            conn.invoke_oneway(cmd)
        except ConnectionClosedError:
            log.info("broker connection closed before a check answer msg=%s", msg.msg_id)
            return
        if self.on_answered is not None:
            self.on_answered(msg, str(conn.peer), state)
