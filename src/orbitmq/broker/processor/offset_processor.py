"""QUERY_CONSUMER_OFFSET (14) and UPDATE_CONSUMER_OFFSET (15): a clustering group's committed
offsets, kept by the offset table (tables/consumer_offset_manager.py)."""

from __future__ import annotations

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.metadata_log import RecordKind
from orbitmq.broker.tables.subscription_group_manager import validate_group
from orbitmq.broker.tables.topic_config_manager import validate_topic
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.transport.connection import RemotingConnection

__all__ = ["OffsetProcessor"]


class OffsetProcessor:
    """The two consumer offset handlers over the broker's offset table."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.offsets = ctx.offsets
        self.metadata_log = ctx.metadata_log
        self.store = ctx.store

    def query_consumer_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """QUERY_CONSUMER_OFFSET (14). Without a committed offset, a queue whose first message
        is still stored answers 0 (a new group reads it from the start, as RocketMQ); otherwise
        QUERY_NOT_FOUND and the client applies its ConsumeFromWhere."""
        h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset < 0 and self.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0:
            offset = 0
        if offset < 0:
            return cmd.response(
                ResponseCode.QUERY_NOT_FOUND,
                f"no committed offset for group {h.consumer_group} in {h.topic}:{h.queue_id}",
            )
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    async def update_consumer_offset(self, cmd: RemotingCommand,
                                     conn: RemotingConnection) -> RemotingCommand:
        """UPDATE_CONSUMER_OFFSET (15), answered once the offset is in the metadata store (the
        commits of one event-loop round share a transaction): an offset answered as committed
        survives a kill -9 of the broker. When the write fails (logged), the offset stays in
        memory, is written at the next round, and the answer is SYSTEM_ERROR. The C++ client
        sends it without the oneway bit and does not wait, so it is answered like any request."""
        h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        reason = validate_topic(h.topic) or validate_group(h.consumer_group)
        if reason is not None:
            return cmd.response(ResponseCode.INVALID_PARAMETER, f"offset not committed: {reason}")
        saved = self.offsets.commit_saved(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        # The record in the same loop step as the commit: the log keeps the commits' order.
        journal = self.metadata_log
        appended = (journal.append(RecordKind.OFFSET_COMMIT, group=h.consumer_group,
                                   topic=h.topic, queueId=h.queue_id, offset=h.commit_offset)
                    if journal is not None else None)
        if not await saved:
            return cmd.response(ResponseCode.SYSTEM_ERROR, (
                "offset committed in memory but not yet saved (the broker's metadata store "
                "failed, see its log); it is saved again at the next round"))
        if journal is None:
            return cmd.response(ResponseCode.SUCCESS)
        # SUCCESS only once the commit is on the slaves a failover may elect (metadata_log.py).
        code, remark = await journal.settled(appended)
        return cmd.response(code, remark)
