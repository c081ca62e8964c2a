"""The 5.x clients a broker knows: their heartbeats, settings and Telemetry streams.

A client names itself in every call (metadata ``x-mq-client-id``). Its Telemetry stream is a
:class:`TelemetryChannel`, which the broker's producer table holds like a remoting connection:
for each topic a 5.x producer publishes to, it is a producer of the group ``%GRPC%{topic}``
(the PGROUP of that topic's 5.x half messages), so the transaction check service asks it as it
asks a 4.x producer, and the channel turns CHECK_TRANSACTION_STATE into the Telemetry command
RecoverOrphanedTransactionCommand.

A client is alive while its stream is open or it sent a heartbeat within
``client_channel_expire_ms``; the POP service renews a push consumer's messages only while it is.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable

from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.grpc._generated import service_pb2 as spb
from orbitmq.grpc.convert import GRPC_PRODUCER_GROUP_PREFIX, to_wire_message
from orbitmq.protocol.codes import LanguageCode, RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import CheckTransactionStateRequestHeader
from orbitmq.protocol.message import PropertyKey
from orbitmq.protocol.stored import decode_stored_message

__all__ = ["GrpcClients", "ClientSession", "TelemetryChannel", "CLIENT_ID_MAX",
           "transaction_id", "parse_transaction_id"]

log = logging.getLogger(__name__)

CLIENT_ID_MAX = 256
OUTBOX_MAX = 1024  # commands queued for one client's stream before the oldest are dropped


def transaction_id(uniq_key: str, commit_log_offset: int, queue_offset: int) -> str:
    """A 5.x transaction id: where the half message lies, so EndTransaction can name it."""
    return f"{uniq_key}.{commit_log_offset}.{queue_offset}"


def parse_transaction_id(text: str) -> tuple[str, int, int] | None:
    parts = text.split(".")
    if len(parts) != 3 or len(text) > 256 or not parts[0] or not parts[1].isdigit() \
            or not parts[2].isdigit() or len(parts[1]) > 19 or len(parts[2]) > 19:
        return None
    return parts[0], int(parts[1]), int(parts[2])


class TelemetryChannel:
    """One client's Telemetry stream, seen by the broker's tables as a producer connection."""

    def __init__(self, client_id: str, peer: str, body_max: int) -> None:
        self.client_id = client_id
        self.peer = peer
        self.body_max = body_max
        self.outbox: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(OUTBOX_MAX)
        self.is_open = True
        self.dropped = 0

    def push(self, command: spb.TelemetryCommand) -> bool:
        if not self.is_open:
            return False
        try:
            self.outbox.put_nowait(command)
        except asyncio.QueueFull:
            self.dropped += 1
            return False
        return True

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """The transaction check service's CHECK_TRANSACTION_STATE, as the 5.x command."""
        if cmd.code != RequestCode.CHECK_TRANSACTION_STATE:
            return
        h = CheckTransactionStateRequestHeader.from_ext_fields(cmd.ext_fields)
        half = decode_stored_message(bytes(cmd.body), check_crc=False, decompress=True)
        real = half.properties.get(PropertyKey.REAL_TOPIC) or half.topic
        wire = to_wire_message(half, body_max=self.body_max)
        wire.topic.name = real
        tx = transaction_id(half.uniq_key or h.msg_id or "", h.commit_log_offset,
                            h.tran_state_table_offset)
        command = spb.TelemetryCommand(
            status=pb.Status(code=pb.OK, message="OK"),
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=wire, transaction_id=tx))
        if not self.push(command):
            log.info("transaction check for %s not queued: client %s is gone or slow",
                     half.uniq_key, self.client_id)

    def close(self) -> None:
        if self.is_open:
            self.is_open = False
            try:
                self.outbox.put_nowait(None)
            except asyncio.QueueFull:
                pass

    def __hash__(self) -> int:
        return id(self)


@dataclasses.dataclass
class ClientSession:
    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    last_seen: float = 0.0
    channel: TelemetryChannel | None = None
    topics: set[str] = dataclasses.field(default_factory=set)


class GrpcClients:
    """client id -> session (module docstring); event loop only.

    Args:
        producers: the broker's client table (5.x producers join it per topic).
        expire_ms: how long a client without a stream or heartbeat stays alive.
    """

    def __init__(self, producers: ClientManager, expire_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.producers = producers
        self.expire_s = expire_ms / 1000
        self.clock = clock
        self.sessions: dict[str, ClientSession] = {}

    def touch(self, client_id: str, client_type: int | None = None, group: str | None = None) -> ClientSession:
        session = self.sessions.get(client_id)
        if session is None:
            session = self.sessions[client_id] = ClientSession(client_id)
        session.last_seen = self.clock()
        if client_type:
            session.client_type = client_type
        if group:
            session.group = group
        if session.channel is not None:
            for topic in session.topics:
                self._register(session, topic)
        return session

    def alive(self, client_id: str) -> bool:
        session = self.sessions.get(client_id)
        if session is None:
            return False
        if session.channel is not None and session.channel.is_open:
            return True
        return self.clock() - session.last_seen <= self.expire_s

    def attach(self, client_id: str, channel: TelemetryChannel) -> None:
        session = self.touch(client_id)
        if session.channel is not None and session.channel is not channel:
            self.detach(client_id, session.channel)
        session.channel = channel

    def detach(self, client_id: str, channel: TelemetryChannel) -> None:
        channel.close()
        session = self.sessions.get(client_id)
        for topic in list(session.topics) if session is not None else []:
            self.producers.unregister_producer(GRPC_PRODUCER_GROUP_PREFIX + topic, channel)  # type: ignore[arg-type]
        if session is not None and session.channel is channel:
            session.channel = None

    def publishes(self, client_id: str, topics: list[str]) -> None:
        """A producer's settings name its topics: it answers their transaction checks."""
        session = self.touch(client_id)
        session.topics.update(topics)
        for topic in topics:
            self._register(session, topic)

    def _register(self, session: ClientSession, topic: str) -> None:
        if session.channel is None or not session.channel.is_open:
            return
        hello = RemotingCommand.request(RequestCode.HEART_BEAT, {})
        hello.language = LanguageCode.PYTHON
        self.producers.register_producer(GRPC_PRODUCER_GROUP_PREFIX + topic, session.channel,  # type: ignore[arg-type]
                                         session.client_id, hello)

    def terminated(self, client_id: str) -> None:
        session = self.sessions.pop(client_id, None)
        if session is not None and session.channel is not None:
            self.detach(client_id, session.channel)

    def expire(self) -> int:
        """Forget clients silent past ``expire_ms`` without a stream; how many."""
        now = self.clock()
        gone = [cid for cid, s in self.sessions.items()
                if (s.channel is None or not s.channel.is_open) and now - s.last_seen > self.expire_s]
        for cid in gone:
            self.terminated(cid)
        return len(gone)
