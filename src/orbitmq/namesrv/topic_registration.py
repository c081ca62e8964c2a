"""Incremental registration at the name server: one topic at a time, and the data
version check that lets a broker skip sending its whole topic table.

- REGISTER_TOPIC_IN_NAMESRV (217, RocketMQ 5): one topic's queues (body TopicRouteData).
- DELETE_TOPIC_IN_NAMESRV (216): a whole topic (RocketMQ), or one broker's queues of it when the
  header names the broker (an OrbitMQ broker deleting a topic of its own).
- QUERY_DATA_VERSION (322): does this name server hold the broker's DataVersion (the body)?
  Answers ``changed``; also the broker's heartbeat, as RocketMQ's ``queryBrokerTopicConfig``.

Every value is checked where it is parsed: header integers by their types, the topic name by
RocketMQ's rules, queue counts within ``0..QUEUE_NUMS_MAX``, permission and system flag bits by
QueueData's types; a bad request is answered INVALID_PARAMETER with the field named (the
transport turns RemoteProtocolError into that answer) and changes nothing.

``counts`` tallies what arrived, by kind (the ``orbitmq_namesrv_registrations_total`` metric):
how a test or an operator sees that a topic created went as one topic, not as a whole table.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable
from typing import Protocol

from orbitmq.config import QUEUE_NUMS_MAX
from orbitmq.errors import RemoteProtocolError
from orbitmq.namesrv.route_table import DataVersionKey, RouteTable, TopicQueues
from orbitmq.protocol.bodies import DataVersion, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import DeleteTopicFromNamesrvRequestHeader
from orbitmq.protocol.registration_headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterTopicRequestHeader,
    TopicRegistrationResponseHeader,
)
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.server import RemotingServer

__all__ = ["TopicRegistrationHandlers", "REGISTRATION_KINDS"]

TOPIC_NAME_LENGTH_MAX = 127  # RocketMQ's TopicValidator bound
_TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
# The kinds ``counts`` keeps: full registrations, single topics, topic deletions, version queries
# and the queries answered "changed" (each one followed by a whole table).
REGISTRATION_KINDS = ("broker", "topic", "topic_delete", "version_query", "version_changed")


class _VersionMove(Protocol):
    broker_name: str | None
    broker_addr: str | None
    base_version_timestamp: int | None
    base_version_counter: int | None
    version_timestamp: int | None
    version_counter: int | None


def check_topic_name(topic: str, where: str) -> None:
    """RocketMQ's topic name rules, refused as a bad request (the field named)."""
    if not topic or len(topic) > TOPIC_NAME_LENGTH_MAX or not _TOPIC_NAME.match(topic):
        raise RemoteProtocolError(
            f"{where}: {topic[:TOPIC_NAME_LENGTH_MAX + 1]!r} is not a topic name (1.."
            f"{TOPIC_NAME_LENGTH_MAX} characters of {_TOPIC_NAME.pattern})")


class TopicRegistrationHandlers:
    """The three handlers over a RouteTable; ``on_broker_conn`` tells the server which
    connection a broker talks on (its routes go when that connection closes)."""

    def __init__(self, routes: RouteTable, clock: Callable[[], int],
                 on_broker_conn: Callable[[RemotingConnection, str], None]) -> None:
        self.routes = routes
        self._clock = clock
        self._on_broker_conn = on_broker_conn
        self.counts: collections.Counter[str] = collections.Counter()

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.REGISTER_TOPIC_IN_NAMESRV, self.register_topic)
        server.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        server.register(RequestCode.QUERY_DATA_VERSION, self.query_data_version)

    def register_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = RegisterTopicRequestHeader.from_ext_fields(cmd.ext_fields)
        check_topic_name(h.topic, "RegisterTopicRequestHeader.topic")
        move = _version_move(h, "RegisterTopicRequestHeader")
        queues = _queues(cmd.body, h.broker_name)
        self.counts["topic"] += 1
        if h.broker_id is not None and h.broker_id != 0:
            # A slave's queues are its master's: routes come from masters only (route_table).
            return _answer(cmd, False if move else None)
        self.routes.register_topic(h.topic, queues)  # unknown brokers: nothing (as RocketMQ)
        return _answer(cmd, self._advance(h, move, conn))

    def delete_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(cmd.ext_fields)
        check_topic_name(h.topic, "DeleteTopicFromNamesrvRequestHeader.topic")
        move = _version_move(h, "DeleteTopicFromNamesrvRequestHeader")
        self.counts["topic_delete"] += 1
        if h.broker_name is None:
            self.routes.delete_topic(h.topic)  # an admin's: the whole topic, as before
            return cmd.response(ResponseCode.SUCCESS)
        if h.broker_id is not None and h.broker_id != 0:
            return _answer(cmd, False if move else None)
        self.routes.unregister_topic(h.topic, h.broker_name)
        return _answer(cmd, self._advance(h, move, conn))

    def query_data_version(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext_fields(cmd.ext_fields)
        if not cmd.body:
            raise RemoteProtocolError("QUERY_DATA_VERSION body: a DataVersion is required")
        version = DataVersion.from_json(bytes(cmd.body))
        changed = self.routes.query_data_version(
            h.broker_addr, h.broker_name, (version.timestamp, version.counter), self._clock())
        self.counts["version_query"] += 1
        if changed:
            self.counts["version_changed"] += 1
        else:
            self._on_broker_conn(conn, h.broker_addr)
        resp = QueryDataVersionResponseHeader(changed=changed)
        return cmd.response(ResponseCode.SUCCESS, ext_fields=resp.to_ext_fields())

    def _advance(self, h: _VersionMove, move: tuple[DataVersionKey, DataVersionKey] | None,
                 conn: RemotingConnection) -> bool | None:
        if move is None or h.broker_addr is None or h.broker_name is None:
            return None
        accepted = self.routes.advance_data_version(h.broker_addr, h.broker_name, *move)
        if accepted:
            self._on_broker_conn(conn, h.broker_addr)
        return accepted


def _answer(cmd: RemotingCommand, accepted: bool | None) -> RemotingCommand:
    fields = TopicRegistrationResponseHeader(version_accepted=accepted).to_ext_fields()
    return cmd.response(ResponseCode.SUCCESS, ext_fields=fields)


def _version_move(h: _VersionMove, where: str) -> tuple[DataVersionKey, DataVersionKey] | None:
    """(base, new) of a request carrying a version move, None for one without; the fields come
    together with the broker's name and address, or not at all."""
    parts = (h.base_version_timestamp, h.base_version_counter, h.version_timestamp,
             h.version_counter)
    given = [p for p in parts if p is not None]
    if not given:
        return None
    if len(given) != len(parts) or h.broker_addr is None or h.broker_name is None:
        raise RemoteProtocolError(
            f"{where}: baseVersionTimestamp, baseVersionCounter, versionTimestamp and "
            "versionCounter come together, with brokerName and brokerAddr")
    bt, bc, vt, vc = given
    return (bt, bc), (vt, vc)


def _queues(body: bytes | memoryview | None, sender: str | None) -> dict[str, TopicQueues]:
    """The body's queue data by broker name, each checked; a broker naming itself in the
    header may only register its own queues."""
    if not body:
        raise RemoteProtocolError("REGISTER_TOPIC_IN_NAMESRV body: a TopicRouteData is required")
    route = TopicRouteData.from_json(bytes(body))
    queues: dict[str, TopicQueues] = {}
    for i, qd in enumerate(route.queue_datas):
        where = f"TopicRouteData.queueDatas[{i}]"
        if not qd.broker_name:
            raise RemoteProtocolError(f"{where}.brokerName: empty")
        if sender is not None and qd.broker_name != sender:
            raise RemoteProtocolError(
                f"{where}.brokerName: {qd.broker_name!r} is not the sender {sender!r}")
        for name, n in (("readQueueNums", qd.read_queue_nums),
                        ("writeQueueNums", qd.write_queue_nums)):
            if n > QUEUE_NUMS_MAX:
                raise RemoteProtocolError(f"{where}.{name}: {n} is out of range 0..{QUEUE_NUMS_MAX}")
        queues[qd.broker_name] = TopicQueues(qd.read_queue_nums, qd.write_queue_nums, qd.perm,
                                             qd.topic_sys_flag)
    return queues
