"""What each request code needs: the one table of request code -> resources and actions.

A request is authorized against what its code needs here, before any handler sees it:

- :data:`SUPER`: only a Super user (broker settings, users and ACLs, name server writes).
- :data:`ANY_USER`: any authenticated user (route reads, client bookkeeping that names nothing).
- :data:`IN_HANDLER`: the resource is known only once the handler has read the store (ending a
  transaction: the half message's real topic; viewing a message by its offset: its topic). The
  handler calls the authorizer itself before it changes or returns anything.
- a function of the request: the (resource type, name, action) triples it needs, all of which must
  be allowed.

A code that is not in the table is denied (``needs`` returns None): a handler added without a row
here is unreachable with authorization on, which a test walks for every handler table.

Retry and dead-letter topics (``%RETRY%group``, ``%DLQ%group``) stand for their group: a request
on them needs Sub on the group, as RocketMQ's resources say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import orjson

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import SendMessageRequestHeader
from orbitmq.protocol.lite import split_lite_queue_topic
from orbitmq.protocol.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from orbitmq.security.model import Action, ResourceType

__all__ = ["Permission", "Needs", "SUPER", "ANY_USER", "IN_HANDLER", "ACCESS_TABLE", "needs", "SUB_OR_GET", "describe",
           "AuthRequestCode", "topic_permission"]

RETRY_PREFIX, DLQ_PREFIX = RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX


class AuthRequestCode:
    """RocketMQ 5's ACL 2.0 administration codes (users 3001-3005, ACLs 3006-3010), and
    OrbitMQ's copy of the whole table for slaves."""

    AUTH_CREATE_USER = 3001
    AUTH_UPDATE_USER = 3002
    AUTH_DELETE_USER = 3003
    AUTH_GET_USER = 3004
    AUTH_LIST_USER = 3005
    AUTH_CREATE_ACL = 3006
    AUTH_UPDATE_ACL = 3007
    AUTH_DELETE_ACL = 3008
    AUTH_GET_ACL = 3009
    AUTH_LIST_ACL = 3010
    GET_AUTH_METADATA = 9105  # OrbitMQ: users (with secrets) and ACLs, for a slave's copy


@dataclasses.dataclass(frozen=True)
class Permission:
    """One thing a request does: any one of ``actions`` on the resource ``rtype:name``
    suffices (reading a queue's offsets takes Sub or Get: a consumer and a monitor both may)."""

    rtype: ResourceType
    name: str
    actions: frozenset[Action]

    def __str__(self) -> str:
        return f"{'|'.join(sorted(a.value for a in self.actions))} on {self.rtype.value}:{self.name}"


def _p(rtype: ResourceType, name: str, *actions: Action) -> Permission:
    return Permission(rtype, name, frozenset(actions))


@dataclasses.dataclass(frozen=True)
class _Marker:
    name: str

    def __repr__(self) -> str:
        return self.name


SUPER = _Marker("SUPER")
ANY_USER = _Marker("ANY_USER")
IN_HANDLER = _Marker("IN_HANDLER")
Resolver = Callable[[RemotingCommand], Sequence[Permission]]


@dataclasses.dataclass(frozen=True)
class _Rule:
    """A resolver and what it needs in words (docs/security.md's table is made of these)."""

    resolve: Resolver
    text: str

    def __call__(self, cmd: RemotingCommand) -> Sequence[Permission]:
        return self.resolve(cmd)


Needs = _Marker | _Rule


def _acts(actions: tuple[Action, ...]) -> str:
    return " or ".join(a.value for a in actions)


def topic_permission(topic: str, *actions: Action) -> Permission:
    """``actions`` on ``topic``; on a retry or dead-letter topic, Sub on its group; on a lite
    topic's queue (protocol/lite.py), ``actions`` on its parent topic."""
    lite = split_lite_queue_topic(topic)
    if lite is not None:
        return _p(ResourceType.TOPIC, lite[0], *actions)
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return _p(ResourceType.GROUP, topic[len(prefix):], Action.SUB)
    return _p(ResourceType.TOPIC, topic, *actions)


def _field(cmd: RemotingCommand, *names: str) -> str:
    for name in names:
        value = cmd.ext_fields.get(name)
        if value:
            return value
    raise RemoteProtocolError(f"request code {cmd.code} lacks extField {names[0]!r}")


# Reads a consumer makes as well as a monitor (offsets, stats of its own queues, its messages).
SUB_OR_GET = (Action.SUB, Action.GET)


def _cluster(action: Action) -> _Rule:
    # A broker has one cluster: rules name it (Cluster:DefaultCluster) or any (Cluster:*); the
    # guard puts the server's cluster name in place of the empty name.
    return _Rule(lambda cmd: (_p(ResourceType.CLUSTER, "", action),),
                 f"{action.value} on the Cluster")


def _topic(actions: Action | tuple[Action, ...], field: str = "topic") -> _Rule:
    acts = actions if isinstance(actions, tuple) else (actions,)
    return _Rule(lambda cmd: (topic_permission(_field(cmd, field), *acts),),
                 f"{_acts(acts)} on the Topic ({field})")


def _group(actions: Action | tuple[Action, ...], field: str) -> _Rule:
    acts = actions if isinstance(actions, tuple) else (actions,)
    return _Rule(lambda cmd: (_p(ResourceType.GROUP, _field(cmd, field), *acts),),
                 f"{_acts(acts)} on the Group ({field})")


def _topic_and_group(actions: Action | tuple[Action, ...], group_field: str, *,
                     topic_optional: bool = False, topic_field: str = "topic") -> _Rule:
    acts = actions if isinstance(actions, tuple) else (actions,)

    def resolve(cmd: RemotingCommand) -> Sequence[Permission]:
        out = [_p(ResourceType.GROUP, _field(cmd, group_field), *acts)]
        topic = cmd.ext_fields.get(topic_field)
        if topic:
            out.append(topic_permission(topic, *acts))
        elif not topic_optional:
            raise RemoteProtocolError(f"request code {cmd.code} lacks extField {topic_field!r}")
        return out
    optional = ", if named" if topic_optional else ""
    return _Rule(resolve, f"{_acts(acts)} on the Group ({group_field}) and the Topic "
                          f"({topic_field}{optional})")


def _json_body(cmd: RemotingCommand) -> dict[str, object]:
    try:
        value = orjson.loads(bytes(cmd.body)) if cmd.body else {}
    except orjson.JSONDecodeError:
        raise RemoteProtocolError(f"request code {cmd.code}: body is not JSON") from None
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"request code {cmd.code}: body must be a JSON object")
    return value


def _heart_beat_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    """Sub on every consumer group and every topic it subscribes; producers name nothing."""
    out: list[Permission] = []
    consumers = _json_body(cmd).get("consumerDataSet") or []
    for data in consumers if isinstance(consumers, list) else ():
        if not isinstance(data, dict) or not isinstance(data.get("groupName"), str):
            raise RemoteProtocolError("HEART_BEAT: consumerDataSet entries need a groupName")
        out.append(_p(ResourceType.GROUP, str(data["groupName"]), Action.SUB))
        subs = data.get("subscriptionDataSet") or []
        for sub in subs if isinstance(subs, list) else ():
            topic = sub.get("topic") if isinstance(sub, dict) else None
            if isinstance(topic, str) and topic:
                out.append(topic_permission(topic, Action.SUB))
    return out


def _queue_locks_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    body = _json_body(cmd)
    group = body.get("consumerGroup")
    if not isinstance(group, str) or not group:
        raise RemoteProtocolError(f"request code {cmd.code}: body lacks consumerGroup")
    out = [_p(ResourceType.GROUP, group, Action.SUB)]
    queues = body.get("mqSet") or []
    for mq in queues if isinstance(queues, list) else ():
        topic = mq.get("topic") if isinstance(mq, dict) else None
        if isinstance(topic, str) and topic:
            out.append(topic_permission(topic, Action.SUB))
    return out


def _check_client_config_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    group = _json_body(cmd).get("group")
    if not isinstance(group, str) or not group:
        raise RemoteProtocolError("CHECK_CLIENT_CONFIG: body lacks group")
    return (_p(ResourceType.GROUP, group, Action.SUB),)


def _create_group_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    group = _json_body(cmd).get("groupName")
    if not isinstance(group, str) or not group:
        raise RemoteProtocolError("UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: body lacks groupName")
    return (_p(ResourceType.GROUP, group, Action.CREATE),)


def _unregister_client_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    group = cmd.ext_fields.get("consumerGroup")
    return (_p(ResourceType.GROUP, group, Action.SUB),) if group else ()


def _clone_group_offset_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    out = [_p(ResourceType.GROUP, _field(cmd, "srcGroup"), Action.GET),
           _p(ResourceType.GROUP, _field(cmd, "destGroup"), Action.UPDATE)]
    topic = cmd.ext_fields.get("topic")
    if topic:
        out.append(topic_permission(topic, Action.GET))
    return out


def _send_needs(cmd: RemotingCommand) -> Sequence[Permission]:
    """Pub on the topic the send handler will store to: its header parsed by the handler's own
    parser (V1 or V2 names, judged as the handler judges them), so no field can be named twice
    to show the check one topic and the handler another."""
    return (topic_permission(SendMessageRequestHeader.from_any_ext_fields(cmd.ext_fields).topic,
                             Action.PUB),)


# The request-specific rules, in words for docs/security.md's table.
_send = _Rule(_send_needs, "Pub on the Topic the send stores to")
_heart_beat = _Rule(_heart_beat_needs, "Sub on each consumer Group and each Topic it subscribes "
                                       "(a producer's: any user)")
_queue_locks = _Rule(_queue_locks_needs, "Sub on the Group and each Topic of its queues")
_check_client_config = _Rule(_check_client_config_needs, "Sub on the Group")
_create_group = _Rule(_create_group_needs, "Create on the Group")
_unregister_client = _Rule(_unregister_client_needs,
                           "Sub on the consumer Group, if named (a producer: any user)")
_clone_group_offset = _Rule(_clone_group_offset_needs,
                            "Get on srcGroup, Update on destGroup, Get on the Topic if named")

ACCESS_TABLE: dict[int, Needs] = {
    # messages
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
    OrbitMQRequestCode.SEND_TRANSACTION_BATCH: _topic(Action.PUB),
    RequestCode.RECALL_MESSAGE: _topic(Action.PUB),
    RequestCode.END_TRANSACTION: IN_HANDLER,
    OrbitMQRequestCode.END_TRANSACTION_BATCH: IN_HANDLER,
    RequestCode.PULL_MESSAGE: _topic_and_group(Action.SUB, "consumerGroup"),
    OrbitMQRequestCode.PULL_MESSAGE_BULK: _topic_and_group(Action.SUB, "consumerGroup"),
    RequestCode.CONSUMER_SEND_MSG_BACK: _group(Action.SUB, "group"),
    RequestCode.QUERY_MESSAGE: _topic(SUB_OR_GET),
    RequestCode.VIEW_MESSAGE_BY_ID: IN_HANDLER,
    # clients and offsets
    RequestCode.HEART_BEAT: _heart_beat,
    RequestCode.UNREGISTER_CLIENT: _unregister_client,
    RequestCode.CHECK_CLIENT_CONFIG: _check_client_config,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _group(Action.SUB, "consumerGroup"),
    RequestCode.QUERY_CONSUMER_OFFSET: _topic_and_group(SUB_OR_GET, "consumerGroup"),
    RequestCode.UPDATE_CONSUMER_OFFSET: _topic_and_group(Action.SUB, "consumerGroup"),
    RequestCode.LOCK_BATCH_MQ: _queue_locks,
    RequestCode.UNLOCK_BATCH_MQ: _queue_locks,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: _group(SUB_OR_GET, "consumerGroup"),
    RequestCode.GET_CONSUMER_RUNNING_INFO: _group(Action.GET, "consumerGroup"),
    RequestCode.GET_MAX_OFFSET: _topic(SUB_OR_GET),
    RequestCode.GET_MIN_OFFSET: _topic(SUB_OR_GET),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic(SUB_OR_GET),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic(SUB_OR_GET),
    # topics and groups
    RequestCode.UPDATE_AND_CREATE_TOPIC: _topic(Action.CREATE),
    RequestCode.DELETE_TOPIC_IN_BROKER: _topic(Action.DELETE),
    RequestCode.GET_ALL_TOPIC_CONFIG: _cluster(Action.GET),
    RequestCode.GET_TOPIC_STATS_INFO: _topic(SUB_OR_GET),
    RequestCode.GET_CONSUME_STATS: _topic_and_group(Action.GET, "consumerGroup",
                                                    topic_optional=True),
    RequestCode.GET_ALL_CONSUMER_OFFSET: _cluster(Action.GET),
    RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: _create_group,
    RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: _cluster(Action.GET),
    RequestCode.DELETE_SUBSCRIPTIONGROUP: _group(Action.DELETE, "groupName"),
    RequestCode.CLONE_GROUP_OFFSET: _clone_group_offset,
    RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: _topic(Action.GET),
    RequestCode.QUERY_CONSUME_TIME_SPAN: _topic_and_group(Action.GET, "group"),
    RequestCode.QUERY_CONSUME_QUEUE: _topic_and_group(Action.GET, "consumerGroup",
                                                      topic_optional=False),
    RequestCode.GET_PRODUCER_CONNECTION_LIST: _group(Action.GET, "producerGroup"),
    OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS: _cluster(Action.LIST),
    # the broker itself
    RequestCode.GET_BROKER_RUNTIME_INFO: _cluster(Action.GET),
    RequestCode.VIEW_BROKER_STATS_DATA: _cluster(Action.GET),
    RequestCode.GET_BROKER_CONSUME_STATS: _cluster(Action.GET),
    RequestCode.GET_BROKER_CONFIG: _cluster(Action.GET),
    RequestCode.GET_ALL_DELAY_OFFSET: _cluster(Action.GET),
    RequestCode.GET_BROKER_HA_STATUS: _cluster(Action.GET),
    RequestCode.UPDATE_BROKER_CONFIG: SUPER,
    RequestCode.EXPORT_ROCKSDB_CONFIG_TO_JSON: SUPER,  # every table: offsets of every group
    # name server: reads of routes by any user, writes by Super users (brokers sign as one)
    RequestCode.GET_ROUTEINFO_BY_TOPIC: ANY_USER,
    RequestCode.GET_BROKER_CLUSTER_INFO: ANY_USER,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ANY_USER,
    RequestCode.GET_TOPICS_BY_CLUSTER: ANY_USER,
    RequestCode.REGISTER_BROKER: SUPER,
    RequestCode.UNREGISTER_BROKER: SUPER,
    RequestCode.DELETE_TOPIC_IN_NAMESRV: SUPER,
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: SUPER,  # a broker's topic, one at a time
    RequestCode.QUERY_DATA_VERSION: SUPER,  # a broker's periodic check (and heartbeat)
    RequestCode.PUT_KV_CONFIG: SUPER,
    RequestCode.DELETE_KV_CONFIG: SUPER,
    RequestCode.UPDATE_NAMESRV_CONFIG: SUPER,
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: SUPER,
    RequestCode.ADD_WRITE_PERM_OF_BROKER: SUPER,
    # users and ACLs
    **{code: SUPER for code in range(AuthRequestCode.AUTH_CREATE_USER,
                                     AuthRequestCode.AUTH_LIST_ACL + 1)},
    AuthRequestCode.GET_AUTH_METADATA: SUPER,
}


_MARKER_TEXT = {
    "SUPER": "a Super user",
    "ANY_USER": "any authenticated user",
    "IN_HANDLER": "checked by the handler on what it finds",
}
_FOUND_TEXT: dict[int, str] = {  # what the IN_HANDLER codes check
    RequestCode.END_TRANSACTION: "Pub on the half message's real topic",
    OrbitMQRequestCode.END_TRANSACTION_BATCH: "Pub on the half message's real topic",
    RequestCode.VIEW_MESSAGE_BY_ID: "Sub or Get on the message's topic",
}


def describe(code: int) -> str:
    """What ``code`` needs, in words (docs/security.md's table)."""
    need = ACCESS_TABLE.get(code)
    if need is None:
        return "denied (in no rule)"
    if isinstance(need, _Marker):
        return _FOUND_TEXT.get(code, _MARKER_TEXT[need.name])
    return need.text


def needs(code: int) -> Needs | None:
    """What requests of ``code`` need; None for a code the table does not know (denied)."""
    return ACCESS_TABLE.get(code)
