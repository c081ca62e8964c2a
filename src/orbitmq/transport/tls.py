"""TLS on every port, in RocketMQ's three server modes, with certificates re-read when they change.

``tls_server_mode``:

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

Certificates are files: :class:`ReloadingContext` stats them at each new connection (a few
microseconds) and builds a new ``SSLContext`` when one changed, so rotating a certificate needs
no restart. A rotation that cannot be loaded (a half-written file, a key that does not match)
keeps the previous context and logs one warning per change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import os
import socket
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from orbitmq.errors import ClientError

__all__ = [
    "TlsServerMode",
    "TlsClientAuth",
    "ServerTls",
    "ClientTls",
    "TlsError",
    "ReloadingContext",
    "TlsListener",
    "listen",
    "server_context",
    "client_context",
    "client_tls_from_env",
    "TLS_HANDSHAKE_BYTE",
    "file_stamps",
    "TLS_ENV",
]

log = logging.getLogger(__name__)

TLS_HANDSHAKE_BYTE = 0x16  # the content type of a TLS handshake record, a ClientHello's first byte
FIRST_BYTE_WAIT_S = 10.0  # a connection that sends nothing this long after accept is closed
HANDSHAKE_TIMEOUT_S = 10.0
ADMISSIONS_MAX = 1024  # connections between accept and handshake done; past it new ones close
ACCEPT_RETRY_S = 1.0  # after accept fails (EMFILE...), as asyncio's own servers wait
BACKLOG = 1024  # RocketMQ's serverSocketBacklog
# The SDK's and CLI's environment (the servers read the same names as their config fields).
TLS_ENV = {"enable": "ORBITMQ_TLS_ENABLE",
           "trust_cert_path": "ORBITMQ_TLS_CLIENT_TRUST_CERT_PATH",
           "cert_path": "ORBITMQ_TLS_CLIENT_CERT_PATH",
           "key_path": "ORBITMQ_TLS_CLIENT_KEY_PATH",
           "check_hostname": "ORBITMQ_TLS_CLIENT_CHECK_HOSTNAME"}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class _LowerEnum(enum.StrEnum):
    """Lowercase values (RocketMQ's spelling) matched in any case: config values are upper-cased
    on the way in."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        if isinstance(value, str):
            for member in cls:
                if member.value == value.lower():
                    return member
        return None


class TlsServerMode(_LowerEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class TlsClientAuth(_LowerEnum):
    """Whether a TLS client must show a certificate signed by ``tls_server_trust_cert_path``."""

    NONE = "none"
    OPTIONAL = "optional"  # asked for; a client without one is let in, a bad one is refused
    REQUIRE = "require"


class TlsError(ClientError, ValueError):
    """TLS settings that cannot work (a missing file, a key that does not match its certificate);
    the message names the setting."""


@dataclasses.dataclass(frozen=True)
class ServerTls:
    """A server port's TLS settings (the ``tls_server_*`` config fields)."""

    mode: TlsServerMode = TlsServerMode.DISABLED
    cert_path: str = ""
    key_path: str = ""
    trust_cert_path: str = ""
    need_client_auth: TlsClientAuth = TlsClientAuth.NONE
    alpn: tuple[str, ...] = ()  # protocols offered in the handshake (gRPC's clients need h2)

    @classmethod
    def of(cls, cfg: Any) -> ServerTls:
        """The ``tls_server_*`` fields of a server config."""
        return cls(cfg.tls_server_mode, cfg.tls_server_cert_path, cfg.tls_server_key_path,
                   cfg.tls_server_trust_cert_path, cfg.tls_server_need_client_auth)

    @property
    def enabled(self) -> bool:
        return self.mode is not TlsServerMode.DISABLED

    def problem(self) -> tuple[str, str] | None:
        """(field, why) for settings that cannot serve TLS, else None."""
        if not self.enabled:
            return None
        if not self.cert_path:
            return "tls_server_cert_path", f"tls_server_mode {self.mode.value} needs a certificate"
        if not self.key_path:
            return "tls_server_key_path", f"tls_server_mode {self.mode.value} needs a private key"
        if self.need_client_auth is not TlsClientAuth.NONE and not self.trust_cert_path:
            return ("tls_server_trust_cert_path", f"tls_server_need_client_auth "
                    f"{self.need_client_auth.value} needs the CA that signs client certificates")
        return None


@dataclasses.dataclass(frozen=True)
class ClientTls:
    """TLS for a client's connections (``Producer(..., tls=ClientTls(...))``, the CLI's ``--tls``,
    a server's own connections).

    Args:
        trust_cert_path: PEM file of the CA(s) a server's certificate must chain to (empty: the
            system's roots).
        cert_path / key_path: this client's certificate and key, for servers that ask for one.
        check_hostname: the server's certificate must name the host or IP address connected to.
    """

    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if bool(self.cert_path) != bool(self.key_path):
            raise TlsError("a client certificate needs its key (tls_client_cert_path and "
                           "tls_client_key_path go together)")

    @classmethod
    def of(cls, cfg: Any) -> ClientTls | None:
        """From a server config's ``tls_enable`` / ``tls_client_*`` fields (None: plaintext)."""
        if not cfg.tls_enable:
            return None
        return cls(cfg.tls_client_trust_cert_path, cfg.tls_client_cert_path,
                   cfg.tls_client_key_path, cfg.tls_client_check_hostname)

    @classmethod
    def coerce(cls, tls: ClientTls | bool | None) -> ClientTls | None:
        """An SDK's ``tls=`` argument: a ClientTls, True (the system's roots), False (plaintext)
        or None (the environment, ``ORBITMQ_TLS_*``)."""
        if tls is None:
            return client_tls_from_env()
        if tls is True:
            return cls()
        if tls is False:
            return None
        if not isinstance(tls, ClientTls):
            raise ClientError("tls must be an orbitmq.ClientTls(...), True, False or None")
        return tls


def _env_flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise TlsError(f"{name}={raw!r} is not a boolean (true or false)")


def client_tls_from_env(env: Mapping[str, str] | None = None) -> ClientTls | None:
    """ClientTls from ``ORBITMQ_TLS_ENABLE`` and ``ORBITMQ_TLS_CLIENT_*`` (None when TLS is not
    enabled there)."""
    env = os.environ if env is None else env
    if not _env_flag(env, TLS_ENV["enable"], False):
        return None
    return ClientTls(env.get(TLS_ENV["trust_cert_path"], ""), env.get(TLS_ENV["cert_path"], ""),
                     env.get(TLS_ENV["key_path"], ""),
                     _env_flag(env, TLS_ENV["check_hostname"], True))


# ------------------------------------------------------------------------------------- contexts
def server_context(tls: ServerTls) -> ssl.SSLContext:
    """A server's SSLContext (TLS 1.2 and up).

    Raises:
        OSError, ssl.SSLError: a file cannot be read or does not fit.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(tls.cert_path, tls.key_path)
    if tls.alpn:
        ctx.set_alpn_protocols(list(tls.alpn))
    if tls.need_client_auth is not TlsClientAuth.NONE:
        ctx.load_verify_locations(cafile=tls.trust_cert_path)
        ctx.verify_mode = (ssl.CERT_REQUIRED if tls.need_client_auth is TlsClientAuth.REQUIRE
                           else ssl.CERT_OPTIONAL)
    return ctx


def client_context(tls: ClientTls) -> ssl.SSLContext:
    """A client's SSLContext: the server's certificate verified against ``trust_cert_path``
    (or the system's roots).

    Raises:
        OSError, ssl.SSLError: a file cannot be read or does not fit.
    """
    ctx = ssl.create_default_context(cafile=tls.trust_cert_path or None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = tls.check_hostname
    if tls.cert_path:
        ctx.load_cert_chain(tls.cert_path, tls.key_path)
    return ctx


def file_stamps(paths: tuple[str, ...]) -> tuple[tuple[int, int, int], ...]:
    """Each file's (mtime, size, inode), or -1s when it cannot be read: what tells a rotation."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


class ReloadingContext:
    """An SSLContext built from files and built again when one of them changes.

    ``get`` is called once per new connection: it stats the files and, when one changed since
    the last build, builds a new context. A first build that fails raises :class:`TlsError`;
    a later one keeps the context that works and logs a warning once per change.
    """

    def __init__(self, build: Callable[[], ssl.SSLContext], paths: tuple[str, ...],
                 what: str) -> None:
        self._build = build
        self._paths = tuple(p for p in paths if p)
        self._what = what
        self._stamp = file_stamps(self._paths)
        self._ctx = self._first()
        self.reloads = 0  # contexts built after the first (tests, logs)

    def _first(self) -> ssl.SSLContext:
        try:
            return self._build()
        except (OSError, ssl.SSLError, ValueError) as e:
            raise TlsError(f"{self._what}: cannot load {', '.join(self._paths)}: "
                           f"{getattr(e, 'strerror', None) or e}") from None

    def get(self) -> ssl.SSLContext:
        stamp = file_stamps(self._paths)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._ctx = self._build()
            except (OSError, ssl.SSLError, ValueError) as e:
                log.warning("%s: the changed certificate files cannot be loaded (%s); still "
                            "using the previous ones", self._what, e)
            else:
                self.reloads += 1
                log.info("%s: certificates reloaded from %s", self._what, ", ".join(self._paths))
        return self._ctx

    @classmethod
    def for_server(cls, tls: ServerTls, what: str) -> ReloadingContext:
        return cls(lambda: server_context(tls),
                   (tls.cert_path, tls.key_path, tls.trust_cert_path), what)

    @classmethod
    def for_client(cls, tls: ClientTls, what: str = "TLS client") -> ReloadingContext:
        return cls(lambda: client_context(tls), (tls.trust_cert_path, tls.cert_path,
                                                 tls.key_path), what)


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
