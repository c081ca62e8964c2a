"""Producer and consumer group tables, fed by heartbeats and emptied by goodbyes and silence.

A client is known by its connection (RocketMQ's Channel): one C++ process shares one connection
and one client id among all its producers and consumers. A consumer group's membership changes
when a connection joins it, leaves it (UNREGISTER_CLIENT), closes, or stays silent for
``client_channel_expire_ms``; then every remaining member gets NOTIFY_CONSUMER_IDS_CHANGED (oneway)
so that it rebalances at once instead of at its next 20 s timer.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from orbitmq.errors import ConnectionClosedError, ExpressionError
from orbitmq.protocol.bodies import (
    ConsumeFromWhere,
    ConsumerData,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.expressions import compile_expression
from orbitmq.protocol.message import java_string_hash
from orbitmq.transport.connection import RemotingConnection

__all__ = ["ClientChannelInfo", "ConsumerGroupInfo", "ClientManager"]

log = logging.getLogger(__name__)


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclasses.dataclass(slots=True)
class ClientChannelInfo:
    """One client connection as a member of a group."""

    conn: RemotingConnection
    client_id: str
    language: int
    version: int
    last_update_ms: int


@dataclasses.dataclass(slots=True)
class ConsumerGroupInfo:
    """A consumer group: how it consumes, what it subscribes to, who is in it."""

    group: str
    consume_type: ConsumeType = ConsumeType.CONSUME_PASSIVELY
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    subscriptions: dict[str, SubscriptionData] = dataclasses.field(default_factory=dict)
    channels: dict[RemotingConnection, ClientChannelInfo] = dataclasses.field(default_factory=dict)

    def client_ids(self) -> list[str]:
        return sorted({info.client_id for info in self.channels.values()})


def _with_codes(sub: SubscriptionData) -> SubscriptionData:
    """Tags and their hash codes recomputed from a TAG expression (the C++ client sends [0]);
    none for SQL92 or for an expression that does not parse (its pulls are refused with
    SUBSCRIPTION_PARSE_FAILED, which tells the consumer why)."""
    try:
        compiled = compile_expression(sub.sub_string, sub.expression_type)
    except ExpressionError:
        return dataclasses.replace(sub, tags_set=[], code_set=[])
    tags = sorted(compiled.tags or ())
    return dataclasses.replace(sub, tags_set=tags, code_set=[java_string_hash(t) for t in tags])


class ClientManager:
    """Producer groups and consumer groups of one broker (used from the event loop only).

    Args:
        notify_enabled: send NOTIFY_CONSUMER_IDS_CHANGED on membership changes.
        clock_ms: monotonic milliseconds, injectable for tests of the idle scan.
    """

    def __init__(self, *, notify_enabled: bool = True,
                 clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.producers: dict[str, dict[RemotingConnection, ClientChannelInfo]] = {}
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.notify_enabled = notify_enabled
        self._clock_ms = clock_ms

    def _channel(self, conn: RemotingConnection, client_id: str, cmd: RemotingCommand) -> ClientChannelInfo:
        return ClientChannelInfo(conn, client_id, int(cmd.language), cmd.version, self._clock_ms())

    # -- producers ------------------------------------------------------------------------------
    def register_producer(self, group: str, conn: RemotingConnection, client_id: str,
                          cmd: RemotingCommand) -> None:
        members = self.producers.setdefault(group, {})
        info = members.get(conn)
        if info is None:
            members[conn] = self._channel(conn, client_id, cmd)
            log.info("producer registered group=%s client=%s peer=%s", group, client_id, conn.peer)
        else:
            info.client_id = client_id
            info.last_update_ms = self._clock_ms()

    def unregister_producer(self, group: str, conn: RemotingConnection) -> None:
        members = self.producers.get(group)
        if members is not None and members.pop(conn, None) is not None:
            log.info("producer unregistered group=%s peer=%s", group, conn.peer)
            if not members:
                del self.producers[group]

    def producer_connections(self, group: str) -> list[RemotingConnection]:
        """Live connections of a producer group (the transaction checker asks one of them)."""
        return [c for c in self.producers.get(group, {}) if c.is_open]

    # -- consumers ------------------------------------------------------------------------------
    def register_consumer(self, data: ConsumerData, conn: RemotingConnection, client_id: str,
                          cmd: RemotingCommand) -> bool:
        """Record a consumer heartbeat; True when the group's membership changed."""
        group = self.consumers.get(data.group_name)
        if group is None:
            group = self.consumers[data.group_name] = ConsumerGroupInfo(data.group_name)
        group.consume_type = data.consume_type
        group.message_model = data.message_model
        group.consume_from_where = data.consume_from_where
        if data.subscription_data_set:
            group.subscriptions = {s.topic: _with_codes(s) for s in data.subscription_data_set}
        info = group.channels.get(conn)
        if info is None:
            group.channels[conn] = self._channel(conn, client_id, cmd)
            log.info("consumer registered group=%s client=%s peer=%s",
                     data.group_name, client_id, conn.peer)
            return True
        changed = info.client_id != client_id
        info.client_id = client_id
        info.last_update_ms = self._clock_ms()
        return changed

    def unregister_consumer(self, group_name: str, conn: RemotingConnection) -> bool:
        """Remove a connection from a consumer group; True when it was a member."""
        group = self.consumers.get(group_name)
        if group is None or group.channels.pop(conn, None) is None:
            return False
        log.info("consumer unregistered group=%s peer=%s", group_name, conn.peer)
        if not group.channels:
            del self.consumers[group_name]
        return True

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        info = self.consumers.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def consumer_ids(self, group: str) -> list[str]:
        info = self.consumers.get(group)
        return info.client_ids() if info is not None else []

    # -- leaving ----------------------------------------------------------------------------------
    def connection_closed(self, conn: RemotingConnection) -> list[str]:
        """Forget a closed connection everywhere; returns the consumer groups it left."""
        for group in list(self.producers):
            self.unregister_producer(group, conn)
        return [g for g in list(self.consumers) if self.unregister_consumer(g, conn)]

    def discount(self, seconds: float) -> None:
        """Take ``seconds`` out of every member's silence: the broker's loop stood still that
        long or its clock stepped (RemotingServer.discount), and heartbeats sent meanwhile wait
        unread. Without this a step of an hour had the next scan expire every client and close
        its connection."""
        shift = int(seconds * 1000)
        for members in self.producers.values():
            for info in members.values():
                info.last_update_ms += shift
        for group in self.consumers.values():
            for info in group.channels.values():
                info.last_update_ms += shift

    def scan_expired(self, expire_ms: int) -> tuple[list[str], list[RemotingConnection]]:
        """Drop memberships with no heartbeat for ``expire_ms``.

        Returns the consumer groups that lost a member, and the connections that are now in no
        group at all and stale: the caller closes those, as RocketMQ closes silent channels.
        """
        now = self._clock_ms()
        stale: set[RemotingConnection] = set()
        for group, members in list(self.producers.items()):
            for conn, info in list(members.items()):
                if now - info.last_update_ms > expire_ms:
                    stale.add(conn)
                    self.unregister_producer(group, conn)
        changed: list[str] = []
        for name, group_info in list(self.consumers.items()):
            for conn, info in list(group_info.channels.items()):
                if now - info.last_update_ms > expire_ms:
                    stale.add(conn)
                    log.warning("consumer channel expired group=%s client=%s", name, info.client_id)
                    if self.unregister_consumer(name, conn) and name not in changed:
                        changed.append(name)
        still_member = {c for m in self.producers.values() for c in m}
        still_member.update(c for g in self.consumers.values() for c in g.channels)
        return changed, [c for c in stale if c not in still_member]

    def notify_consumer_ids_changed(self, group: str) -> int:
        """Tell every member of ``group`` that its membership changed; returns how many were told."""
        info = self.consumers.get(group)
        if info is None or not self.notify_enabled:
            return 0
        told = 0
        for conn in list(info.channels):
            if not conn.is_open:
                continue
            cmd = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group}, oneway=True
            )
            try:
                conn.invoke_oneway(cmd)
                told += 1
            except ConnectionClosedError:
                continue
        log.debug("consumer ids changed group=%s notified=%d", group, told)
        return told
