"""Queue offsets and message look-ups: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32), VIEW_MESSAGE_BY_ID (33) and
QUERY_MESSAGE by key (12).

Message bodies are the raw stored messages (the CommitLog format, protocol/stored/) sent without a
copy; VIEW_MESSAGE_BY_ID checks that the offset really starts a message before sending anything,
so an arbitrary offset from a client can never make the broker send a slice of garbage.

A message that is not there is QUERY_NOT_FOUND (22) for both look-ups. RocketMQ answers a view by
an offset that holds no message SYSTEM_ERROR, which here means the server failed; its clients
raise the same error for any code but SUCCESS, so the specific code costs them nothing.
"""

from __future__ import annotations

from orbitmq.broker.context import BrokerContext
from orbitmq.errors import ConnectionClosedError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryMessageRequestHeader,
    SearchOffsetByTimestampRequestHeader,
    ViewMessageRequestHeader,
)
from orbitmq.security.access_table import SUB_OR_GET, topic_permission
from orbitmq.transport.connection import RemotingConnection

__all__ = ["QueryProcessor"]

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # extField Java's admin sets when the key is a msg id


class QueryProcessor:
    """Offset and message look-up requests (read only). Every handler but VIEW_MESSAGE_BY_ID
    (which reads the commit log) is registered to see the sends acknowledged before its request
    (handlers.py: ``after_dispatch``)."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.config = ctx.config
        self.store = ctx.store
        self.ctx = ctx

    def get_max_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.store.get_max_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    def get_min_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.store.get_min_offset_in_queue(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = SearchOffsetByTimestampRequestHeader.from_ext_fields(cmd.ext_fields)
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return cmd.response(ResponseCode.SUCCESS, None, {"offset": str(offset)})

    def get_earliest_msg_storetime(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext_fields(cmd.ext_fields)
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        return cmd.response(ResponseCode.SUCCESS, None, {"timestamp": str(ts)})

    def view_message_by_id(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: ``offset`` is the CommitLog offset the client decoded from an
        offset message id; body = that stored message."""
        h = ViewMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        msg = self.store.look_message_by_offset(h.offset) if h.offset >= 0 else None
        raw = self.store.get_message_raw(h.offset, msg.store_size) if msg is not None else None
        if raw is None:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                f"can not find message by the offset, {h.offset}: no message "
                                "starts there")
        assert msg is not None
        # Access control: reading a message is Sub or Get on its topic (AccessDeniedError
        # answers NO_PERMISSION, nothing of the message sent).
        self.ctx.authorize_found(cmd, topic_permission(msg.topic, *SUB_OR_GET))
        return cmd.response(ResponseCode.SUCCESS, body=raw)

    def query_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand | None:
        """QUERY_MESSAGE: messages of a topic whose KEYS (or UNIQ_KEY) hold ``key``; body = the raw
        messages concatenated; QUERY_NOT_FOUND when there are none."""
        h = QueryMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        cfg = self.config
        max_num = max(1, min(h.max_num, cfg.max_msgs_num_batch))
        if cmd.ext_fields.get(UNIQUE_KEY_QUERY, "").lower() == "true":
            max_num = cfg.default_query_max_num
        found = self.store.query_message_raw(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        fields = {
            "indexLastUpdateTimestamp": str(found.index_last_update_timestamp),
            "indexLastUpdatePhyoffset": str(found.index_last_update_phy_offset),
        }
        if not found.buffers:
            return cmd.response(ResponseCode.QUERY_NOT_FOUND,
                                "can not find message, maybe time range not correct", fields)
        resp = cmd.response(ResponseCode.SUCCESS, None, fields)
        try:
            conn.send_parts(resp, found.buffers)
        except ConnectionClosedError:
            pass
        return None
