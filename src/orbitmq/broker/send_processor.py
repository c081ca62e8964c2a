"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320).

The C++ client sends everything, batches too (``batch="1"``), over code 10 with long header
names; Java uses 310/320 with the short a..n names. Headers are parsed once; the names are judged
by the fields present, not by the code. A batch is one store write.

Checks, each answered with a response code and a remark (the store stays untouched):
- topic name (``^[%|a-zA-Z0-9_-]+$``, at most 127 characters): MESSAGE_ILLEGAL;
- topics only the broker writes (TBW102, SCHEDULE_TOPIC_XXXX, transaction topics): NO_PERMISSION;
- unknown topic without auto-creation: TOPIC_NOT_EXIST;
- body over ``max_message_size`` (4 MiB), properties of 32 KiB or more, a malformed batch,
  properties that break the one rule of ``protocol.properties`` (the remark names the problem):
  MESSAGE_ILLEGAL;
- transaction messages (sysFlag prepared or TRAN_MSG=true) go to the TransactionService as half
  messages (NO_PERMISSION with ``reject_transaction_message``); their answer adds
  ``transactionId`` (the UNIQ_KEY); a batch may not be one (MESSAGE_ILLEGAL).

A message with a DELAY level is stored in SCHEDULE_TOPIC_XXXX (schedule_service.apply_delay);
a send to ``%RETRY%{group}`` past the group's retries goes to ``%DLQ%{group}``
(send_back_processor.route_retry_send).

A queue id outside ``[0, writeQueueNums)`` is replaced by one picked round robin. Every response
extField is a string (the C++ client reads numbers as 0): ``msgId`` is the offset message id (the
comma-joined ids for a batch), ``queueId`` and ``queueOffset`` (the first message's).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from orbitmq.broker.schedule_service import apply_delay
from orbitmq.broker.topic_config_manager import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    validate_topic,
)
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.protocol.message import MessageSysFlag, PropertyKey
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX, parse_properties
from orbitmq.protocol.stored import EncodedBatch, encode_wire_batch, encode_wire_single
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.server import RemotingServer

if TYPE_CHECKING:
    from orbitmq.broker.controller import BrokerController

__all__ = ["SendProcessor", "parse_properties"]

log = logging.getLogger(__name__)

_Answer = RemotingCommand | Awaitable[RemotingCommand]  # awaitable only under SYNC_FLUSH
_BORN_HOST = "orbitmq.born_host"  # RemotingConnection.attributes key: the peer as (ip, port)
# Plain ints: IntFlag arithmetic costs microseconds per operation on the hot path.
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
_PERM_WRITE = int(Perm.WRITE)
ROUTE_PUBLISH_WAIT_S = 1.0  # the longest a topic-creating send waits for its route to be registered

_PUT_ERRORS: dict[PutMessageStatus, tuple[ResponseCode, str]] = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, "flush to slave timed out"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE, "service not available now: the store is stopped or the disk is full"),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken"),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL, "the message is illegal: body, topic or properties too long or malformed"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL, f"the message properties exceed {PROPERTIES_SIZE_MAX} bytes"),
    PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED]broker busy, try later"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "unknown error while storing the message"),
}


class _Refused(Exception):
    """A check failed: answered with ``code`` and ``remark`` (an expected outcome, not a bug)."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        self.code = code
        self.remark = remark


class SendProcessor:
    """The send handlers; synchronous under ASYNC_FLUSH (no task per send), a coroutine awaiting
    the group commit under SYNC_FLUSH."""

    def __init__(self, broker: BrokerController) -> None:
        self.broker = broker
        self.store = broker.store
        self.topics = broker.topics
        self.max_message_size = broker.config.store.max_message_size
        self.sync_flush_timeout_s = broker.config.store.sync_flush_timeout_ms / 1000
        self._round_robin = itertools.count()
        # SYNC_FLUSH: store flush future -> (timeout timer, sends waiting for it); see _await_flush
        self._flush_groups: dict[object, tuple[asyncio.TimerHandle, list[Any]]] = {}
        self._wake_scheduled = False  # a store.wake_deferred call is due (see _send)
        self._loop: asyncio.AbstractEventLoop | None = None

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.SEND_MESSAGE, self.send_message)
        server.register(RequestCode.SEND_MESSAGE_V2, self.send_message)
        server.register(RequestCode.SEND_BATCH_MESSAGE, self.send_batch_message)

    # -- handlers -------------------------------------------------------------------------------
    def send_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> _Answer:
        h = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields)
        return self._send(cmd, conn, h, h.batch)

    def send_batch_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> _Answer:
        h = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields)
        return self._send(cmd, conn, h, True)

    def _send(self, cmd: RemotingCommand, conn: RemotingConnection, h: SendMessageRequestHeader,
              batch: bool) -> _Answer:
        try:
            tc, created = self._check(h, len(cmd.body))
            queue_id = h.queue_id
            if not 0 <= queue_id < tc.write_queue_nums:
                queue_id = next(self._round_robin) % tc.write_queue_nums
            if batch:
                encoded = self._encoded_batch(cmd, conn, h, queue_id)
            else:
                encoded = self._encoded_single(cmd, conn, h, queue_id)
            if encoded is None:
                msgs = self._batch(cmd, conn, h, queue_id) if batch else [self._single(cmd, conn, h, queue_id)]
        except _Refused as r:
            return cmd.response(r.code, r.remark)
        except RemoteProtocolError as e:  # the stored codec refused the properties or the batch
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        tx_id = None
        if encoded is not None:
            result = self.store.put_encoded(encoded, wait_flush=False, defer_wakeups=True)
        else:
            result = self.store.put_messages(msgs, wait_flush=False, defer_wakeups=True)
            if msgs[0].topic == TRANS_HALF_TOPIC:
                tx_id = msgs[0].properties.get(PropertyKey.UNIQ_KEY)
        self.broker.stats.on_send(h.topic, result.append, None if encoded is not None else msgs)
        if not self._wake_scheduled:
            self._schedule_wake()
        answer: _Answer
        if result.flush_future is not None:
            answer = self._await_flush(cmd, result, queue_id, tx_id)
        else:
            answer = self._response(cmd, result, queue_id, tx_id)
        if created and result.status is PutMessageStatus.PUT_OK:
            return self._after_route_published(answer)
        return answer

    async def _after_route_published(self, answer: _Answer) -> RemotingCommand:
        """The answer to the send that created its topic, once the name servers have the new
        route (or ROUTE_PUBLISH_WAIT_S passed): whoever the sender tells next (a consumer, a
        CLI run) finds the topic, instead of racing the registration that follows it."""
        try:
            await asyncio.wait_for(self.broker.registrar.registered_after_now(),
                                   ROUTE_PUBLISH_WAIT_S)
        except TimeoutError:
            log.warning("new topic's route not published within %.1f s; answering the send",
                        ROUTE_PUBLISH_WAIT_S)
        return answer if isinstance(answer, RemotingCommand) else await answer

    # -- checks ---------------------------------------------------------------------------------
    def _check(self, h: SendMessageRequestHeader, body_size: int) -> tuple[TopicConfig, bool]:
        """The topic's config and whether this send created it; _Refused when it may not go."""
        if not self.broker.config.broker_permission & _PERM_WRITE:
            raise _Refused(ResponseCode.NO_PERMISSION,
                           f"the broker[{self.broker.config.broker_name}] sending message is forbidden")
        if body_size > self.max_message_size:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL,
                           f"message body size {body_size} exceeds the limit {self.max_message_size}")
        if h.properties is not None and len(h.properties) >= PROPERTIES_SIZE_MAX:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL,
                           f"message properties size {len(h.properties)} exceeds the limit {PROPERTIES_SIZE_MAX}")
        topic = h.topic
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise _Refused(ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden")
        tc = self.topics.get(topic)
        created = tc is None
        if tc is None:
            tc = self._create_topic(h)
        if not tc.perm & _PERM_WRITE:
            raise _Refused(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if tc.write_queue_nums <= 0:
            raise _Refused(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] has no write queue")
        return tc, created

    def _create_topic(self, h: SendMessageRequestHeader) -> TopicConfig:
        reason = validate_topic(h.topic)
        if reason is not None:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, reason)
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # A group's retry topic has the group's retry queues (1), not the default topic's.
            group = self.broker.sub_groups.find(h.topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            if group is not None:
                return self.topics.create_system_topic(h.topic, group.retry_queue_nums)
        tc = self.topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums, 0)
        if tc is None:
            raise _Refused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        return tc

    # -- building messages ----------------------------------------------------------------------
    def _born_host(self, conn: RemotingConnection) -> tuple[str, int]:
        host = conn.attributes.get(_BORN_HOST)
        if host is None:
            ip, _, port = conn.peer.rpartition(":")
            host = conn.attributes[_BORN_HOST] = (ip or "127.0.0.1", int(port) if port.isdigit() else 0)
        return host

    def _single(self, cmd: RemotingCommand, conn: RemotingConnection, h: SendMessageRequestHeader,
                queue_id: int) -> MessageInner:
        props = parse_properties(h.properties)  # RemoteProtocolError: answered MESSAGE_ILLEGAL
        body = cmd.body if isinstance(cmd.body, bytes) else bytes(cmd.body)
        msg = MessageInner(
            h.topic, queue_id, body, props, h.flag, h.sys_flag & _USER_SYS_FLAGS, h.born_timestamp,
            self._born_host(conn), self.broker.store_host, h.reconsume_times,
        )
        if h.sys_flag & _PREPARED or props.get(PropertyKey.TRAN_MSG) == "true":
            return self.broker.transactions.to_half(msg, h.producer_group)  # a half message
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            self.broker.send_back.route_retry_send(h, msg)  # past its retries: to the DLQ
        if PropertyKey.DELAY in props:
            apply_delay(msg, self.broker.schedule.level_count)  # parked in SCHEDULE_TOPIC_XXXX
        return msg

    def _encoded_batch(self, cmd: RemotingCommand, conn: RemotingConnection,
                       h: SendMessageRequestHeader, queue_id: int) -> EncodedBatch | None:
        """A batch body in stored form without a message object per entry; None sends it down
        the general path (``_batch``): an entry holds DELAY or TRAN_MSG. A malformed body
        raises RemoteProtocolError (answered MESSAGE_ILLEGAL)."""
        if h.sys_flag & _PREPARED:
            return None
        return encode_wire_batch(
            h.topic, queue_id, cmd.body, h.sys_flag & _USER_SYS_FLAGS, h.born_timestamp,
            self._born_host(conn), self.broker.store_host, h.reconsume_times,
            self.max_message_size, self.store.max_blob_size,
        )

    def _encoded_single(self, cmd: RemotingCommand, conn: RemotingConnection,
                        h: SendMessageRequestHeader, queue_id: int) -> EncodedBatch | None:
        """``_single`` for a plain message, in stored form at once; None for the general path:
        transaction halves, retry topics (the DLQ rule), DELAY or TRAN_MSG properties.
        Malformed properties raise RemoteProtocolError (answered MESSAGE_ILLEGAL)."""
        if h.sys_flag & _PREPARED or h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        return encode_wire_single(
            h.topic, queue_id, cmd.body, h.properties, h.flag, h.sys_flag & _USER_SYS_FLAGS,
            h.born_timestamp, self._born_host(conn), self.broker.store_host, h.reconsume_times,
        )

    def _batch(self, cmd: RemotingCommand, conn: RemotingConnection, h: SendMessageRequestHeader,
               queue_id: int) -> list[MessageInner]:
        try:
            entries = decode_batch(cmd.body)
        except RemoteProtocolError as e:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {e}") from None
        if not entries:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        born_host, store_host = self._born_host(conn), self.broker.store_host
        if h.sys_flag & _PREPARED:
            raise _Refused(ResponseCode.MESSAGE_ILLEGAL, "a batch may not hold transaction messages")
        sys_flag = h.sys_flag & _USER_SYS_FLAGS
        msgs = []
        for flag, body, props in entries:
            if PropertyKey.DELAY in props or props.get(PropertyKey.TRAN_MSG) == "true":
                raise _Refused(ResponseCode.MESSAGE_ILLEGAL,
                               "a batch may not hold delayed or transaction messages")
            msgs.append(MessageInner(h.topic, queue_id, body, props, flag, sys_flag, h.born_timestamp,
                                     born_host, store_host, h.reconsume_times))
        return msgs

    # -- answering ------------------------------------------------------------------------------
    def _response(self, cmd: RemotingCommand, result: PutMessageResult, queue_id: int,
                  tx_id: str | None = None) -> RemotingCommand:
        append = result.append
        if append is None or result.status not in (PutMessageStatus.PUT_OK,
                                                   PutMessageStatus.FLUSH_DISK_TIMEOUT):
            code, remark = _PUT_ERRORS.get(result.status, (ResponseCode.SYSTEM_ERROR, str(result.status)))
            return cmd.response(code, result.remark or remark)  # the store's reason, if it gave one
        ids = append.msg_ids
        fields = {
            "msgId": ids[0] if len(ids) == 1 else ",".join(ids),
            "queueId": str(queue_id),
            "queueOffset": str(append.queue_offset),
        }
        if tx_id is not None:
            fields["transactionId"] = tx_id
        if result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
            return cmd.response(ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out", fields)
        return cmd.response(ResponseCode.SUCCESS, None, fields)

    def _await_flush(self, cmd: RemotingCommand, result: PutMessageResult,
                     queue_id: int, tx_id: str | None = None) -> asyncio.Future[RemotingCommand]:
        """The answer once the group commit has synced: a loop future, no task per send. Sends
        of one group share the store's flush future, so its completion crosses threads once per
        group; one timer per group answers FLUSH_DISK_TIMEOUT if the sync never ends."""
        flush = result.flush_future
        assert flush is not None
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[RemotingCommand] = loop.create_future()
        group = self._flush_groups.get(flush)
        if group is None:
            timer = loop.call_later(self.sync_flush_timeout_s + 1.0, self._flushed, flush, False)
            group = self._flush_groups[flush] = (timer, [])

            def done(f: Any) -> None:  # on the loop (store.wake_deferred) or the flush thread
                if not loop.is_closed():
                    ok = not f.cancelled() and f.exception() is None and f.result()
                    loop.call_soon_threadsafe(self._flushed, f, ok)

            flush.add_done_callback(done)
        group[1].append((answer, cmd, result, queue_id, tx_id))
        return answer

    def _schedule_wake(self) -> None:
        """The store's wakeups (and sync) for this iteration's sends, once: under SYNC_FLUSH as
        soon as the requests read so far are taken (the answers wait for the sync), under
        ASYNC_FLUSH one iteration later, after the answers have been written."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        self._wake_scheduled = True
        if self.store.sync_flush:
            loop.call_soon(self._wake_deferred)
        else:
            loop.call_soon(loop.call_soon, self._wake_deferred)

    def _wake_deferred(self) -> None:
        self._wake_scheduled = False
        self.store.wake_deferred()

    def _flushed(self, flush: object, durable: bool) -> None:
        """Answers every send of a flush group (on the loop), once."""
        timer, waiters = self._flush_groups.pop(flush, (None, ()))
        if timer is not None:
            timer.cancel()
        for answer, cmd, result, queue_id, tx_id in waiters:
            if not durable:
                result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            if not answer.done():
                answer.set_result(self._response(cmd, result, queue_id, tx_id))
