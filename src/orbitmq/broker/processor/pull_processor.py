"""PULL_MESSAGE (11): read a queue from an offset, filtered by tags, held when there is nothing yet.

Response codes from the store's status, as RocketMQ's PullMessageProcessor:

======================================  =======================================================
store status                            response
======================================  =======================================================
FOUND                                   SUCCESS, body = the stored messages as they lie on disk
NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING PULL_RETRY_IMMEDIATELY (nextBeginOffset past the scan)
NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_Q  PULL_OFFSET_MOVED if offset != 0, else PULL_NOT_FOUND
OFFSET_OVERFLOW_ONE, OFFSET_FOUND_NULL  PULL_NOT_FOUND (held first when the suspend bit is set)
OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL PULL_OFFSET_MOVED (nextBeginOffset = a valid offset)
======================================  =======================================================

Every answer other than PULL_NOT_FOUND moves ``nextBeginOffset`` away from the request's offset
(the C++ PullConsumer loops until NO_NEW_MSG). An answer holds up to ``maxMsgNums`` messages
within the broker's transfer bounds and, when the request gives ``maxMsgBytes`` (RocketMQ 5
clients do), within that many bytes; its first message comes whatever its size. Response
extFields are strings. The body goes out with ``send_parts``: the file slices are never copied
or re-encoded, and messages lying back to back in the commit log go out as one slice.

On a slave (broker/role.py), as RocketMQ's: the pull's commitOffset is not stored (the master's
table is the one that counts; the slave copies it), and an offset the slave's queue does not
reach (or no longer holds) does not move the consumer: a slave may simply be behind its master,
so instead of PULL_OFFSET_MOVED it answers PULL_NOT_FOUND with ``nextBeginOffset`` = the
request's offset (held by long polling like any empty pull; RocketMQ answers
PULL_RETRY_IMMEDIATELY, which makes its clients pull again at once). A slave that does not know
a topic yet (its table copy comes every ``slave_sync_interval_ms``) serves the queues its store
holds.

In controller mode a SYNC_MASTER serves only messages that end at or before its confirm offset
(``BrokerContext.read_bound``; docs/failover.md): an entry past it answers like the end of the
queue (PULL_NOT_FOUND, ``nextBeginOffset`` = the request's offset), and a held pull waits for the
confirm offset to pass that entry (LongPollService.confirmed), not for the queue to grow.

``suggestWhichBrokerId`` (RocketMQ's rule): with ``slave_read_enable``, a pull whose last message
lies more than ``access_message_in_memory_max_ratio`` % of the machine's memory behind the end of
the commit log (a consumer reading cold data) is told the group's
``whichBrokerWhenConsumeSlowly`` (1 by default: a slave), otherwise the group's ``brokerId``
(0); without it (the default) always 0, the master.

The subscription is the request's own when it has the subscription bit; otherwise the group's
from its heartbeats; otherwise the request's ``subscription`` field or ``*``: the C++ PullConsumer
and benchmarks pull without ever sending a heartbeat. Its ``expressionType`` says TAG (also when
absent) or SQL92. A subscription the broker cannot evaluate is refused before anything is read,
so the pull never moves ``nextBeginOffset`` nor commits an offset past messages it did not
evaluate:

- an expression that does not parse (or an unknown type): SUBSCRIPTION_PARSE_FAILED;
- SQL92 while ``enable_property_filter`` is off: FILTER_NOT_SUPPORTED (OrbitMQ's code; RocketMQ
  answers SYSTEM_ERROR with the same remark, see protocol/codes.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.message_filter import PullFilter, build_filter
from orbitmq.broker.processor.long_poll_service import HeldPull, LongPollService
from orbitmq.config import QUEUE_NUMS_MAX
from orbitmq.errors import BrokerError, ConnectionClosedError, ExpressionError
from orbitmq.protocol.bodies import ExpressionType, MessageModel, Perm, TopicConfig
from orbitmq.protocol.codes import LanguageCode, OrbitMQRequestCode, ResponseCode, SerializeType
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.expressions import expression_type_of
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.lite import split_lite_queue_topic
from orbitmq.protocol.topic_attributes import TopicMessageType, topic_message_type
from orbitmq.store.status import GetMessageResult, GetMessageStatus
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.server import internal_error_response

__all__ = ["PullProcessor", "ParsedPull", "parsed_pull", "pull_response_code", "check_subscription",
           "physical_memory_bytes"]

log = logging.getLogger(__name__)

# Plain ints: IntFlag arithmetic is slow on the hot path.
_PERM_READ = int(Perm.READ)
_FLAG_COMMIT = int(PullSysFlag.COMMIT_OFFSET)
_FLAG_SUSPEND = int(PullSysFlag.SUSPEND)
_FLAG_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
_RETRY = (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING)
_EMPTY_QUEUE = (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
_NOT_FOUND = (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_FOUND_NULL)
_BULK = int(OrbitMQRequestCode.PULL_MESSAGE_BULK)
_SERIALIZE_TYPES = (SerializeType.JSON, SerializeType.ROCKETMQ)  # by their wire number


class ParsedPull(RemotingCommand):
    """A PULL_MESSAGE request whose header the broker's fast reader read in C
    (broker/fast_path.py): ``header`` comes decoded, ``ext_fields`` stays empty, the language
    is not read (a pull's answer does not depend on it). The handler takes ``header`` as it
    would have decoded it (pull_request.h: the same values as ``from_ext_fields``)."""

    __slots__ = ("header",)
    header: PullMessageRequestHeader


def parsed_pull(fields: tuple[Any, ...]) -> ParsedPull:
    """The request of a tuple of ``FastPath.peek`` (broker/native.pyi): (frame size, code,
    opaque, flag, version, serialize type, then the header's values in its field order)."""
    cmd = ParsedPull(fields[1], fields[2], fields[3], LanguageCode.OTHER, fields[4], None, {},
                     b"", _SERIALIZE_TYPES[fields[5]])
    cmd.header = PullMessageRequestHeader(*fields[6:])
    return cmd


def pull_response_code(status: GetMessageStatus, request_offset: int) -> ResponseCode:
    """The response code of a pull whose store read ended with ``status``."""
    if status is GetMessageStatus.FOUND:
        return ResponseCode.SUCCESS
    if status in _RETRY:
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status in _EMPTY_QUEUE:
        return ResponseCode.PULL_OFFSET_MOVED if request_offset != 0 else ResponseCode.PULL_NOT_FOUND
    if status in _NOT_FOUND:
        return ResponseCode.PULL_NOT_FOUND
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


def physical_memory_bytes() -> int:
    """The machine's memory (RocketMQ's TOTAL_PHYSICAL_MEMORY_SIZE); 0 when unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0



def check_subscription(expression: str | None, expression_type: str | None,
                       property_filter_enabled: bool) -> tuple[ResponseCode, str] | None:
    """Why a broker cannot filter by this subscription: (response code, remark), or None.

    Shared by PULL_MESSAGE and CHECK_CLIENT_CONFIG, so a consumer is told at start what its pulls
    would be told.
    """
    try:
        is_sql = expression_type_of(expression_type) is ExpressionType.SQL92
        if is_sql and not property_filter_enabled:
            return (ResponseCode.FILTER_NOT_SUPPORTED,
                    "The broker does not support consumer to filter message by SQL92: start it "
                    "with enable_property_filter = true (--enable-property-filter true)")
        build_filter(expression, expression_type)
    except ExpressionError as e:
        kind = (expression_type or "TAG").upper()
        return (ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                f"the consumer's subscription failed to parse: {kind} expression "
                f"{expression!r}: {e}")
    return None


class PullProcessor:
    """The pull handler and the long-poll service that holds its empty answers."""

    def __init__(self, ctx: BrokerContext,
                 pop_group_active: Callable[[str], bool] = lambda group: False) -> None:
        """``pop_group_active(group)``: whether 5.x clients consume ``group`` by POP now."""
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self.long_polling_enable = cfg.long_polling_enable
        self.short_polling_time_ms = cfg.short_polling_time_ms
        self.read_bound = ctx.read_bound  # None outside controller mode
        self.long_poll = LongPollService(ctx.store, self._resume, cfg.long_polling_recheck_ms,
                                         ctx.read_bound)
        self._tasks: set[asyncio.Future[None]] = set()
        self.memory_bytes = physical_memory_bytes()
        # Whether 5.x clients consume a group by POP now (broker/pop): one model at a time.
        self.pop_group_active = pop_group_active

    async def stop(self) -> None:
        """Forget held pulls and pulls waiting for the dispatch (the server closes their
        connections anyway)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.long_poll.stop()

    def pull_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        """Answers errors directly; found messages and empty results are written by ``_execute``
        (zero copy), so the transport gets None."""
        h = (cmd.header if type(cmd) is ParsedPull
             else PullMessageRequestHeader.from_ext_fields(cmd.ext_fields))
        try:
            message_filter = self._check(h, conn)
        except BrokerError as e:
            return cmd.response(e.code, e.remark)
        if not (h.sys_flag & _FLAG_SUSPEND and self._held_at_end(cmd, conn, h, message_filter)):
            self._execute(cmd, conn, h, message_filter, allow_suspend=True)
        return None

    def _held_at_end(self, cmd: RemotingCommand, conn: RemotingConnection,
                     h: PullMessageRequestHeader, message_filter: PullFilter | None) -> bool:
        """A suspending pull at the end of its queue (a push consumer's every pull once it
        has caught up), held without a read: the read would find OFFSET_OVERFLOW_ONE, answered
        PULL_NOT_FOUND, so held (``_execute``). False when the pull must read: not at the end,
        an offset of 0 (an empty queue's answer differs), a read bound (controller mode), or
        the hold refused."""
        if (self.read_bound is not None or h.queue_offset <= 0
                or self.store.get_max_offset_in_queue(h.topic, h.queue_id) != h.queue_offset):
            return False
        self._commit(h)
        return self.long_poll.hold(HeldPull(cmd, conn, h, message_filter), self._suspend_ms(h))

    def _commit(self, h: PullMessageRequestHeader) -> None:
        """The pull's commitOffset stored, when it carries one (not on a slave: module
        docstring)."""
        if h.sys_flag & _FLAG_COMMIT and h.commit_offset >= 0 and not self.ctx.role.is_slave:
            self.ctx.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)

    def _suspend_ms(self, h: PullMessageRequestHeader) -> int:
        """How long a pull may be held."""
        return h.suspend_timeout_millis if self.long_polling_enable else self.short_polling_time_ms

    def pull_message_bulk(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        """PULL_MESSAGE_BULK (OrbitMQ): the same pull, bounded by ``bulk_pull_count_max`` and
        ``bulk_pull_bytes_max`` (``_execute`` tells the two apart by the request code, also when
        a held pull resumes)."""
        return self.pull_message(cmd, conn)

    # -- checks ---------------------------------------------------------------------------------
    def _check(self, h: PullMessageRequestHeader, conn: RemotingConnection) -> PullFilter | None:
        ctx = self.ctx
        if not ctx.config.broker_permission & _PERM_READ:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                           f"the broker[{ctx.config.broker_name}] pulling message is forbidden")
        group = ctx.sub_groups.find(h.consumer_group)
        if group is None:
            raise BrokerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                           f"subscription group [{h.consumer_group}] does not exist")
        if not group.consume_enable:
            raise BrokerError(ResponseCode.NO_PERMISSION,
                           f"subscription group [{h.consumer_group}] has consumption disabled")
        if self.pop_group_active(h.consumer_group):
            raise BrokerError(ResponseCode.NO_PERMISSION, f"subscription group [{h.consumer_group}] "
                           "is consumed by 5.x clients (POP) now: a group consumes with one model "
                           "at a time")
        if not group.consume_broadcast_enable:
            members = ctx.clients.consumers.get(h.consumer_group)
            if members is not None and members.message_model is MessageModel.BROADCASTING:
                raise BrokerError(ResponseCode.NO_PERMISSION, f"subscription group [{h.consumer_group}] "
                               "may not consume in broadcasting mode")
        tc = ctx.topics.get(h.topic)
        if tc is None and ctx.role.is_slave:
            tc = self._replicated_topic(h.topic)
        if tc is None:
            tc = _lite_queue_config(ctx, h.topic)
        if tc is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        if not tc.perm & _PERM_READ:
            raise BrokerError(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if not 0 <= h.queue_id < tc.read_queue_nums:
            raise BrokerError(ResponseCode.SYSTEM_ERROR,
                           f"queueId[{h.queue_id}] is illegal, topic:[{h.topic}] "
                           f"readQueueNums:[{tc.read_queue_nums}] consumer:[{conn.peer}]")
        expression, expression_type = self._subscription(h)
        refused = check_subscription(expression, expression_type,
                                     ctx.config.enable_property_filter)
        if refused is not None:
            raise BrokerError(*refused)
        return build_filter(expression, expression_type)

    def _replicated_topic(self, topic: str) -> TopicConfig | None:
        """A slave's stand-in for a topic its table copy does not have yet but its store does
        (any queue id may be asked: the master's route has the real numbers)."""
        if not self.store.queue_ids(topic):
            return None
        return TopicConfig(topic, QUEUE_NUMS_MAX, QUEUE_NUMS_MAX, int(Perm.READ))

    def _subscription(self, h: PullMessageRequestHeader) -> tuple[str, str | None]:
        if h.sys_flag & _FLAG_SUBSCRIPTION:
            return h.subscription or "*", h.expression_type
        sub = self.ctx.clients.subscription(h.consumer_group, h.topic)
        if sub is not None:
            return sub.sub_string, sub.expression_type
        return h.subscription or "*", h.expression_type

    # -- reading and answering ------------------------------------------------------------------
    def _execute(self, cmd: RemotingCommand, conn: RemotingConnection, h: PullMessageRequestHeader,
                 message_filter: PullFilter | None, *, allow_suspend: bool,
                 dispatched: bool = False, resumed: HeldPull | None = None) -> None:
        read_bound = self.read_bound
        result = self.store.get_message(
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, message_filter,
            cmd.code == _BULK, read_bound() if read_bound is not None else None, runs=True,
            max_bytes=h.max_msg_bytes,
        )
        code = pull_response_code(result.status, h.queue_offset)
        slave = self.ctx.role.is_slave
        if slave and code is ResponseCode.PULL_OFFSET_MOVED:  # a slave may just be behind
            code = ResponseCode.PULL_NOT_FOUND
            result.next_begin_offset = h.queue_offset
        if allow_suspend and not dispatched:
            self._commit(h)
        if code is ResponseCode.PULL_NOT_FOUND and allow_suspend and h.sys_flag & _FLAG_SUSPEND:
            held = HeldPull(cmd, conn, h, message_filter, wait_end=result.held_back_end)
            if self.long_poll.hold(held, self._suspend_ms(h)):
                return
        elif resumed is not None and code is ResponseCode.PULL_NOT_FOUND and result.held_back_end >= 0:
            # Woken by the message's arrival before the confirm offset passed it (the usual
            # order on a SYNC_MASTER): wait for the confirm offset for the rest of the timeout.
            left_ms = self.long_poll.time_left_ms(resumed)
            resumed.wait_end = result.held_back_end
            if left_ms > 0 and self.long_poll.hold(resumed, left_ms):
                return
        if (not dispatched and (code is ResponseCode.PULL_NOT_FOUND or result.status in _EMPTY_QUEUE)
                and self.store.dispatch_behind_bytes() > 0):
            # Sends acknowledged before this pull may not be in the queue yet: look again once
            # they are, so that a pull never misses a message whose send was already answered.
            self._spawn(self._after_dispatch(cmd, conn, h, message_filter, allow_suspend))
            return
        self.ctx.stats.on_get(h.consumer_group, h.topic, h.queue_id, result)
        next_offset = result.next_begin_offset
        if code is ResponseCode.PULL_OFFSET_MOVED:
            log.debug("pull offset moved group=%s topic=%s queue=%d from=%d to=%d status=%s",
                     h.consumer_group, h.topic, h.queue_id, h.queue_offset, next_offset,
                     result.status.value)
        resp = cmd.response(code, None if code is ResponseCode.SUCCESS else result.status.value, {
            "suggestWhichBrokerId": self._suggest(h.consumer_group, result),
            "nextBeginOffset": str(next_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        })
        try:
            if result.buffers:
                conn.send_parts(resp, result.buffers)
            else:
                conn.send(resp)
        except ConnectionClosedError:
            pass  # the consumer left; its next pull (elsewhere) starts from its committed offset

    def _suggest(self, group: str, result: GetMessageResult) -> str:
        """suggestWhichBrokerId (see the module docstring)."""
        cfg = self.ctx.config
        if not cfg.slave_read_enable:
            return "0"
        sub = self.ctx.sub_groups.table.get(group)
        if sub is None:
            return "0"
        if result.last_commit_offset >= 0:
            behind = self.store.max_physical_offset() - result.last_commit_offset
            if behind > self.memory_bytes * cfg.access_message_in_memory_max_ratio // 100:
                return str(sub.which_broker_when_consume_slowly)
        return str(sub.broker_id)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_dispatch(self, cmd: RemotingCommand, conn: RemotingConnection,
                              h: PullMessageRequestHeader, message_filter: PullFilter | None,
                              allow_suspend: bool) -> None:
        await self.ctx.dispatched.wait()
        if not conn.is_open:
            return
        try:
            self._execute(cmd, conn, h, message_filter, allow_suspend=allow_suspend, dispatched=True)
        except Exception as e:
            log.error("pull after dispatch failed topic=%s queue=%d", h.topic, h.queue_id)
            try:
                conn.send(internal_error_response(cmd, e))
            except ConnectionClosedError:
                pass

    def _resume(self, held: HeldPull) -> None:
        """Run a woken pull again; woken by the dispatch of its message on the loop
        (LongPollService.on_arrival), its answer leaves at the end of that dispatch round, in
        that call, not an iteration later."""
        try:
            self._execute(held.cmd, held.conn, held.header, held.message_filter, allow_suspend=False,
                          resumed=held)
        except Exception as e:
            log.error("held pull failed topic=%s queue=%d", *held.key)
            try:
                held.conn.send(internal_error_response(held.cmd, e))
            except ConnectionClosedError:
                pass


def _lite_queue_config(ctx: BrokerContext, topic: str) -> TopicConfig | None:
    """A lite topic's queue (protocol/lite.py) read as one queue of its LITE parent's
    permissions; None for any other topic."""
    split = split_lite_queue_topic(topic)
    parent = ctx.topics.get(split[0]) if split is not None else None
    if parent is None or topic_message_type(parent.attributes) is not TopicMessageType.LITE:
        return None
    return TopicConfig(topic, read_queue_nums=1, write_queue_nums=1, perm=parent.perm)
