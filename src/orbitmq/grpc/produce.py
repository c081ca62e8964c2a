"""SendMessage and EndTransaction of the RocketMQ 5 API, over the broker's own parts.

A 5.x send is checked (convert.py) and against its topic: the topic must exist (TOPIC_NOT_FOUND:
a 5.x client learns its route first, so nothing is created on send), be writable, and take the
message's type (``message.type``, as RocketMQ 5's proxy: MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).
The queue: a FIFO message's by its message group (the same group, the same queue), a PRIORITY
topic's by the message's priority (queue ``min(priority, queues - 1)``; a message without one has
priority 0), others in turn. A timer message is parked by the timer service (its answer carries a
recall handle: RecallMessage cancels it while it waits), a transactional one becomes a half
message (PGROUP ``%GRPC%{topic}``); every message is saved through the durable-save seam and
answered once durable, with the broker's outcome mapped to an API code.

EndTransaction names the half message by its transaction id (clients.transaction_id: where the
half message lies) and goes through the broker's END_TRANSACTION handler, which commits or
rolls back exactly as for a 4.x producer.
"""

from __future__ import annotations

import itertools
import logging
import zlib
from collections.abc import Awaitable, Callable

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.message_types import grpc_refusal
from orbitmq.broker.timer.timer_service import TimerService
from orbitmq.broker.transaction.end_transaction_processor import EndTransactionProcessor
from orbitmq.errors import BrokerError
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.clients import TelemetryChannel, parse_transaction_id, transaction_id
from orbitmq.grpc.codes import OK, ApiError, Code, from_put_status, from_response_code, status
from orbitmq.grpc.convert import GRPC_PRODUCER_GROUP_PREFIX, Outgoing, resource_name
from orbitmq.protocol.bodies import Perm
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import EndTransactionRequestHeader
from orbitmq.protocol.lite import LITE_TOPIC_PROPERTY
from orbitmq.protocol.message import MessageSysFlag, PropertyKey
from orbitmq.protocol.topic_attributes import TopicMessageType, priority_queue, topic_message_type
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageStatus

__all__ = ["Producing", "SEND_MESSAGES_MAX"]

log = logging.getLogger(__name__)

SEND_MESSAGES_MAX = 1024  # messages of one SendMessage request
_PERM_WRITE = int(Perm.WRITE)
_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
_ROLLBACK = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
# An EndTransaction's resolution -> the END_TRANSACTION verdict. UNSPECIFIED ends nothing (a 5.x
# client does not end an UNKNOWN transaction), and proto3 hands over numbers outside the enum as
# they came: both are refused before anything is looked up.
_VERDICTS = {pb.COMMIT: _COMMIT, pb.ROLLBACK: _ROLLBACK}
_SOURCES = frozenset(pb.TransactionSource.values())


class Producing:
    """The sending side of the endpoint.

    Args:
        ctx: the broker's context.
        timer: parks timer messages.
        to_half: the transaction service's hook (a half message of a transactional send).
        end_transaction: the broker's END_TRANSACTION handler.
    """

    def __init__(self, ctx: BrokerContext, timer: TimerService,
                 to_half: Callable[[MessageInner, str], MessageInner],
                 end_transaction: EndTransactionProcessor) -> None:
        self.ctx = ctx
        self.timer = timer
        self.to_half = to_half
        self.end_tx = end_transaction
        self.body_max = ctx.config.store.max_message_size
        self._round_robin = itertools.count()
        # The store topic of a lite message (parent, lite topic): set by the lite front part
        # (grpc/lite.py); ApiError when refused.
        self.lite_store_topic: Callable[[str, str], str] = _no_lite

    async def send(self, req: spb.SendMessageRequest, peer_ip: str) -> spb.SendMessageResponse:
        if not req.messages or len(req.messages) > SEND_MESSAGES_MAX:
            raise ApiError(Code.BAD_REQUEST, f"a send carries 1..{SEND_MESSAGES_MAX} messages")
        entries = [await self._send_one(m, peer_ip) for m in req.messages]
        codes = {e.status.code for e in entries}
        top = entries[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "see the entries")
        return spb.SendMessageResponse(status=top, entries=entries)

    async def _send_one(self, wire: pb.Message, peer_ip: str) -> spb.SendResultEntry:
        try:
            out = Outgoing(wire, self.body_max, peer_ip)
            inner, queue_id = self._build(out)
        except ApiError as e:
            return spb.SendResultEntry(status=status(e.code, e.message))
        except BrokerError as e:  # the timer's or the transaction service's refusal
            return spb.SendResultEntry(status=status(_send_code(e.code), e.remark))
        result = self.ctx.saver.append([inner])
        self.ctx.stats.on_send(out.topic, result.append, [inner])
        result = await self.ctx.saver.settled(result)
        if result.status is not PutMessageStatus.PUT_OK or result.append is None:
            code = from_put_status(result.status)
            return spb.SendResultEntry(status=status(code, result.remark or result.status.value),
                                       message_id=out.message_id)
        tx = ""
        if out.kind is TopicMessageType.TRANSACTION:
            tx = transaction_id(out.message_id, result.append.wrote_offset, result.append.queue_offset)
        recall = self.timer.recall_handle(inner) or ""  # a parked timer message's (RocketMQ 5.3)
        return spb.SendResultEntry(status=OK, message_id=out.message_id, transaction_id=tx,
                                   offset=result.append.queue_offset, recall_handle=recall)

    def _build(self, out: Outgoing) -> tuple[MessageInner, int]:
        config = self.ctx.config
        if not self.ctx.role.accepts_writes:
            raise ApiError(Code.FORBIDDEN, f"the broker[{config.broker_name}] is a slave: it "
                           "stores its master's messages only; send to the master")
        if not config.broker_permission & _PERM_WRITE:
            raise ApiError(Code.FORBIDDEN, f"the broker[{config.broker_name}] refuses sends")
        tc = self.ctx.topics.get(out.topic)
        if tc is None:
            raise ApiError(Code.TOPIC_NOT_FOUND, f"topic {out.topic} does not exist")
        if not tc.perm & _PERM_WRITE or tc.write_queue_nums <= 0:
            raise ApiError(Code.FORBIDDEN, f"topic {out.topic} is not writable")
        why = grpc_refusal(tc, out.kind)
        if why is not None:
            raise ApiError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, why)
        topic = out.topic
        if out.kind is TopicMessageType.LITE:  # its lite topic's own queue (broker/lite)
            topic, queue_id = self.lite_store_topic(out.topic, out.properties[LITE_TOPIC_PROPERTY]), 0
        elif out.message_group is not None:
            queue_id = zlib.crc32(out.message_group.encode()) % tc.write_queue_nums
        elif topic_message_type(tc.attributes) is TopicMessageType.PRIORITY:
            queue_id = priority_queue(out.priority or 0, tc.write_queue_nums)  # none: 0
        else:
            queue_id = next(self._round_robin) % tc.write_queue_nums
        inner = MessageInner(topic, queue_id, out.body, out.properties, 0, 0, out.born_ms,
                             (out.born_host, 0), self.ctx.host.store_host, 0)
        if out.kind is TopicMessageType.TRANSACTION:
            inner.properties[PropertyKey.TRAN_MSG] = "true"
            inner = self.to_half(inner, GRPC_PRODUCER_GROUP_PREFIX + out.topic)
        elif out.kind is TopicMessageType.DELAY:
            self.timer.park(inner)
        return inner, queue_id

    async def recall(self, req: spb.RecallMessageRequest, peer_ip: str) -> spb.RecallMessageResponse:
        """RecallMessage: the timer service's recall, refused as RocketMQ's proxy answers its
        broker's refusals: TOPIC_NOT_FOUND for a topic that does not exist, otherwise
        INTERNAL_SERVER_ERROR with the broker's remark (e.g. "recall failed, timestamp
        invalid" for a message whose time has come)."""
        topic = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        try:
            msg_id = await self.timer.recall(topic, req.recall_handle, None, (peer_ip, 0))
        except BrokerError as e:
            code = Code.TOPIC_NOT_FOUND if e.code == ResponseCode.TOPIC_NOT_EXIST \
                else Code.INTERNAL_SERVER_ERROR
            return spb.RecallMessageResponse(status=status(code, e.remark or ""))
        return spb.RecallMessageResponse(status=OK, message_id=msg_id)

    async def end_transaction(self, req: spb.EndTransactionRequest,
                              channel: TelemetryChannel) -> spb.EndTransactionResponse:
        topic = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        verdict = _VERDICTS.get(req.resolution)
        if verdict is None:
            raise ApiError(Code.BAD_REQUEST, f"EndTransactionRequest.resolution: {req.resolution} "
                           f"is not COMMIT ({pb.COMMIT}) or ROLLBACK ({pb.ROLLBACK})")
        if req.source not in _SOURCES:
            raise ApiError(Code.BAD_REQUEST, f"EndTransactionRequest.source: {req.source} is not "
                           "a TransactionSource (0 unspecified, 1 client, 2 server check)")
        parsed = parse_transaction_id(req.transaction_id)
        if parsed is None:
            raise ApiError(Code.INVALID_TRANSACTION_ID, f"transaction id {req.transaction_id[:256]!r} "
                                                         "is not one this broker gave")
        uniq, commit_log_offset, queue_offset = parsed
        header = EndTransactionRequestHeader(
            producer_group=GRPC_PRODUCER_GROUP_PREFIX + topic, tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset, commit_or_rollback=verdict,
            from_transaction_check=req.source == pb.SOURCE_SERVER_CHECK,
            msg_id=req.message_id or uniq, transaction_id=uniq)
        cmd = RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext_fields())
        answer = self.end_tx.end_transaction(cmd, channel)  # type: ignore[arg-type]
        resp = answer if isinstance(answer, RemotingCommand) else await _awaited(answer)
        if resp.code == ResponseCode.SUCCESS:
            return spb.EndTransactionResponse(status=OK)
        code = Code.INVALID_TRANSACTION_ID if resp.code == ResponseCode.TRANSACTION_FAILED \
            else from_response_code(resp.code)
        return spb.EndTransactionResponse(status=status(code, resp.remark or ""))


async def _awaited(answer: Awaitable[RemotingCommand]) -> RemotingCommand:
    return await answer


def _no_lite(parent: str, lite: str) -> str:
    raise ApiError(Code.UNSUPPORTED, "lite topics are not served here")


def _send_code(code: int) -> int:
    if code == ResponseCode.MESSAGE_ILLEGAL:
        return Code.ILLEGAL_DELIVERY_TIME  # the timer service's refusal of a delivery time
    return from_response_code(code)
