"""HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP and CHECK_CLIENT_CONFIG, over the
ClientManager tables.

A heartbeat of a consumer group also makes sure the group's config and its retry topic
(``%RETRY%group``, one queue) exist: the C++ push consumer subscribes to the retry topic right
away and needs a route for it. Nothing here is required before a send or a pull: the C++ client
sends its first message before its first heartbeat.

CHECK_CLIENT_CONFIG is what a Java consumer (and OrbitMQ's push consumer) sends at start for a
subscription that is not TAG: it is answered exactly as a pull with that subscription would be
refused (see :func:`orbitmq.broker.processor.pull_processor.check_subscription`), so the consumer fails at
start with the reason instead of retrying pulls that cannot succeed.
"""

from __future__ import annotations

import logging

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.processor.pull_processor import check_subscription
from orbitmq.broker.tables.topic_config_manager import RETRY_GROUP_TOPIC_PREFIX
from orbitmq.protocol.bodies import CheckClientRequestBody, ConsumerListBody, HeartbeatData
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    UnregisterClientRequestHeader,
)
from orbitmq.transport.connection import RemotingConnection

__all__ = ["ClientProcessor"]

log = logging.getLogger(__name__)


class ClientProcessor:
    """Client registration requests."""

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.clients = ctx.clients

    def heart_beat(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """HEART_BEAT (34): body HeartbeatData (enums as names or the C++ client's ordinals)."""
        if not cmd.body:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "heartbeat without a body")
        data = HeartbeatData.from_json(cmd.body)
        client_id = data.client_id
        for consumer in data.consumer_data_set:
            group_cfg = self.ctx.sub_groups.find(consumer.group_name)
            if group_cfg is not None:
                self.ctx.topics.create_system_topic(
                    RETRY_GROUP_TOPIC_PREFIX + consumer.group_name, group_cfg.retry_queue_nums
                )
            if self.clients.register_consumer(consumer, conn, client_id, cmd):
                self.clients.notify_consumer_ids_changed(consumer.group_name)
        for producer in data.producer_data_set:
            self.clients.register_producer(producer.group_name, conn, client_id, cmd)
        return cmd.response(ResponseCode.SUCCESS)

    def unregister_client(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """UNREGISTER_CLIENT (35); the C++ client sends the group that does not apply as ``""``."""
        h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.producer_group:
            self.clients.unregister_producer(h.producer_group, conn)
        if h.consumer_group and self.clients.unregister_consumer(h.consumer_group, conn):
            self.clients.notify_consumer_ids_changed(h.consumer_group)
        return cmd.response(ResponseCode.SUCCESS)

    def get_consumer_list_by_group(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_CONSUMER_LIST_BY_GROUP (38): body ``{"consumerIdList": [...]}``."""
        h = GetConsumerListByGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        ids = self.clients.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}")
        return cmd.response(ResponseCode.SUCCESS, body=ConsumerListBody(ids).to_json())

    def check_client_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): body ``{"clientId", "group", "subscriptionData"}``; SUCCESS
        when this broker can filter by the subscription, else the code a pull would get."""
        if not cmd.body:
            return cmd.response(ResponseCode.INVALID_PARAMETER, "CHECK_CLIENT_CONFIG without a body")
        body = CheckClientRequestBody.from_json(cmd.body)
        sub = body.subscription_data
        if sub is None:
            return cmd.response(ResponseCode.INVALID_PARAMETER,
                                "CHECK_CLIENT_CONFIG without subscriptionData")
        refused = check_subscription(sub.sub_string, sub.expression_type,
                                     self.ctx.config.enable_property_filter)
        if refused is not None:
            log.warning("client config refused group=%s client=%s topic=%s: %s", body.group,
                        body.client_id, sub.topic, refused[1])
            return cmd.response(*refused)
        return cmd.response(ResponseCode.SUCCESS)

    def connection_closed(self, conn: RemotingConnection) -> None:
        """A client connection closed: it leaves its groups, whose other members are told."""
        for group in self.clients.connection_closed(conn):
            self.clients.notify_consumer_ids_changed(group)

    def scan_expired(self) -> None:
        """Drop silent members (no heartbeat for ``client_channel_expire_ms``) and close their
        connections when they belong to nothing any more."""
        changed, doomed = self.clients.scan_expired(self.ctx.config.client_channel_expire_ms)
        for group in changed:
            self.clients.notify_consumer_ids_changed(group)
        for conn in doomed:
            log.warning("closing silent client connection peer=%s", conn.peer)
            conn.close()
