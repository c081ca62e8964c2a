"""The client side of remoting: one connection per address, opened on demand and reopened after loss."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable

from orbitmq.errors import ConnectionClosedError, TimeoutError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.signature import Credentials, sign_fields
from orbitmq.security.tls import ClientTls, ReloadingContext
from orbitmq.transport.connection import HandlerResult, RemotingConnection
from orbitmq.transport.server import call_guarded

__all__ = ["RemotingClient", "sign_request"]

log = logging.getLogger(__name__)

RequestHandler = Callable[[RemotingCommand, RemotingConnection], HandlerResult]


def sign_request(credentials: Credentials, cmd: RemotingCommand) -> None:
    """Adds ``AccessKey`` and ``Signature`` (over the extFields and the body) to ``cmd``."""
    sign_fields(cmd.ext_fields, cmd.body, credentials)


class RemotingClient:
    """Talks to name servers and brokers by address ("host:port").

    Requests the servers send us (CHECK_TRANSACTION_STATE, NOTIFY_CONSUMER_IDS_CHANGED, ...) go to the
    handler registered for their code. Connections are created lazily; a lost one is replaced by the
    next request, so a restarted broker is reached again without the caller doing anything.

    A request that times out on a connection from which not one byte arrived since it was sent
    closes that connection: the peer or the path to it is gone (a cut network, a frozen host), and
    a TCP connection would otherwise wait for the kernel's retransmissions, which back off to
    minutes, long after the path is back. A connection that answered anything meanwhile stays.
    """

    def __init__(self, *, connect_timeout: float = 3.0, max_frame_size: int = 16 * 1024 * 1024,
                 credentials: Credentials | None = None, tls: ClientTls | None = None) -> None:
        self._connect_timeout = connect_timeout
        # Connections are TLS with these settings (None: plaintext); the certificate files are
        # read again when they change (transport/tls.py).
        self.tls = tls
        self._tls_context = ReloadingContext.for_client(tls) if tls is not None else None
        # Every request sent on this client's connections is signed with these (RocketMQ's
        # AccessKey / Signature extFields; docs/security.md).
        self.credentials = credentials
        self._max_frame_size = max_frame_size
        self._conns: dict[str, RemotingConnection] = {}
        self._connecting: dict[str, asyncio.Future[RemotingConnection]] = {}
        self._handlers: dict[int, RequestHandler] = {}
        self._closed = False

    def register(self, code: int, handler: RequestHandler) -> None:
        self._handlers[int(code)] = handler

    async def connection(self, addr: str) -> RemotingConnection:
        """The open connection to ``addr``, connecting if there is none."""
        conn = self._conns.get(addr)
        if conn is not None and conn.is_open:
            return conn
        if self._closed:
            raise ConnectionClosedError("client is closed")
        pending = self._connecting.get(addr)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[RemotingConnection] = asyncio.get_running_loop().create_future()
        self._connecting[addr] = fut
        try:
            conn = await self._connect(addr)
            self._conns[addr] = conn
            fut.set_result(conn)
            return conn
        except BaseException as e:
            fut.set_exception(e if isinstance(e, Exception) else ConnectionClosedError(str(e)))
            fut.exception()  # mark retrieved: nobody else may be waiting
            raise
        finally:
            self._connecting.pop(addr, None)

    async def _connect(self, addr: str) -> RemotingConnection:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise ConnectionClosedError(f"bad address {addr!r}: expected host:port")
        loop = asyncio.get_running_loop()
        proto = RemotingConnection(self, max_frame_size=self._max_frame_size)
        context = self._tls_context.get() if self._tls_context is not None else None
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: proto, host, int(port), ssl=context,
                                       server_hostname=host if context is not None else None),
                self._connect_timeout,
            )
        except (TimeoutError, OSError) as e:  # ssl.SSLError is an OSError
            if isinstance(e, ssl.SSLError):
                raise ConnectionClosedError(f"TLS handshake with {addr} failed: {e}") from None
            raise ConnectionClosedError(f"cannot connect to {addr}: {e or 'timed out'}") from None
        if self.credentials is not None:
            proto.signer = functools.partial(sign_request, self.credentials)
        return proto

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and wait for the response."""
        conn = await self.connection(addr)
        sent_at = time.monotonic()
        try:
            return await conn.invoke(cmd, timeout)
        except TimeoutError:
            if conn.last_received < sent_at and conn.is_open:
                log.warning("nothing from %s for %.3g s: closing the connection (the next request "
                            "opens another)", addr, timeout)
                conn.abort()
            raise

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.connection(addr)
        conn.invoke_oneway(cmd)

    async def close(self) -> None:
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        waits = [c.closed for c in conns if c.closed is not None]
        if waits:
            await asyncio.wait(waits, timeout=2)

    # -- Dispatcher ---------------------------------------------------------------------------
    def dispatch(self, cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f"request code {cmd.code} not supported by client"
            )
        return call_guarded(handler, cmd, conn)  # a bad request from a server answered as a server does

    def connection_lost(self, conn: RemotingConnection) -> None:
        for addr, c in list(self._conns.items()):
            if c is conn:
                del self._conns[addr]
