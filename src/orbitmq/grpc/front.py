"""The gRPC port in ``tls_server_mode permissive``: TLS and plaintext on one port.

grpcio serves one kind of connection per port, so in permissive mode the port is ours: a
:class:`~orbitmq.transport.tls.TlsListener` tells the two apart by the first byte (TLS ends
here, with ALPN ``h2`` as gRPC clients require) and relays each connection's HTTP/2 bytes to
grpcio listening in plaintext on a loopback port of its own. A relayed call's peer is that
loopback connection, so :meth:`GrpcFront.peer_of` maps it back to the client's address for
access control and logs. The relay costs a copy each way; ``enforcing`` has none (grpcio's own
TLS on the port).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from typing import Any

from orbitmq.security.tls import ServerTls
from orbitmq.transport.tls import listen

__all__ = ["GrpcFront", "WRITE_BUFFER_HIGH_BYTES"]

log = logging.getLogger(__name__)

WRITE_BUFFER_HIGH_BYTES = 4 * 1024 * 1024  # a side's unsent bytes past which the other stops reading
CONNECT_TIMEOUT_S = 5.0


class GrpcFront:
    """The public gRPC port of permissive mode, relaying to grpcio on ``127.0.0.1:inner_port``."""

    def __init__(self, tls: ServerTls, host: str, port: int, inner_port: int) -> None:
        self.tls = dataclasses.replace(tls, alpn=("h2",))
        self.host, self.port, self.inner_port = host, port, inner_port
        self._server: asyncio.AbstractServer | None = None
        self._peers: dict[int, str] = {}  # the relay's local port on loopback -> the client's peer
        self.relays: set[_Relay] = set()

    async def start(self) -> int:
        """Listen; the bound port (OSError when it is taken, TlsError for bad settings)."""
        self._server, self.port = await listen(lambda: _Relay(self), self.host, self.port,
                                               self.tls, name="grpc")
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for relay in list(self.relays):
            relay.close()

    def peer_of(self, context: Any) -> str:
        """The gRPC peer string of a call's client (``ipv4:IP:PORT``), through the relay."""
        peer = context.peer() or ""
        host, _, port = peer.rpartition(":")
        if host in ("ipv4:127.0.0.1", "ipv6:[::1]") and port.isdigit():
            return self._peers.get(int(port), peer)
        return peer


class _Upstream(asyncio.Protocol):
    """The relay's connection to grpcio."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.relay.to_client(data)

    def pause_writing(self) -> None:
        self.relay.pause_client()

    def resume_writing(self) -> None:
        self.relay.resume_client()

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.close()


class _Relay(asyncio.Protocol):
    """One client connection (TLS or plaintext) and its connection to grpcio."""

    def __init__(self, front: GrpcFront) -> None:
        self.front = front
        self.client: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.pending: list[bytes] = []  # what the client sent before grpcio's side was open
        self.key: int | None = None
        self.closed = False
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client = transport  # type: ignore[assignment]
        self.front.relays.add(self)
        self._task = asyncio.get_running_loop().create_task(self._open())

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        upstream = _Upstream(self)
        try:
            await asyncio.wait_for(loop.create_connection(
                lambda: upstream, "127.0.0.1", self.front.inner_port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            log.warning("gRPC relay: cannot reach the endpoint on 127.0.0.1:%d: %s",
                        self.front.inner_port, e)
            self.close()
            return
        if self.closed or upstream.transport is None:
            if upstream.transport is not None:
                upstream.transport.close()
            return
        self.upstream = upstream
        sock = upstream.transport.get_extra_info("sockname")
        peer = self.client.get_extra_info("peername") if self.client is not None else None
        if isinstance(sock, tuple) and isinstance(peer, tuple):
            self.key = int(sock[1])
            self.front._peers[self.key] = _grpc_peer(peer)
        for data in self.pending:
            upstream.transport.write(data)
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        upstream = self.upstream.transport if self.upstream is not None else None
        if upstream is None:
            self.pending.append(data)
            if sum(map(len, self.pending)) > WRITE_BUFFER_HIGH_BYTES:
                self.pause_client()
            return
        upstream.write(data)

    def to_client(self, data: bytes) -> None:
        if self.client is not None and not self.client.is_closing():
            self.client.write(data)

    def pause_writing(self) -> None:  # the client reads slowly: stop reading grpcio
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    def pause_client(self) -> None:
        if self.client is not None and not self.client.is_closing():
            self.client.pause_reading()

    def resume_client(self) -> None:
        if self.client is not None and not self.client.is_closing():
            self.client.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.front.relays.discard(self)
        if self.key is not None:
            self.front._peers.pop(self.key, None)
        if self.client is not None:
            self.client.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()


def _grpc_peer(peer: tuple[Any, ...]) -> str:
    """A socket peer name as grpcio spells a peer."""
    host, port = str(peer[0]), int(peer[1])
    try:
        socket.inet_pton(socket.AF_INET6, host)
    except OSError:
        return f"ipv4:{host}:{port}"
    return f"ipv6:[{host}]:{port}"
