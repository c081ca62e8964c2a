"""Administration: topics, subscription groups and statistics.

Handled codes: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG
(21: whole or in pages, broker/tables/topic_pages.py), GET_TOPIC_STATS_INFO (202), GET_CONSUME_STATS (208), GET_ALL_CONSUMER_OFFSET (43), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207), EXPORT_ROCKSDB_CONFIG_TO_JSON
(355: the metadata store's tables as JSON, store/metadata_db.export_tables).

JSON bodies whose Java classes use a MessageQueue as a map key (TopicStatsTable, ConsumeStats)
cannot be written as Java's fastjson writes them (an object as a key is not JSON). OrbitMQ writes
standard JSON where each such key is a *string holding the compact JSON of the MessageQueue*, with
fastjson's alphabetical field order::

    {"offsetTable": {"{\\"brokerName\\":\\"broker-a\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}":
                     {"minOffset": 0, "maxOffset": 12, "lastUpdateTimestamp": 1700000000000}}}

Any JSON parser reads it; decode each key with a second ``json.loads`` (fastjson also turns such
string keys back into MessageQueue objects). ConsumeStats is ``{"consumeTps": 0.0, "offsetTable":
{MQ: {"brokerOffset", "consumerOffset", "lastTimestamp"}}}``; GET_ALL_CONSUMER_OFFSET answers
``{"offsetTable": {"topic@group": {"0": 12}}}``. GET_BROKER_RUNTIME_INFO lives in
stats_processor.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.metadata_log import RecordKind
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.broker.tables.topic_config_manager import QUEUE_NUMS_MAX, SYSTEM_TOPICS, validate_topic
from orbitmq.broker.tables.topic_pages import topic_config_answer
from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetAllTopicConfigRequestHeader,
    GetAllTopicConfigResponseHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
)
from orbitmq.protocol.topic_attributes import apply_modification
from orbitmq.store.metadata_db import EXPORT_NAMES, MetadataDB, export_tables
from orbitmq.store.status import PutMessageResult
from orbitmq.transport.connection import HandlerResult, RemotingConnection

__all__ = ["AdminProcessor", "message_queue_key"]

VERSION_DESC = "OrbitMQ 0.1.0 (RocketMQ 4.x protocol)"


def message_queue_key(topic: str, broker_name: str, queue_id: int) -> str:
    """A MessageQueue as a map key: its compact JSON, fields in fastjson's alphabetical order."""
    return orjson.dumps({"brokerName": broker_name, "queueId": queue_id, "topic": topic}).decode()


class AdminProcessor:
    """Admin requests of the CLI and of RocketMQ's admin tools.

    Args:
        ctx: the broker's context.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store

    # -- topics ---------------------------------------------------------------------------------
    def update_and_create_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)
        reason = validate_topic(h.topic)
        if reason is not None:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, reason)
        if h.topic in SYSTEM_TOPICS or h.topic == self.ctx.config.broker_cluster_name:
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"the topic[{h.topic}] is conflict with system topic")
        for name, n in (("readQueueNums", h.read_queue_nums), ("writeQueueNums", h.write_queue_nums)):
            if not 1 <= n <= QUEUE_NUMS_MAX:
                return cmd.response(ResponseCode.INVALID_PARAMETER,
                                    f"{name} {n} is out of range 1..{QUEUE_NUMS_MAX}")
        # perm, topicSysFlag and topicFilterType were checked against their bits and words when
        # the header was parsed; the table checks the whole config once more before it stores it.
        current = self.ctx.topics.get(h.topic)
        try:  # RocketMQ 5's "+message.type=FIFO" on top of what the topic has
            attributes = apply_modification((current.attributes if current else None) or {},
                                            h.attributes) or None
        except RemoteProtocolError as e:
            return cmd.response(ResponseCode.INVALID_PARAMETER, str(e))
        tc = TopicConfig(
            h.topic, h.read_queue_nums, h.write_queue_nums, h.perm, h.topic_filter_type,
            h.topic_sys_flag, h.order, attributes,
        )
        topics = self.ctx.topics
        topics.update(tc, quota=True)  # BrokerError LIMIT_EXCEEDED for a new topic past topics_max
        return self._recorded(cmd, RecordKind.TOPIC_UPDATE, topic=h.topic, config=tc.to_dict(),
                              version=topics.data_version.to_dict())

    def delete_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        """DELETE_TOPIC_IN_BROKER: the topic's config, its consumer offsets and its queues go;
        the CommitLog keeps its bytes until retention, as in RocketMQ."""
        h = DeleteTopicRequestHeader.from_ext_fields(cmd.ext_fields)
        reason = validate_topic(h.topic)
        if reason is not None:  # ".." or "" would name a directory above the topic's queues
            return cmd.response(ResponseCode.INVALID_PARAMETER, reason)
        if h.topic in SYSTEM_TOPICS:
            return cmd.response(ResponseCode.NO_PERMISSION, f"the system topic[{h.topic}] cannot be deleted")
        self.ctx.topics.delete(h.topic)
        self.ctx.offsets.remove_topic(h.topic)
        self.store.delete_topics([h.topic])
        return self._recorded(cmd, RecordKind.TOPIC_DELETE, topic=h.topic,
                              version=self.ctx.topics.data_version.to_dict())

    def get_all_topic_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """The topic table, whole or a page of it (broker/tables/topic_pages.py): never more
        than a frame; past it a whole-table request is refused with LIMIT_EXCEEDED."""
        h = GetAllTopicConfigRequestHeader.from_ext_fields(cmd.ext_fields)
        config = self.ctx.config
        body, total = topic_config_answer(
            self.ctx.topics, h, split_enable=config.enable_split_metadata,
            page_max=config.split_metadata_size, frame_max=config.max_frame_size)
        return cmd.response(ResponseCode.SUCCESS, body=body, ext_fields=(
            GetAllTopicConfigResponseHeader(total_topic_num=total).to_ext_fields()))

    # -- statistics -----------------------------------------------------------------------------
    def get_topic_stats_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Per queue: min and max offset and the store time of the newest message."""
        h = GetTopicStatsInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        tc = self.ctx.topics.get(h.topic)
        if tc is None:
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        table: dict[str, Any] = {}
        for qid in range(tc.write_queue_nums):
            max_offset = self.store.get_max_offset_in_queue(h.topic, qid)
            last = self.store.get_message_store_timestamp(h.topic, qid, max_offset - 1) if max_offset > 0 else 0
            table[message_queue_key(h.topic, self.ctx.config.broker_name, qid)] = {
                "minOffset": self.store.get_min_offset_in_queue(h.topic, qid),
                "maxOffset": max_offset,
                "lastUpdateTimestamp": max(last, 0),
            }
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps({"offsetTable": table}))

    def get_consume_stats(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """Per queue of the group's topics (or of the one topic asked): broker offset, committed
        consumer offset (0 when none) and the store time of the last consumed message: the lag."""
        h = GetConsumeStatsRequestHeader.from_ext_fields(cmd.ext_fields)
        ctx = self.ctx
        topics = [h.topic] if h.topic else ctx.offsets.topics_of_group(h.consumer_group)
        table: dict[str, Any] = {}
        for topic in topics:
            tc = ctx.topics.get(topic)
            if tc is None:
                continue
            for qid in range(tc.write_queue_nums):
                consumer_offset = max(ctx.offsets.query(h.consumer_group, topic, qid), 0)
                last = (self.store.get_message_store_timestamp(topic, qid, consumer_offset - 1)
                        if consumer_offset > 0 else 0)
                table[message_queue_key(topic, ctx.config.broker_name, qid)] = {
                    "brokerOffset": self.store.get_max_offset_in_queue(topic, qid),
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": max(last, 0),
                }
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps({"consumeTps": 0.0, "offsetTable": table}))

    def get_all_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.offsets.encode())

    async def export_metadata(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """EXPORT_ROCKSDB_CONFIG_TO_JSON (355): the metadata store's tables as JSON (the body),
        those named in ``configType`` (RocketMQ's names, ``;`` or ``,`` between them:
        topics, subscriptionGroups, consumerOffsets, delayOffsets), every one when absent.
        The offsets written behind are saved first, so the answer holds every commit made
        before the request. Read on a worker thread through a read-only connection of its
        own (WAL: the last committed state, without holding up the tables' writes)."""
        wanted = _config_types(cmd.ext_fields.get("configType"))
        if isinstance(wanted, str):
            return cmd.response(ResponseCode.INVALID_PARAMETER, wanted)
        ctx = self.ctx

        def export() -> bytes:
            ctx.offsets.persist()  # a failure is logged; the export shows what is stored
            # A reader of its own: the tables' writes go on while a large table is read.
            with MetadataDB(ctx.offsets.db.path, read_only=True) as reader:
                return orjson.dumps(export_tables(reader, wanted))

        try:
            body = await asyncio.to_thread(export)
        except StoreError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"metadata export failed: {e}")
        return cmd.response(ResponseCode.SUCCESS, body=body)

    # -- subscription groups --------------------------------------------------------------------
    def update_subscription_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        if not cmd.body:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "subscription group config body missing")
        cfg = SubscriptionGroupConfig.from_json(cmd.body)
        # BrokerError: INVALID_PARAMETER for an illegal group, LIMIT_EXCEEDED past groups_max
        groups = self.ctx.sub_groups
        groups.update(cfg, quota=True)
        return self._recorded(cmd, RecordKind.GROUP_UPDATE, group=cfg.group_name,
                              config=cfg.to_dict(), version=groups.data_version.to_dict())

    def get_all_subscription_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=self.ctx.sub_groups.wrapper().to_json())

    def delete_subscription_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        h = DeleteSubscriptionGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        self.ctx.sub_groups.delete(h.group_name)
        if h.remove_offset:
            self.ctx.offsets.remove_group(h.group_name)
        return self._recorded(cmd, RecordKind.GROUP_DELETE, group=h.group_name,
                              removeOffset=bool(h.remove_offset),
                              version=self.ctx.sub_groups.data_version.to_dict())

    # -- the metadata log -----------------------------------------------------------------------
    def _recorded(self, cmd: RemotingCommand, kind: RecordKind, **fields: Any) -> HandlerResult:
        """The answer of a change just made: SUCCESS at once when no record is needed (no
        replication), else once its record is durable on the slaves (metadata_log.py)."""
        journal = self.ctx.metadata_log
        appended = journal.append(kind, **fields) if journal is not None else None
        if appended is None:
            return cmd.response(ResponseCode.SUCCESS)
        return self._answer_when_settled(cmd, appended)

    async def _answer_when_settled(self, cmd: RemotingCommand,
                                   appended: PutMessageResult) -> RemotingCommand:
        journal = self.ctx.metadata_log
        assert journal is not None
        code, remark = await journal.settled(appended)
        return cmd.response(code, remark)


CONFIG_TYPES_MAX = len(EXPORT_NAMES)  # names in one configType


def _config_types(value: str | None) -> list[str] | None | str:
    """The table names of a ``configType`` field; None for every table; a str: why refused."""
    if value is None or not value.strip():
        return None
    names = [n.strip() for n in value.replace(",", ";").split(";") if n.strip()]
    if len(names) > CONFIG_TYPES_MAX:
        return f"configType names {len(names)} tables, there are {CONFIG_TYPES_MAX}"
    unknown = [n for n in names if n not in EXPORT_NAMES]
    if unknown:
        return (f"configType {unknown[0]!r} is not one of "
                f"{', '.join(EXPORT_NAMES)}")
    return list(dict.fromkeys(names))
