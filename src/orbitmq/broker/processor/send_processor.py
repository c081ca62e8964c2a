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

Every send is saved through the durable-save seam (durable_save.py), which also says what the
outcome is called on the wire: without a durability condition (ASYNC_FLUSH) the answer is built
in the handler's own call; under SYNC_FLUSH the sends of one group commit share its one future.

A queue id outside ``[0, writeQueueNums)`` is replaced by one picked round robin. Every response
extField is a string (the C++ client reads numbers as 0): ``msgId`` is the offset message id (the
comma-joined ids for a batch), ``queueId`` and ``queueOffset`` (the first message's); a timer
message's answer adds ``recallHandle`` (RocketMQ 5.3: RECALL_MESSAGE cancels it, broker/timer).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.durable_save import APPENDED, put_answer
from orbitmq.broker.fast_failure import BrokerFastFailure
from orbitmq.broker.message_types import remoting_priority_queue, remoting_refusal
from orbitmq.broker.role import RoleState
from orbitmq.broker.schedule_service import apply_delay
from orbitmq.broker.tables.topic_config_manager import (
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    TRANS_HALF_TOPIC,
    validate_topic,
)
from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.protocol.lite import LITE_TOPIC_PROPERTY
from orbitmq.protocol.message import MessageSysFlag, PropertyKey
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX, parse_properties
from orbitmq.protocol.stored import EncodedBatch, encode_wire_batch, encode_wire_single
from orbitmq.protocol.topic_attributes import (
    TopicMessageType,
    has_timer_property,
    topic_message_type,
)
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

if TYPE_CHECKING:
    from orbitmq.broker.processor.send_back_processor import SendBackProcessor

__all__ = ["SendProcessor", "parse_properties"]

log = logging.getLogger(__name__)

_Answer = RemotingCommand | Awaitable[RemotingCommand]  # awaitable only when a save waits
_BORN_HOST = "orbitmq.born_host"  # RemotingConnection.attributes key: the peer as (ip, port)
# Plain ints: IntFlag arithmetic costs microseconds per operation on the hot path.
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)
_PREPARED = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
_PERM_WRITE = int(Perm.WRITE)
_PUT_OK = PutMessageStatus.PUT_OK
ROUTE_PUBLISH_WAIT_S = 1.0  # the longest a topic-creating send waits for its route to be registered



def _mentions_timer(body: bytes | bytearray | memoryview) -> bool:
    """Whether a batch body may hold a timer property (a cheap look; the general path decides)."""
    if isinstance(body, memoryview):
        body = body.tobytes()
    return body.find(b"TIMER_") >= 0


class SendProcessor:
    """The send handlers: synchronous when a save waits for nothing (ASYNC_FLUSH: no task, no
    future per send), a loop future shared out by the durable-save seam when it waits.

    Args:
        ctx: the broker's context (tables, store, durable-save seam).
        to_half: the transaction service's hook for a transactional send: its half message.
        send_back: retry topics' DLQ rule (``route_retry_send``).
        park_timer: the timer service's hook for TIMER_* properties (None: no timers).
        recall_handle: the timer service's recall handle of a parked message (None: none).
        fast_failure: SYSTEM_BUSY for sends that waited too long (None: off).
    """

    def __init__(self, ctx: BrokerContext,
                 to_half: Callable[[MessageInner, str], MessageInner],
                 send_back: SendBackProcessor, *,
                 park_timer: Callable[[MessageInner], bool] | None = None,
                 recall_handle: Callable[[MessageInner], str | None] | None = None,
                 fast_failure: BrokerFastFailure | None = None) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.host = ctx.host
        self.store = ctx.store
        self.saver = ctx.saver
        self.stats = ctx.stats
        self.topics = ctx.topics
        self.to_half = to_half
        self.send_back = send_back
        self.max_message_size = ctx.config.store.max_message_size
        self.delay_level_count = len(ctx.store.delay_levels_ms)
        self._round_robin = itertools.count()
        # The timer service's hook (TIMER_* properties); raises BrokerError for a bad time.
        self.park_timer = park_timer
        self.recall_handle = recall_handle
        # SYSTEM_BUSY for a send that waited too long in the broker (broker/fast_failure.py).
        self.fast_failure = fast_failure
        # (parent, lite topic) -> the lite topic's store topic (broker/lite; BrokerError when
        # refused): set by the controller.
        self.lite_store_topic: Callable[[str, str], str] | None = None

    # -- handlers -------------------------------------------------------------------------------
    def send_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> _Answer:
        h = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields)
        return self._send(cmd, conn, h, h.batch)

    def send_batch_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> _Answer:
        h = SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields)
        return self._send(cmd, conn, h, True)

    def _send(self, cmd: RemotingCommand, conn: RemotingConnection, h: SendMessageRequestHeader,
              batch: bool) -> _Answer:
        ff = self.fast_failure
        if ff is not None and conn.last_received - ff.last_tick > ff.threshold_s:
            busy = ff.refusal(conn.last_received)
            if busy is not None:
                return cmd.response(*busy)
        try:
            tc, created = self._check(h, len(cmd.body))
            if tc.attributes and (why := remoting_refusal(tc, h.properties, batch)) is not None:
                raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, why)  # message.type (RocketMQ 5)
            queue_id = h.queue_id
            if not 0 <= queue_id < tc.write_queue_nums:
                queue_id = next(self._round_robin) % tc.write_queue_nums
            by_priority = remoting_priority_queue(tc, h.properties, cmd.body, batch)
            if by_priority is not None:
                queue_id = by_priority  # a PRIORITY topic: the message's priority decides
            lite = self._lite_store_topic(tc, h, batch)
            if lite is not None:  # a lite topic's own queue (broker/lite): the general path
                encoded, queue_id = None, 0
                msg = self._single(cmd, conn, h, queue_id)
                msg.topic = lite
                msgs = [msg]
            elif batch:
                # A batch naming a timer property takes the general path, which refuses it.
                encoded = None if _mentions_timer(cmd.body) else self._encoded_batch(cmd, conn, h, queue_id)
            elif has_timer_property(h.properties):
                encoded = None  # a timer message: the general path parks it (broker/timer)
            else:
                encoded = self._encoded_single(cmd, conn, h, queue_id)
            if encoded is None and lite is None:
                msgs = self._batch(cmd, conn, h, queue_id) if batch else [self._single(cmd, conn, h, queue_id)]
        except BrokerError as e:  # a check, or the timer service refused a timer's time
            return cmd.response(e.code, e.remark)
        except RemoteProtocolError as e:  # the stored codec refused the properties or the batch
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        tx_id = recall = None
        if encoded is not None:
            result = self.saver.append(encoded)
        else:
            if not batch and self.recall_handle is not None:
                # A parked message's (RocketMQ 5.3), made before the store time is taken: a
                # delay level's handle then names a time at or before its real delivery time.
                recall = self.recall_handle(msgs[0])
            result = self.saver.append(msgs)
            if msgs[0].topic == TRANS_HALF_TOPIC:
                tx_id = msgs[0].properties.get(PropertyKey.UNIQ_KEY)
        self.stats.on_send(h.topic, result.append, None if encoded is not None else msgs)
        answer = self.saver.answer(result, self._response, cmd, queue_id, tx_id, self.ctx.role,
                                   recall)
        if created and result.status is _PUT_OK:
            return self._after_route_published(answer)
        return answer

    async def _after_route_published(self, answer: _Answer) -> RemotingCommand:
        """The answer to the send that created its topic, once the name servers have the new
        route (or ROUTE_PUBLISH_WAIT_S passed): whoever the sender tells next (a consumer, a
        CLI run) finds the topic, instead of racing the registration that follows it."""
        try:
            await asyncio.wait_for(self.ctx.route_published(), ROUTE_PUBLISH_WAIT_S)
        except TimeoutError:
            log.warning("new topic's route not published within %.1f s; answering the send",
                        ROUTE_PUBLISH_WAIT_S)
        return answer if isinstance(answer, RemotingCommand) else await answer

    def _lite_store_topic(self, tc: TopicConfig, h: SendMessageRequestHeader, batch: bool) -> str | None:
        """The store topic of a 4.x send to a LITE topic (its ``__LITE_TOPIC`` property names
        the lite topic, protocol/lite.py); None for any other topic. BrokerError when refused."""
        if not tc.attributes or topic_message_type(tc.attributes) is not TopicMessageType.LITE:
            if h.properties and LITE_TOPIC_PROPERTY in h.properties:
                raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"topic {h.topic} is not a LITE "
                                  "topic (message.type): a message with a lite topic is refused")
            return None
        props = parse_properties(h.properties) if h.properties else {}
        lite = props.get(LITE_TOPIC_PROPERTY, "")
        if self.lite_store_topic is None:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "lite topics are not served here")
        try:
            return self.lite_store_topic(h.topic, lite)
        except BrokerError as e:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, e.remark) from None

    # -- checks ---------------------------------------------------------------------------------
    def _check(self, h: SendMessageRequestHeader, body_size: int) -> tuple[TopicConfig, bool]:
        """The topic's config and whether this send created it; BrokerError when it may not go."""
        if not self.config.broker_permission & _PERM_WRITE:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                           f"the broker[{self.config.broker_name}] sending message is forbidden")
        if body_size > self.max_message_size:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                           f"message body size {body_size} exceeds the limit {self.max_message_size}")
        if h.properties is not None and len(h.properties) >= PROPERTIES_SIZE_MAX:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                           f"message properties size {len(h.properties)} exceeds the limit {PROPERTIES_SIZE_MAX}")
        topic = h.topic
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"sending message to topic[{topic}] is forbidden")
        tc = self.topics.get(topic)
        created = tc is None
        if tc is None:
            tc = self._create_topic(h)
        if not tc.perm & _PERM_WRITE:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        if tc.write_queue_nums <= 0:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"topic[{topic}] has no write queue")
        return tc, created

    def _create_topic(self, h: SendMessageRequestHeader) -> TopicConfig:
        reason = validate_topic(h.topic)
        if reason is not None:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, reason)
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            # A group's retry topic has the group's retry queues (1), not the default topic's.
            group = self.ctx.sub_groups.find(h.topic[len(RETRY_GROUP_TOPIC_PREFIX):])
            if group is not None:
                return self.topics.create_system_topic(h.topic, group.retry_queue_nums)
        tc = self.topics.create_in_send(h.topic, h.default_topic, h.default_topic_queue_nums, 0)
        if tc is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
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
            self._born_host(conn), self.host.store_host, h.reconsume_times,
        )
        if h.sys_flag & _PREPARED or props.get(PropertyKey.TRAN_MSG) == "true":
            return self.to_half(msg, h.producer_group)  # a half message
        if h.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            self.send_back.route_retry_send(h, msg)  # past its retries: to the DLQ
        if PropertyKey.DELAY in props:
            apply_delay(msg, self.delay_level_count)  # parked in SCHEDULE_TOPIC_XXXX
        elif self.park_timer is not None:
            self.park_timer(msg)  # TIMER_* properties: parked in the timer topic (broker/timer)
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
            self._born_host(conn), self.host.store_host, h.reconsume_times,
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
            h.born_timestamp, self._born_host(conn), self.host.store_host, h.reconsume_times,
        )

    def _batch(self, cmd: RemotingCommand, conn: RemotingConnection, h: SendMessageRequestHeader,
               queue_id: int) -> list[MessageInner]:
        try:
            entries = decode_batch(cmd.body)
        except RemoteProtocolError as e:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, f"malformed batch body: {e}") from None
        if not entries:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "empty batch")
        born_host, store_host = self._born_host(conn), self.host.store_host
        if h.sys_flag & _PREPARED:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL, "a batch may not hold transaction messages")
        sys_flag = h.sys_flag & _USER_SYS_FLAGS
        msgs = []
        for flag, body, props in entries:
            if PropertyKey.DELAY in props or props.get(PropertyKey.TRAN_MSG) == "true" or \
                    any(name.startswith("TIMER_") for name in props):
                raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                               "a batch may not hold delayed, timer or transaction messages")
            msgs.append(MessageInner(h.topic, queue_id, body, props, flag, sys_flag, h.born_timestamp,
                                     born_host, store_host, h.reconsume_times))
        return msgs

    # -- answering ------------------------------------------------------------------------------
    @staticmethod
    def _response(result: PutMessageResult, cmd: RemotingCommand, queue_id: int,
                  tx_id: str | None, role: RoleState,
                  recall: str | None = None) -> RemotingCommand:
        """The send's answer (the seam calls it once the save is as durable as it gets): the
        stored position whenever the bytes are in the commit log, with the outcome's code; in
        controller mode ``masterEpoch``, the epoch of the master that answered."""
        append = result.append
        status = result.status
        if append is None or (status is not _PUT_OK and status not in APPENDED):
            return cmd.response(*put_answer(result))
        ids = append.msg_ids
        fields = {
            "msgId": ids[0] if len(ids) == 1 else ",".join(ids),
            "queueId": str(queue_id),
            "queueOffset": str(append.queue_offset),
        }
        if tx_id is not None:
            fields["transactionId"] = tx_id
        if recall is not None:
            fields["recallHandle"] = recall
        if role.epoch:
            fields["masterEpoch"] = str(role.epoch)
        if status is _PUT_OK:
            return cmd.response(ResponseCode.SUCCESS, None, fields)
        code, remark = put_answer(result)
        return cmd.response(code, remark, fields)
