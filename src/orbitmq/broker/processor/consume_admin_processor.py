"""Who produces and consumes what, and moving a group's progress: GET_PRODUCER_CONNECTION_LIST
(204), QUERY_TOPIC_CONSUME_BY_WHO (300), QUERY_CONSUME_TIME_SPAN (303), CLONE_GROUP_OFFSET (314)
and QUERY_CONSUME_QUEUE (321), with RocketMQ's header fields and body shapes.

- GET_PRODUCER_CONNECTION_LIST (``producerGroup``): Java's ProducerConnection,
  ``{"connectionSet": [{"clientId", "clientAddr", "language", "version"}]}``. A group without a
  live producer here answers an empty set (RocketMQ answers SYSTEM_ERROR; nothing failed).
- QUERY_TOPIC_CONSUME_BY_WHO (``topic``): Java's GroupList, ``{"groupList": [...]}``: groups
  whose clients subscribe to the topic and groups with offsets committed on it.
- QUERY_CONSUME_TIME_SPAN (``topic``, ``group``): Java's QueryConsumeTimeSpanBody,
  ``{"consumeTimeSpanSet": [{"messageQueue": {MessageQueue}, "minTimeStamp", "maxTimeStamp",
  "consumeTimeStamp", "delayTime"}]}`` per write queue: the store times of the oldest, newest
  and last consumed message and how long the next unconsumed one has waited (ms, 0 if none).
  TOPIC_NOT_EXIST for an unknown topic.
- CLONE_GROUP_OFFSET (``srcGroup``, ``destGroup``, ``topic``, ``offline``): copies the source's
  committed offsets, queue by queue, to the destination group (every topic of the source, or
  ``topic``); unless ``offline``, topics an online source group does not subscribe to are left
  out, as RocketMQ does. QUERY_NOT_FOUND when nothing was there to copy (RocketMQ answers
  SUCCESS); INVALID_PARAMETER for an illegal group name.
- QUERY_CONSUME_QUEUE (``topic``, ``queueId``, ``index``, ``count``, ``consumerGroup``): Java's
  QueryConsumeQueueResponseBody, ``{"minQueueIndex", "maxQueueIndex", "queueData":
  [{"physicOffset", "physicSize", "tagsCode"}], "subscriptionData", "filterData"}``: ``count``
  (at most QUERY_CONSUME_QUEUE_COUNT_MAX) raw entries from ``index``; with a group, its
  subscription (or ``filterData`` saying it is not online). An index past the queue's end answers
  no entries and a remark saying so, as RocketMQ does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.tables.subscription_group_manager import validate_group
from orbitmq.protocol.admin_headers import (
    QUERY_CONSUME_QUEUE_COUNT_MAX,
    CloneGroupOffsetRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
)
from orbitmq.protocol.codes import LanguageCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import QueryTopicConsumeByWhoRequestHeader
from orbitmq.transport.connection import RemotingConnection

__all__ = ["ConsumeAdminProcessor"]


def _language(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return LanguageCode.OTHER.name


class ConsumeAdminProcessor:
    """Producer connections, consumer groups of a topic, consume time spans, offset cloning and
    raw consume queue entries.

    Args:
        ctx: the broker's context (its name is in every MessageQueue answered).
        wall_ms: wall-clock milliseconds (delayTime).
    """

    def __init__(self, ctx: BrokerContext, wall_ms: Callable[[], int]) -> None:
        self.broker_name = ctx.config.broker_name
        self.store = ctx.store
        self.topics = ctx.topics
        self.offsets = ctx.offsets
        self.clients = ctx.clients
        self.wall_ms = wall_ms

    def get_producer_connection_list(self, cmd: RemotingCommand,
                                     conn: RemotingConnection) -> RemotingCommand:
        h = GetProducerConnectionListRequestHeader.from_ext_fields(cmd.ext_fields)
        members = self.clients.producers.get(h.producer_group, {})
        connections = [{"clientId": i.client_id, "clientAddr": c.peer,
                        "language": _language(i.language), "version": i.version}
                       for c, i in members.items()]
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"connectionSet": connections}))

    def query_topic_consume_by_who(self, cmd: RemotingCommand,
                                   conn: RemotingConnection) -> RemotingCommand:
        h = QueryTopicConsumeByWhoRequestHeader.from_ext_fields(cmd.ext_fields)
        groups = {name for name, info in self.clients.consumers.items()
                  if h.topic in info.subscriptions}
        groups.update(self.offsets.groups_of_topic(h.topic))
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"groupList": sorted(groups)}))

    def query_consume_time_span(self, cmd: RemotingCommand,
                                conn: RemotingConnection) -> RemotingCommand:
        h = QueryConsumeTimeSpanRequestHeader.from_ext_fields(cmd.ext_fields)
        tc = self.topics.get(h.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        store, spans = self.store, []
        for qid in range(tc.write_queue_nums):
            min_time = store.get_earliest_message_time(h.topic, qid)
            max_offset = store.get_max_offset_in_queue(h.topic, qid)
            max_time = store.get_message_store_timestamp(h.topic, qid, max_offset - 1)
            consumed = self.offsets.query(h.group, h.topic, qid)
            consume_time = (store.get_message_store_timestamp(h.topic, qid, consumed - 1)
                            if consumed > 0 else min_time)
            delay = 0
            if 0 <= consumed < max_offset:
                next_time = store.get_message_store_timestamp(h.topic, qid, consumed)
                delay = max(0, self.wall_ms() - next_time) if next_time > 0 else 0
            spans.append({"messageQueue": {"topic": h.topic, "brokerName": self.broker_name,
                                           "queueId": qid},
                          "minTimeStamp": min_time, "maxTimeStamp": max_time,
                          "consumeTimeStamp": consume_time, "delayTime": delay})
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"consumeTimeSpanSet": spans}))

    def clone_group_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = CloneGroupOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        for field, group in (("srcGroup", h.src_group), ("destGroup", h.dest_group)):
            reason = validate_group(group)
            if reason is not None:
                return cmd.response(ResponseCode.INVALID_PARAMETER, f"{field}: {reason}")
        topics = [h.topic] if h.topic else self.offsets.topics_of_group(h.src_group)
        online = self.clients.consumers.get(h.src_group)
        copied = 0
        for topic in topics:
            if self.topics.get(topic) is None:
                continue
            if not h.offline and online is not None and online.subscriptions \
                    and topic not in online.subscriptions:
                continue
            for qid, offset in self._committed(h.src_group, topic).items():
                self.offsets.commit(h.dest_group, topic, qid, offset)
                copied += 1
        if not copied:
            where = f" on topic {h.topic}" if h.topic else ""
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"group {h.src_group} has no committed offsets{where} to clone")
        return cmd.response(ResponseCode.SUCCESS)

    def _committed(self, group: str, topic: str) -> dict[int, int]:
        return dict(self.offsets.table.get(f"{topic}@{group}", {}))

    def query_consume_queue(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_ext_fields(cmd.ext_fields)
        tc = self.topics.get(h.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        queues = max(tc.read_queue_nums, tc.write_queue_nums)
        if h.queue_id >= queues:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"queueId {h.queue_id} is out of range 0..{queues - 1}")
        if h.count > QUERY_CONSUME_QUEUE_COUNT_MAX:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                f"count {h.count} is out of range 1..{QUERY_CONSUME_QUEUE_COUNT_MAX}")
        store = self.store
        body: dict[str, Any] = {
            "minQueueIndex": store.get_min_offset_in_queue(h.topic, h.queue_id),
            "maxQueueIndex": store.get_max_offset_in_queue(h.topic, h.queue_id),
        }
        if h.consumer_group:
            sub = self.clients.subscription(h.consumer_group, h.topic)
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_dict()
        entries = []
        end = min(h.index + h.count, body["maxQueueIndex"])
        for index in range(max(h.index, body["minQueueIndex"]), end):
            found = store.queue_entry(h.topic, h.queue_id, index)
            if found is None:
                break
            entries.append({"physicOffset": found[0], "physicSize": found[1],
                            "tagsCode": found[2]})
        body["queueData"] = entries
        remark = None
        if h.index >= body["maxQueueIndex"]:
            remark = f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!"
        return cmd.response(ResponseCode.SUCCESS, remark, body=orjson.dumps(body))
