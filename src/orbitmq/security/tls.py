"""TLS settings and contexts, RocketMQ's modes: what every port and client is configured with.

``tls_server_mode``: ``disabled`` (plaintext only), ``permissive`` (TLS and plaintext on one port,
told apart by the first byte: 0x16 opens a TLS handshake record), ``enforcing`` (TLS only).
``tls_server_need_client_auth``: ``none``, ``optional``, ``require``. The client side:
:class:`ClientTls` (``tls_enable``, a trust file, a certificate and key for mutual TLS), also read
from ``ORBITMQ_TLS_*`` (:func:`client_tls_from_env`).

Certificates are files: :class:`ReloadingContext` stats them at each new connection (a few
microseconds) and builds a new ``SSLContext`` when one changed, so rotating a certificate needs
no restart. A rotation that cannot be loaded (a half-written file, a key that does not match)
keeps the previous context and logs one warning per change.

Pure: SSL contexts and settings, no socket. The listener that serves them is transport/tls.py.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
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
    "server_context",
    "client_context",
    "client_tls_from_env",
    "TLS_HANDSHAKE_BYTE",
    "file_stamps",
    "TLS_ENV",
]

log = logging.getLogger(__name__)

TLS_HANDSHAKE_BYTE = 0x16  # the content type of a TLS handshake record, a ClientHello's first byte
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


