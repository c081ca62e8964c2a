"""Lite topics over the RocketMQ 5 API: SyncLiteSubscription, a lite consumer's receive, and the
store topic of a lite send, an ack or a change of invisibility (broker/lite/service.py).

SyncLiteSubscription takes every action of the API: PARTIAL_ADD and PARTIAL_REMOVE change the
client's set, COMPLETE_ADD replaces it (the 5.x clients send their whole set every 30 s: that is
the truth the broker keeps), COMPLETE_REMOVE empties it; ``*`` stands for every lite topic of the
parent. ``offset_option`` says where a lite topic the group never consumed starts: ``policy``
MIN or LAST (its oldest message, the default) or MAX (its newest); an offset, a tail or a time
are refused (UNSUPPORTED). A refusal: ILLEGAL_LITE_TOPIC (a bad name),
LITE_SUBSCRIPTION_QUOTA_EXCEEDED (past ``lite_subscription_quota``), TOPIC_NOT_FOUND,
ILLEGAL_TOPIC (not a LITE topic), BAD_REQUEST (an unknown action).

Acks, changes of invisibility (``suspend`` included: the lite topic waits out the invisible
time, as any FIFO message does) and dead-letter forwards of a lite message name the parent and
the ``lite_topic``; the lite topic's queue is where the message is looked up.
"""

from __future__ import annotations

from orbitmq.broker.lite.service import LiteRefused, LiteService
from orbitmq.broker.pop.pop_service import Received
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.codes import OK, ApiError, Code
from orbitmq.grpc.convert import resource_name
from orbitmq.protocol.lite import LITE_TOPIC_NAME_MAX, lite_name_problem, lite_queue_topic

__all__ = ["LiteFront"]

_CODES = {"name": Code.ILLEGAL_LITE_TOPIC, "topic_quota": Code.LITE_TOPIC_QUOTA_EXCEEDED,
          "subscription_quota": Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
          "not_lite": Code.ILLEGAL_TOPIC, "no_topic": Code.TOPIC_NOT_FOUND,
          "action": Code.BAD_REQUEST}
SYNC_NAMES_MAX = 100_000  # lite topic names in one SyncLiteSubscription


def api_error(e: LiteRefused) -> ApiError:
    return ApiError(_CODES.get(e.kind, Code.BAD_REQUEST), e.remark)


class LiteFront:
    """The endpoint's lite part over the broker's :class:`LiteService`."""

    def __init__(self, service: LiteService) -> None:
        self.service = service
        self.subscription_quota = service.subscriptions.quota
        self.name_max = LITE_TOPIC_NAME_MAX

    def is_parent(self, topic: str) -> bool:
        return self.service.is_parent(topic)

    def store_topic_for_send(self, parent: str, lite: str) -> str:
        try:
            return self.service.store_topic_for_send(parent, lite)
        except LiteRefused as e:
            raise api_error(e) from None

    def store_topic(self, parent: str, lite: str | None) -> str:
        """The store topic an ack, a change or a forward of a message of ``parent`` names."""
        if not self.service.is_parent(parent):
            return parent
        if not lite:
            raise ApiError(Code.ILLEGAL_LITE_TOPIC, f"a message of the LITE topic {parent} is "
                                                    "named with its lite_topic")
        problem = lite_name_problem(lite)
        if problem is not None:
            raise ApiError(Code.ILLEGAL_LITE_TOPIC, problem)
        return lite_queue_topic(parent, lite)

    def sync(self, req: spb.SyncLiteSubscriptionRequest,
             client_id: str) -> spb.SyncLiteSubscriptionResponse:
        parent = resource_name(req.topic, "topic", Code.ILLEGAL_TOPIC)
        group = resource_name(req.group, "consumer group", Code.ILLEGAL_CONSUMER_GROUP)
        if len(req.lite_topic_set) > SYNC_NAMES_MAX:
            raise ApiError(Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                           f"{len(req.lite_topic_set)} lite topics in one request (at most "
                           f"{SYNC_NAMES_MAX})")
        start_at_max = False
        if req.HasField("offset_option"):
            option = req.offset_option
            kind = option.WhichOneof("offset_type")
            if kind != "policy" or option.policy not in (pb.OffsetOption.MIN, pb.OffsetOption.LAST,
                                                         pb.OffsetOption.MAX):
                raise ApiError(Code.UNSUPPORTED, "offset_option: only a policy (MIN, LAST or MAX) "
                                                 "is supported")
            start_at_max = option.policy == pb.OffsetOption.MAX
        try:
            self.service.sync(client_id, group, parent, req.action, req.lite_topic_set,
                              start_at_max=start_at_max)
        except LiteRefused as e:
            raise api_error(e) from None
        return spb.SyncLiteSubscriptionResponse(status=OK)

    async def receive(self, group: str, parent: str, client_id: str, *, batch: int,
                      invisible_ms: int | None, poll_ms: int, auto_renew: bool) -> list[Received]:
        return await self.service.receive(group, parent, client_id, batch=batch,
                                          invisible_ms=invisible_ms, poll_ms=poll_ms,
                                          auto_renew=auto_renew)
