"""What admin tools ask about a consumer group's clients: GET_CONSUMER_CONNECTION_LIST (203) and
GET_CONSUMER_RUNNING_INFO (307).

GET_CONSUMER_CONNECTION_LIST answers from the broker's own tables (Java's ConsumerConnection)::

    {"connectionSet": [{"clientId", "clientAddr", "language": "JAVA", "version": 0}],
     "subscriptionTable": {"topic": {SubscriptionData}}, "consumeType": "CONSUME_PASSIVELY",
     "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET"}

or CONSUMER_NOT_ONLINE (206) when the group has no live client here.

GET_CONSUMER_RUNNING_INFO (header ``consumerGroup``, ``clientId``, ``jstackEnable``) is only
known to the client itself: the broker forwards the request over that client's own connection
(found by client id among the group's members) and answers the admin with the client's answer,
code, remark and body unchanged; CONSUMER_NOT_ONLINE when the client is not connected here,
SYSTEM_ERROR when it does not answer within ``RUNNING_INFO_TIMEOUT_S``.

The body the broker expects from a client (what ``orbitmq group status`` reads to show which
client holds each queue) is Java's ConsumerRunningInfo in JSON::

    {"properties": {...}, "subscriptionSet": [...],
     "mqTable": {"{\\"brokerName\\":\\"broker-a\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}":
                 {"commitOffset": 12, "cachedMsgCount": 0, "locked": false, ...}},
     "statusTable": {...}}

``mqTable`` maps each queue the client holds to its process-queue details. Keys are the compact
JSON of the MessageQueue as a string (the convention of admin_processor's tables); a list of
``{"messageQueue": {...}, ...}`` entries, and the C++ client's fastjson-style object keys, are read
too. The broker does not interpret the body: it passes it through.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.errors import OrbitMQError
from orbitmq.protocol.codes import LanguageCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from orbitmq.transport.connection import RemotingConnection

if TYPE_CHECKING:
    from orbitmq.broker.tables.client_manager import ClientChannelInfo, ClientManager

__all__ = ["ConsumerInfoProcessor", "RUNNING_INFO_TIMEOUT_S"]

log = logging.getLogger(__name__)

RUNNING_INFO_TIMEOUT_S = 3.0  # below the admin client's 5 s, so the admin hears why


def _language_name(value: int) -> str:
    try:
        return LanguageCode(value).name
    except ValueError:
        return LanguageCode.OTHER.name


def _connection_json(info: ClientChannelInfo) -> dict[str, Any]:
    return {"clientId": info.client_id, "clientAddr": info.conn.peer,
            "language": _language_name(info.language), "version": info.version}


class ConsumerInfoProcessor:
    """Consumer connection and running-info requests of admin tools."""

    def __init__(self, clients: ClientManager) -> None:
        self.clients = clients

    def get_consumer_connection_list(self, cmd: RemotingCommand,
                                     conn: RemotingConnection) -> RemotingCommand:
        h = GetConsumerConnectionListRequestHeader.from_ext_fields(cmd.ext_fields)
        info = self.clients.consumers.get(h.consumer_group)
        if info is None or not info.channels:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer group[{h.consumer_group}] not online")
        body = {
            "connectionSet": [_connection_json(c) for c in info.channels.values()],
            "subscriptionTable": {t: s.to_dict() for t, s in info.subscriptions.items()},
            "consumeType": info.consume_type.name,
            "messageModel": info.message_model.name,
            "consumeFromWhere": info.consume_from_where.name,
        }
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(body))

    async def get_consumer_running_info(self, cmd: RemotingCommand,
                                        conn: RemotingConnection) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        info = self.clients.consumers.get(h.consumer_group)
        target = None
        if info is not None:
            target = next((c for c, ch in info.channels.items()
                           if ch.client_id == h.client_id and c.is_open), None)
        if target is None:
            return cmd.response(ResponseCode.CONSUMER_NOT_ONLINE,
                                f"the consumer <{h.client_id}> of group <{h.consumer_group}> "
                                "is not online")
        forward = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, h.to_ext_fields())
        try:
            answer = await target.invoke(forward, RUNNING_INFO_TIMEOUT_S)
        except OrbitMQError as e:
            log.info("running info of client %s failed: %s", h.client_id, e)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the consumer <{h.client_id}> did not answer: {e}")
        return cmd.response(answer.code, answer.remark, body=answer.body)
