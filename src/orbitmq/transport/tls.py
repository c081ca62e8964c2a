"""Serving TLS on every port, in RocketMQ's three server modes (settings: security/tls.py).

- ``disabled``: plaintext only (the listener is asyncio's own, nothing here runs).
- ``permissive``: TLS and plaintext on the same port. The first byte a client sends tells them
  apart: 0x16 opens a TLS handshake record, and no RemotingCommand, HTTP request or HTTP/2
  preface starts with it. The byte is peeked (``MSG_PEEK``), so the handshake or the plaintext
  protocol reads the stream from its start.
- ``enforcing``: TLS only; a connection whose first byte is not 0x16 is closed unanswered.

A TLS port accepts through :class:`TlsListener`, which builds each connection's transport with
``loop.connect_accepted_socket`` once the first byte is known, and hands the connection to the
server's protocol only once the handshake is done (a failed handshake never reaches the server,
so a server counts only connections it will see close).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from orbitmq.security.tls import (
    TLS_HANDSHAKE_BYTE,
    ReloadingContext,
    ServerTls,
    TlsError,
    TlsServerMode,
)

__all__ = ["TlsListener", "listen"]

log = logging.getLogger(__name__)

FIRST_BYTE_WAIT_S = 10.0  # a connection that sends nothing this long after accept is closed
HANDSHAKE_TIMEOUT_S = 10.0
ADMISSIONS_MAX = 1024  # connections between accept and handshake done; past it new ones close
ACCEPT_RETRY_S = 1.0  # after accept fails (EMFILE...), as asyncio's own servers wait
BACKLOG = 1024  # RocketMQ's serverSocketBacklog


# ------------------------------------------------------------------------------------ listening
ProtocolFactory = Callable[[], asyncio.BaseProtocol]


async def listen(factory: ProtocolFactory, host: str, port: int, tls: ServerTls | None, *,
                 name: str) -> tuple[asyncio.AbstractServer, int]:
    """Serve ``factory``'s protocol on ``host:port`` in ``tls``'s mode; (server, bound port).

    Raises:
        TlsError: TLS settings that cannot work.
        OSError: the port is taken.
    """
    loop = asyncio.get_running_loop()
    if tls is None or not tls.enabled:
        server = await loop.create_server(factory, host, port)
        return server, int(server.sockets[0].getsockname()[1])
    problem = tls.problem()
    if problem is not None:
        raise TlsError(f"{problem[0]}: {problem[1]}")
    contexts = ReloadingContext.for_server(tls, f"{name} TLS")
    sock = await _bound_socket(loop, host, port)
    listener = TlsListener(sock, factory, tls.mode, contexts, name=name)
    listener.start()
    return listener, int(sock.getsockname()[1])


async def _bound_socket(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    infos = await loop.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    if not infos:
        raise OSError(f"cannot resolve {host!r}")
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


class _Holding(asyncio.Protocol):
    """The protocol of a TLS connection until its handshake is done: it reads nothing, so the
    first bytes after the handshake wait for the server's own protocol."""

    def __init__(self) -> None:
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.pause_reading()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class TlsListener(asyncio.AbstractServer):
    """Accepts on a bound socket and serves each connection in TLS or, in permissive mode,
    plaintext by its first byte (module docstring).

    Counters for tests and metrics: ``accepted_tls``, ``accepted_plain``, ``refused_plain``
    (enforcing), ``failed_handshakes``, ``dropped`` (past ADMISSIONS_MAX or silent).
    """

    def __init__(self, sock: socket.socket, factory: ProtocolFactory, mode: TlsServerMode,
                 contexts: ReloadingContext, *, name: str) -> None:
        self._sock = sock
        self._factory = factory
        self._mode = mode
        self.contexts = contexts
        self.name = name
        self._loop = asyncio.get_running_loop()
        self._accepting: asyncio.Task[None] | None = None
        self._admitting: set[asyncio.Task[None]] = set()
        self._closed = False
        self.accepted_tls = 0
        self.accepted_plain = 0
        self.refused_plain = 0
        self.failed_handshakes = 0
        self.dropped = 0

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._closed else (self._sock,)

    def start(self) -> None:
        if self._accepting is None and not self._closed:
            self._accepting = self._loop.create_task(self._accept_loop())

    # -- asyncio.AbstractServer --------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._accepting is not None:
            self._accepting.cancel()
        for task in self._admitting:
            task.cancel()
        self._sock.close()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return not self._closed

    async def start_serving(self) -> None:
        self.start()

    async def serve_forever(self) -> None:
        self.start()
        assert self._accepting is not None
        await asyncio.shield(self._accepting)

    async def wait_closed(self) -> None:
        waits = [t for t in (self._accepting, *self._admitting) if t is not None]
        if waits:
            await asyncio.wait(waits)

    # -- accepting ---------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = self._loop
        while True:
            try:
                conn, _ = await loop.sock_accept(self._sock)
            except OSError as e:
                if self._closed:
                    return
                log.warning("server=%s accept failed (%s); accepting again in %.0f s",
                            self.name, e, ACCEPT_RETRY_S)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            if len(self._admitting) >= ADMISSIONS_MAX:
                self.dropped += 1
                conn.close()
                continue
            task = loop.create_task(self._admit(conn))
            self._admitting.add(task)
            task.add_done_callback(self._admitting.discard)

    async def _admit(self, sock: socket.socket) -> None:
        """Peek the first byte, then hand the connection on in TLS or plaintext (or close it).
        The socket is ours to close until a transport takes it."""
        try:
            first = await self._first_byte(sock)
        except BaseException:  # the listener closing (cancelled), or our bug
            sock.close()
            raise
        if first is None:  # closed, reset or silent before saying anything
            self.dropped += 1
            sock.close()
            return
        if first != TLS_HANDSHAKE_BYTE and self._mode is TlsServerMode.ENFORCING:
            self.refused_plain += 1
            log.debug("server=%s: a plaintext connection refused (tls_server_mode enforcing)",
                      self.name)
            sock.close()
            return
        try:
            if first == TLS_HANDSHAKE_BYTE:
                await self._handshake(sock)
            else:
                self.accepted_plain += 1
                await self._loop.connect_accepted_socket(self._factory, sock)
        except (OSError, TimeoutError) as e:  # the transport closed the socket
            log.info("server=%s: a connection from %s failed at once: %s", self.name,
                     _peer(sock), e)

    async def _first_byte(self, sock: socket.socket) -> int | None:
        sock.setblocking(False)
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            return await asyncio.wait_for(_first_byte(self._loop, sock), FIRST_BYTE_WAIT_S)
        except (OSError, TimeoutError):
            return None

    async def _handshake(self, sock: socket.socket) -> None:
        peer = _peer(sock)
        holding = _Holding()  # uvloop returns its TLS protocol, not ours: keep ours at hand
        try:
            transport, _ = await self._loop.connect_accepted_socket(
                lambda: holding, sock, ssl=self.contexts.get(),
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (OSError, ssl.SSLError, TimeoutError) as e:
            # The transport closed the socket.
            self.failed_handshakes += 1
            log.info("server=%s: TLS handshake with %s failed: %s", self.name, peer, e)
            return
        if holding.lost or transport.is_closing():
            return
        self.accepted_tls += 1
        protocol = self._factory()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        transport.resume_reading()


async def _first_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The first byte the peer sent, left unread in the socket (None: closed before any)."""
    while True:
        try:
            got = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        else:
            return got[0] if got else None
        ready: asyncio.Future[None] = loop.create_future()
        fd = sock.fileno()
        loop.add_reader(fd, _wake, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _peer(sock: socket.socket) -> str:
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
