"""Retries and dead letters: CONSUMER_SEND_MSG_BACK (36) and sends to a ``%RETRY%`` topic.

A consumer that failed a message asks the broker to retry it with CONSUMER_SEND_MSG_BACK (the
header names the message by its CommitLog ``offset``). The broker looks the message up and
re-stores it:

- in ``%RETRY%{group}`` (created with the group's ``retry_queue_nums``, 1 by default) with delay
  level ``3 + reconsumeTimes``, or the request's ``delayLevel`` when it is > 0, so it goes through
  ``SCHEDULE_TOPIC_XXXX`` and comes back to the group's consumers (who subscribe to their retry
  topic) after that level's delay;
- in ``%DLQ%{group}`` (one queue, read and write permission so that ``orbitmq dlq`` can read it;
  no consumer subscribes to it by itself) once its reconsume times reached the group's limit, or
  at once when the request's ``delayLevel`` is negative.

The re-stored message keeps body, flag, tags, keys and every property (UNIQ_KEY included, so
consumers see the same message id), with RECONSUMETIMES (and a RECONSUME_TIME property, when the
message carries one) incremented, RETRY_TOPIC set to the original topic the first time, and
ORIGIN_MESSAGE_ID set to the first message's id (the property if present, else the request's
``originMsgId``, else UNIQ_KEY, else the offset message id).

The limit is the group's ``retry_max_times`` (16 by default), lowered to the request's
``maxReconsumeTimes`` when that is given and smaller: an operator's ``orbitmq group update
--retry-max-times`` holds for every client, and a client asking for fewer retries gets them.
(RocketMQ lets the request's value override the group's; Java and C++ clients send 16 by
default, which would make the group setting dead.) A message is thus consumed at most
``1 + limit`` times before it becomes a dead letter.

A Java client that could not reach the broker with CONSUMER_SEND_MSG_BACK sends the message to
``%RETRY%{group}`` itself, with ``reconsumeTimes`` in the send header: :meth:`route_retry_send`
sends such a message to the DLQ instead once that count exceeds the same limit.
"""

from __future__ import annotations

import logging
import random

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.durable_save import put_answer
from orbitmq.broker.schedule_service import apply_delay
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.broker.tables.topic_config_manager import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
)
from orbitmq.errors import BrokerError
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageStatus
from orbitmq.transport.connection import RemotingConnection

__all__ = ["SendBackProcessor", "retry_limit", "DLQ_QUEUE_NUMS", "RETRY_BASE_DELAY_LEVEL"]

log = logging.getLogger(__name__)

DLQ_QUEUE_NUMS = 1  # RocketMQ's DLQ_NUMS_PER_GROUP
RETRY_BASE_DELAY_LEVEL = 3  # first retry after level 3 (10 s with the default levels)
_RW = int(Perm.READ | Perm.WRITE)
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)


def retry_limit(group: SubscriptionGroupConfig, requested: int | None) -> int:
    """How many times a message of ``group`` may be retried (see the module docstring)."""
    if requested is not None and 0 <= requested < group.retry_max_times:
        return requested
    return group.retry_max_times


class SendBackProcessor:
    """CONSUMER_SEND_MSG_BACK, and the DLQ routing of plain sends to a retry topic."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.delay_level_count = len(ctx.store.delay_levels_ms)

    # -- topics ---------------------------------------------------------------------------------
    def _topic(self, name: str, queue_nums: int) -> TopicConfig:
        tc = self.ctx.topics.create_system_topic(name, queue_nums, _RW)
        if not tc.perm & Perm.WRITE:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{name}] sending message is forbidden")
        return tc

    def _group(self, group: str) -> SubscriptionGroupConfig:
        cfg = self.ctx.sub_groups.find(group)
        if cfg is None:
            raise BrokerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                              f"subscription group [{group}] does not exist")
        return cfg

    # -- CONSUMER_SEND_MSG_BACK -----------------------------------------------------------------
    async def consumer_send_msg_back(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_ext_fields(cmd.ext_fields)
        config = self.ctx.config
        if not config.broker_permission & Perm.WRITE:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the broker[{config.broker_name}] sending message is forbidden")
        try:
            inner = self._retry_message(h)
        except BrokerError as e:
            return cmd.response(e.code, e.remark)
        if inner is None:
            return cmd.response(ResponseCode.SUCCESS)  # the group keeps no retry queue: dropped
        result = await self.ctx.saver.save([inner])
        if result.status is not PutMessageStatus.PUT_OK:
            log.warning("send back of offset %d for group %s failed: %s", h.offset, h.group,
                        result.status.value)
        return cmd.response(*put_answer(result))

    def _retry_message(self, h: ConsumerSendMsgBackRequestHeader) -> MessageInner | None:
        """The message to store for a send-back (in the retry topic or the DLQ); None when the
        group has no retry queue."""
        group = self._group(h.group)
        if group.retry_queue_nums <= 0:
            return None
        msg = self.ctx.store.look_message_by_offset(h.offset)
        if msg is None:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        limit = retry_limit(group, h.max_reconsume_times)
        if msg.reconsume_times >= limit or h.delay_level < 0:
            inner = self._copy(msg, h.origin_msg_id, DLQ_GROUP_TOPIC_PREFIX + h.group, DLQ_QUEUE_NUMS)
            inner.properties.pop(PropertyKey.DELAY, None)
            log.info("message to DLQ group=%s origin=%s reconsume_times=%d limit=%d",
                     h.group, inner.properties.get(PropertyKey.ORIGIN_MESSAGE_ID),
                     msg.reconsume_times, limit)
            return inner
        inner = self._copy(msg, h.origin_msg_id, RETRY_GROUP_TOPIC_PREFIX + h.group,
                           group.retry_queue_nums)
        level = h.delay_level if h.delay_level > 0 else RETRY_BASE_DELAY_LEVEL + msg.reconsume_times
        inner.properties[PropertyKey.DELAY] = str(level)
        apply_delay(inner, self.delay_level_count)
        return inner

    def _copy(self, msg: MessageExt, origin_msg_id: str | None, topic: str,
              queue_nums: int) -> MessageInner:
        """``msg`` bound for ``topic`` (created if needed), one more reconsume counted."""
        tc = self._topic(topic, queue_nums)
        props = dict(msg.properties)
        props.setdefault(PropertyKey.RETRY_TOPIC, msg.topic)
        if not props.get(PropertyKey.ORIGIN_MESSAGE_ID):
            props[PropertyKey.ORIGIN_MESSAGE_ID] = (origin_msg_id or msg.uniq_key or msg.offset_msg_id)
        reconsume_times = msg.reconsume_times + 1
        if PropertyKey.RECONSUME_TIME in props:
            props[PropertyKey.RECONSUME_TIME] = str(reconsume_times)
        queue_id = random.randrange(max(tc.write_queue_nums, 1))
        return MessageInner(
            topic, queue_id, bytes(msg.body), props, msg.flag, msg.sys_flag & _USER_SYS_FLAGS,
            msg.born_timestamp, msg.born_host, self.ctx.host.store_host, reconsume_times,
        )

    # -- plain sends to a retry topic -----------------------------------------------------------
    def route_retry_send(self, h: SendMessageRequestHeader, msg: MessageInner) -> None:
        """A producer's send to ``%RETRY%{group}``: moved to the DLQ (in place) when its
        ``reconsumeTimes`` exceeds the group's limit. Raises BrokerError for an unknown group."""
        if not msg.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return
        name = msg.topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        group = self._group(name)
        limit = retry_limit(group, h.max_reconsume_times)
        if h.reconsume_times <= limit:
            return
        self._topic(DLQ_GROUP_TOPIC_PREFIX + name, DLQ_QUEUE_NUMS)
        msg.topic = DLQ_GROUP_TOPIC_PREFIX + name
        msg.queue_id = 0
        msg.properties.pop(PropertyKey.DELAY, None)
        log.info("retry send to DLQ group=%s reconsume_times=%d limit=%d",
                 name, h.reconsume_times, limit)
