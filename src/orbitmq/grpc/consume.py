"""ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
QueryAssignment of the RocketMQ 5 API, over the broker's POP service (broker/pop).

A receive names a queue, but, as RocketMQ 5's proxy does, the broker pops from every queue of the
topic it holds; QueryAssignment accordingly answers one assignment per broker (queue id -1). The
stream of a receive carries the messages, then the delivery time, then a status (always last:
MESSAGE_NOT_FOUND when the polling time passed without a message).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from orbitmq.broker.message_filter import PullFilter, build_filter
from orbitmq.broker.pop.pop_service import PopService, Received
from orbitmq.errors import BrokerError, ExpressionError
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.codes import OK, ApiError, Code, from_response_code, status
from orbitmq.grpc.convert import duration_ms, resource_name, to_timestamp, to_wire_message
from orbitmq.grpc.lite import LiteFront

__all__ = ["Consuming", "RECEIVE_BATCH_MAX", "ACK_ENTRIES_MAX", "INVISIBLE_MIN_MS"]

log = logging.getLogger(__name__)

RECEIVE_BATCH_MAX = 32  # messages of one receive (RocketMQ 5's limit)
ACK_ENTRIES_MAX = 1024
INVISIBLE_MIN_MS = 1000  # a receive's shortest invisible time
POLL_DEFAULT_MS = 20_000  # a receive that names no polling time


class Consuming:
    """The consuming side of the endpoint.

    Args:
        pop: the broker's POP service.
        body_max: the largest body a message may have (inflating a compressed one stops there).
        poll_max_ms: ``grpc_long_polling_max_ms``.
        invisible_max_ms: ``pop_invisible_time_max_ms``.
    """

    def __init__(self, pop: PopService, body_max: int, poll_max_ms: int,
                 invisible_max_ms: int) -> None:
        self.pop = pop
        self.body_max = body_max
        self.poll_max_ms = poll_max_ms
        self.invisible_max_ms = invisible_max_ms
        self.lite: LiteFront | None = None  # lite topics (grpc/lite.py), set by the endpoint

    async def receive(self, req: spb.ReceiveMessageRequest, client_id: str,
                      ) -> AsyncIterator[spb.ReceiveMessageResponse]:
        group = resource_name(req.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
        topic = resource_name(req.message_queue.topic, "topic", Code.ILLEGAL_TOPIC)
        if not 1 <= req.batch_size <= RECEIVE_BATCH_MAX:
            raise ApiError(Code.BAD_REQUEST, f"batch size {req.batch_size} is not within 1..{RECEIVE_BATCH_MAX}")
        invisible = None
        if req.HasField("invisible_duration"):
            invisible = duration_ms(req.invisible_duration, "invisible duration", Code.ILLEGAL_INVISIBLE_TIME)
            if not INVISIBLE_MIN_MS <= invisible <= self.invisible_max_ms:
                raise ApiError(Code.ILLEGAL_INVISIBLE_TIME,
                               f"invisible duration {invisible} ms is not within "
                               f"{INVISIBLE_MIN_MS}..{self.invisible_max_ms} ms")
        elif not req.auto_renew:
            raise ApiError(Code.ILLEGAL_INVISIBLE_TIME, "a receive without auto renewal must name "
                                                         "its invisible duration")
        poll = POLL_DEFAULT_MS
        if req.HasField("long_polling_timeout"):
            poll = duration_ms(req.long_polling_timeout, "long polling timeout", Code.ILLEGAL_POLLING_TIME)
            if poll > self.poll_max_ms:
                raise ApiError(Code.ILLEGAL_POLLING_TIME, f"long polling timeout {poll} ms exceeds "
                                                           f"{self.poll_max_ms} ms")
        poll = min(poll, self.poll_max_ms)
        message_filter = self._filter(req.filter_expression)
        try:
            if self.lite is not None and self.lite.is_parent(topic):
                if message_filter is not None:
                    raise ApiError(Code.ILLEGAL_FILTER_EXPRESSION, "a lite consumer receives its "
                                   "lite topics whole: no filter expression but '*'")
                got = await self.lite.receive(group, topic, client_id, batch=req.batch_size,
                                              invisible_ms=invisible, poll_ms=poll,
                                              auto_renew=req.auto_renew)
            else:
                    got = await self.pop.receive(group, topic, batch=req.batch_size,
                                             invisible_ms=invisible, poll_ms=poll,
                                             message_filter=message_filter,
                                             auto_renew=req.auto_renew, owner=client_id)
        except BrokerError as e:
            raise ApiError(from_response_code(e.code), e.remark) from None
        for received in got:
            yield spb.ReceiveMessageResponse(message=self._wire(received))
        if got:
            yield spb.ReceiveMessageResponse(delivery_timestamp=to_timestamp(self.pop.store.clock()))
            yield spb.ReceiveMessageResponse(status=OK)
        else:
            yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))

    def _store_topic(self, topic: str, lite_topic: str) -> str:
        """Where a message of ``topic`` named by a client lies (a lite topic's own queue)."""
        return self.lite.store_topic(topic, lite_topic) if self.lite is not None else topic

    def _wire(self, received: Received) -> pb.Message:
        left = received.invisible_until_ms - self.pop.store.clock()
        return to_wire_message(received.message, body_max=self.body_max, handle=received.handle,
                               attempt=received.attempt, invisible_ms=left)

    @staticmethod
    def _filter(expr: pb.FilterExpression) -> PullFilter | None:
        if expr.type == pb.SQL:
            kind = "SQL92"
        elif expr.type in (pb.TAG, pb.FILTER_TYPE_UNSPECIFIED):
            kind = "TAG"
        else:
            raise ApiError(Code.ILLEGAL_FILTER_EXPRESSION, f"filter type {expr.type} is unknown")
        text = expr.expression or "*"
        if len(text) > 4096:
            raise ApiError(Code.ILLEGAL_FILTER_EXPRESSION, "filter expression longer than 4096 characters")
        try:
            return build_filter(text, kind)
        except ExpressionError as e:
            raise ApiError(Code.ILLEGAL_FILTER_EXPRESSION, f"filter expression refused: {e}") from None

    async def ack(self, req: spb.AckMessageRequest) -> spb.AckMessageResponse:
        group = resource_name(req.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
        topic = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        if not 1 <= len(req.entries) <= ACK_ENTRIES_MAX:
            raise ApiError(Code.BAD_REQUEST, f"an ack carries 1..{ACK_ENTRIES_MAX} entries")
        results = []
        for entry in req.entries:
            try:
                await self.pop.ack(group, self._store_topic(topic, entry.lite_topic),
                                   entry.receipt_handle)
                st = OK
            except BrokerError as e:
                st = status(from_response_code(e.code), e.remark)
            except ApiError as e:
                st = status(e.code, e.message)
            results.append(spb.AckMessageResultEntry(message_id=entry.message_id,
                                                     receipt_handle=entry.receipt_handle, status=st))
        codes = {r.status.code for r in results}
        top = results[0].status if len(codes) == 1 else status(Code.MULTIPLE_RESULTS, "see the entries")
        return spb.AckMessageResponse(status=top, entries=results)

    def change_invisible(self, req: spb.ChangeInvisibleDurationRequest,
                         ) -> spb.ChangeInvisibleDurationResponse:
        group = resource_name(req.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
        topic = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        ms = duration_ms(req.invisible_duration, "invisible duration", Code.ILLEGAL_INVISIBLE_TIME)
        if ms > self.invisible_max_ms:
            raise ApiError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {ms} ms exceeds "
                                                         f"{self.invisible_max_ms} ms")
        try:
            handle = self.pop.change_invisible(group, self._store_topic(topic, req.lite_topic),
                                               req.receipt_handle, ms)
        except BrokerError as e:
            raise ApiError(from_response_code(e.code), e.remark) from None
        return spb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    async def forward_to_dlq(self, req: spb.ForwardMessageToDeadLetterQueueRequest,
                             ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        group = resource_name(req.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
        topic = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        try:
            await self.pop.forward_to_dead_letters(group, self._store_topic(topic, req.lite_topic),
                                                   req.receipt_handle)
        except BrokerError as e:
            raise ApiError(from_response_code(e.code), e.remark) from None
        return spb.ForwardMessageToDeadLetterQueueResponse(status=OK)
