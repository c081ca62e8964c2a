"""The admin client's consumer group operations: settings, dead letters, connections, queue
holders.

:class:`~orbitmq.client.AsyncAdmin` delegates ``update_group``, ``dead_letters``,
``consumer_connections`` and ``queue_holders`` to the coroutines here (each takes the admin's
:class:`~orbitmq.client.admin.core.AdminCore`); the helpers above them are pure.

- Subscription group settings travel as Java's SubscriptionGroupConfig JSON. An update sends the
  group's whole config, so :func:`updated_group_config` starts from what the broker has (or
  RocketMQ's defaults for a new group) and changes only the settings given.
- Dead letters live in ``%DLQ%{group}``; :func:`resend_properties` strips the bookkeeping the
  broker added while retrying, so a resent message looks like the original send.
- Which client holds a queue is only known to the clients: :func:`running_info_queues` reads the
  queues of a GET_CONSUMER_RUNNING_INFO answer (``mqTable``), whether its keys are MessageQueue
  JSON strings (OrbitMQ), a list of entries, or fastjson-style object keys (the C++ client).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import orjson

from orbitmq.client.admin.core import AdminCore
from orbitmq.client.admin.models import (
    ConsumerConnection,
    ConsumerConnectionInfo,
    parse_consumer_connection,
)
from orbitmq.client.admin.queues import read_queue
from orbitmq.client.instance import check_response
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.client.validation import check_group
from orbitmq.errors import BrokerError, ClientError, OrbitMQError, RemoteProtocolError
from orbitmq.protocol.bodies import ConsumerListBody, MessageQueue, loads_lenient
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetConsumerConnectionListRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TOOLS_CONSUMER_GROUP,
)

__all__ = [
    "update_group",
    "dead_letters",
    "queue_holders",
    "consumer_connections",
    "GROUP_SETTINGS",
    "TOOLS_CONSUMER_GROUP",
    "RETRY_TOPIC_PREFIX",
    "DLQ_TOPIC_PREFIX",
    "RETRY_BOOKKEEPING",
    "updated_group_config",
    "resend_properties",
    "original_topic",
    "running_info_queues",
]

RETRY_TOPIC_PREFIX = RETRY_GROUP_TOPIC_PREFIX
DLQ_TOPIC_PREFIX = DLQ_GROUP_TOPIC_PREFIX

# Python name -> (JSON name, type) of the settings ``orbitmq group update`` may change.
GROUP_SETTINGS: dict[str, tuple[str, type]] = {
    "retry_max_times": ("retryMaxTimes", int),
    "retry_queue_nums": ("retryQueueNums", int),
    "consume_enable": ("consumeEnable", bool),
    "consume_broadcast_enable": ("consumeBroadcastEnable", bool),
    "consume_from_min_enable": ("consumeFromMinEnable", bool),
    "consume_message_orderly": ("consumeMessageOrderly", bool),  # RocketMQ 5: a FIFO group
}
_DEFAULTS: dict[str, Any] = {
    "consumeEnable": True, "consumeFromMinEnable": True, "consumeBroadcastEnable": True,
    "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True, "consumeMessageOrderly": False,
}
# Properties the broker (or a consumer) adds while a message is retried; not the sender's.
RETRY_BOOKKEEPING = frozenset({
    PropertyKey.RETRY_TOPIC, PropertyKey.ORIGIN_MESSAGE_ID, PropertyKey.REAL_TOPIC,
    PropertyKey.REAL_QID, PropertyKey.DELAY, PropertyKey.RECONSUME_TIME,
    PropertyKey.MAX_RECONSUME_TIMES, PropertyKey.CONSUME_START_TIME, PropertyKey.MIN_OFFSET,
    PropertyKey.MAX_OFFSET, PropertyKey.WAIT,
})


def updated_group_config(all_groups_body: bytes | memoryview, group: str,
                         changes: dict[str, Any]) -> bytes:
    """The SubscriptionGroupConfig JSON to send for ``group`` with ``changes`` applied.

    Args:
        all_groups_body: the broker's GET_ALL_SUBSCRIPTIONGROUP_CONFIG answer.
        changes: Python names of GROUP_SETTINGS -> new values.

    Raises:
        ClientError: an unknown setting or a negative number.
    """
    data = loads_lenient(bytes(all_groups_body)) if all_groups_body else {}
    table = data.get("subscriptionGroupTable") if isinstance(data, dict) else None
    current = table.get(group) if isinstance(table, dict) else None
    cfg = {**_DEFAULTS, **(current if isinstance(current, dict) else {}), "groupName": group}
    for name, value in changes.items():
        if name not in GROUP_SETTINGS:
            raise ClientError(f"unknown group setting {name!r}; known: {sorted(GROUP_SETTINGS)}")
        json_name, kind = GROUP_SETTINGS[name]
        if kind is int and int(value) < 0:
            raise ClientError(f"{name} must not be negative, got {value}")
        cfg[json_name] = kind(value)
    return orjson.dumps(cfg)


def original_topic(msg: MessageExt) -> str | None:
    """The topic a dead letter (or retry message) was first sent to (its RETRY_TOPIC)."""
    topic = msg.properties.get(PropertyKey.RETRY_TOPIC)
    if topic and not topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)):
        return topic
    return None


def resend_properties(msg: MessageExt) -> dict[str, str]:
    """The properties to send a dead letter again with: the sender's own (UNIQ_KEY included, so
    consumers see the same message id), without TAGS and KEYS (given separately) and without
    RETRY_BOOKKEEPING."""
    skip = RETRY_BOOKKEEPING | {PropertyKey.TAGS, PropertyKey.KEYS}
    return {k: v for k, v in msg.properties.items() if k not in skip}


# -- running info -------------------------------------------------------------------------------
_MQ_KEY = re.compile(rb'\{[^{}]*"topic"[^{}]*\}\s*:')


def _queue_of(value: Any) -> MessageQueue | None:
    if isinstance(value, str | bytes):
        try:
            value = loads_lenient(value)
        except RemoteProtocolError:
            return None
    if not isinstance(value, dict):
        return None
    try:
        return MessageQueue.from_dict(value)
    except RemoteProtocolError:
        return None


def running_info_queues(body: bytes | memoryview) -> list[MessageQueue]:
    """The queues of a ConsumerRunningInfo's ``mqTable`` (see the module docstring); [] when the
    body holds none or cannot be read."""
    raw = bytes(body)
    try:
        data = loads_lenient(raw)
    except RemoteProtocolError:
        data = None
    found: list[MessageQueue] = []
    table = data.get("mqTable") if isinstance(data, dict) else None
    if isinstance(table, dict):
        found = [mq for mq in map(_queue_of, table) if mq is not None]
    elif isinstance(table, list):
        for entry in table:
            if isinstance(entry, dict):
                mq = _queue_of(entry.get("messageQueue", entry.get("mq", entry)))
                if mq is not None:
                    found.append(mq)
    elif data is None and b'"mqTable"' in raw:
        # Object keys are not JSON: pick the MessageQueue objects written as keys.
        start = raw.index(b'"mqTable"')
        found = [mq for m in _MQ_KEY.finditer(raw, start)
                 if (mq := _queue_of(m.group(0)[:-1].rstrip())) is not None]
    return sorted(set(found))


# -- operations (over the admin core's connections) ----------------------------------------
async def update_group(core: AdminCore, group: str, changes: dict[str, Any], *,
                       cluster: str | None = None) -> list[str]:
    """Apply ``changes`` (GROUP_SETTINGS names) to ``group`` on every master of ``cluster`` (the
    only cluster when None; several are refused); the broker names."""
    check_group(group)
    masters = await core.write_masters(cluster)
    if not masters:
        raise ClientError("no master broker to update the group on")
    for addr in masters.values():
        current = await core.broker_call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        body = updated_group_config(current.body, group, changes)
        cmd = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body)
        check_response(await core.invoke(addr, cmd))
    return sorted(masters)


async def dead_letters(core: AdminCore, group: str, max_messages: int) -> list[MessageExt]:
    """The messages of ``%DLQ%{group}`` on every broker, oldest first ([] when it has none)."""
    topic = DLQ_TOPIC_PREFIX + check_group(group)
    try:
        route, masters = await core.route_masters(topic)
    except BrokerError as e:
        if e.code == ResponseCode.TOPIC_NOT_EXIST:
            return []
        raise
    out: list[MessageExt] = []
    for mq in sorted(subscribe_queues_from_route(topic, route)):
        addr = masters.get(mq.broker_name)
        if addr is not None and len(out) < max_messages:
            out.extend(await read_queue(core, addr, mq, max_messages - len(out)))
    return sorted(out, key=lambda m: (m.store_timestamp, m.commit_log_offset))


async def _held_by(core: AdminCore, masters: list[str], group: str,
                   client_id: str) -> list[MessageQueue]:
    header = GetConsumerRunningInfoRequestHeader(group, client_id, False)
    ok = (ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.SYSTEM_ERROR,
          ResponseCode.NOT_SUPPORTED)
    for addr in masters:  # the client answers through any broker it is connected to
        try:
            resp = await core.broker_call(addr, RequestCode.GET_CONSUMER_RUNNING_INFO, header,
                                          ok=ok)
        except (OrbitMQError, OSError):
            continue
        if resp.code == ResponseCode.SUCCESS and resp.body:
            return running_info_queues(resp.body)
    return []


async def queue_holders(core: AdminCore, group: str) -> dict[MessageQueue, str]:
    """Queue -> id of the client of ``group`` that holds it, as the clients report it; best
    effort: a client that does not answer is left out."""
    try:
        info = await consumer_connections(core, group)
        masters = list((await core.masters(None)).values())
    except (OrbitMQError, OSError):
        return {}
    ids = [c.client_id for c in info.connections]
    held = await asyncio.gather(*(_held_by(core, masters, group, i) for i in ids))
    holders: dict[MessageQueue, str] = {}
    for client_id, queues in zip(ids, held, strict=True):
        for mq in queues:
            holders.setdefault(mq, client_id)
    return holders


async def consumer_connections(core: AdminCore, group: str) -> ConsumerConnectionInfo:
    """The group's live clients and subscriptions, merged over every master broker.

    A broker without GET_CONSUMER_CONNECTION_LIST is asked GET_CONSUMER_LIST_BY_GROUP
    instead, which gives the client ids only.
    """
    check_group(group)
    masters = await core.masters(None)
    answers = await asyncio.gather(*(_connections_of(core, addr, group)
                                     for addr in masters.values()))
    merged = ConsumerConnectionInfo(group)
    for info in answers:
        merged = merged.merge(info)
    return merged


async def _connections_of(core: AdminCore, addr: str, group: str) -> ConsumerConnectionInfo:
    resp = await core.broker_call(
        addr, RequestCode.GET_CONSUMER_CONNECTION_LIST,
        GetConsumerConnectionListRequestHeader(group),
        ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.NOT_SUPPORTED))
    if resp.code == ResponseCode.SUCCESS and resp.body:
        return parse_consumer_connection(group, resp.body)
    if resp.code != ResponseCode.NOT_SUPPORTED:
        return ConsumerConnectionInfo(group)
    resp = await core.broker_call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                  GetConsumerListByGroupRequestHeader(group),
                                  ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
    if resp.code != ResponseCode.SUCCESS or not resp.body:
        return ConsumerConnectionInfo(group)  # RocketMQ answers SYSTEM_ERROR for no consumer
    ids = ConsumerListBody.from_json(resp.body).consumer_id_list
    return ConsumerConnectionInfo(group, tuple(ConsumerConnection(i) for i in sorted(ids)))
