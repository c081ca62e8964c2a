"""A server's access control, built from its settings: the registry, the guard, the admin
handlers and the credentials it signs its own requests with.

Shared by the broker and the name server (``standalone`` gives both one registry). The init user
(``init_authentication_user``) is created, as a Super user, when the registry has no user at all;
the inner credentials (``inner_client_authentication_credentials``, else the init user's) are
what this server signs with, and every server accepts its own inner credentials as a Super user
without saving them, so servers configured with the same inner credentials trust each other.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from typing import Protocol

from orbitmq.errors import ClientError
from orbitmq.security.admin_handlers import AuthAdminHandlers
from orbitmq.security.audit import AuditLog
from orbitmq.security.guard import AccessGuard, AccessSettings
from orbitmq.security.model import User, UserType
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.settings import (
    AuthenticationStrategy,
    parse_init_user,
    parse_inner_credentials,
    parse_whitelist,
)
from orbitmq.security.signature import Credentials

__all__ = ["ServerAccess", "AccessConfig", "build_server_access", "check_exposure", "is_loopback"]

log = logging.getLogger(__name__)


class AccessConfig(Protocol):
    """The access fields of NamesrvConfig and BrokerConfig (config/shared.py's access_settings)."""

    @property
    def authentication_enabled(self) -> bool: ...

    @property
    def authorization_enabled(self) -> bool: ...

    @property
    def init_authentication_user(self) -> str: ...

    @property
    def inner_client_authentication_credentials(self) -> str: ...

    @property
    def authentication_whitelist(self) -> str: ...

    @property
    def authentication_strategy(self) -> AuthenticationStrategy: ...

    @property
    def stateful_authentication_cache_expired_second(self) -> int: ...

    @property
    def audit_allowed(self) -> bool: ...

    @property
    def allow_anonymous(self) -> bool: ...


@dataclasses.dataclass
class ServerAccess:
    registry: AuthRegistry
    guard: AccessGuard
    admin: AuthAdminHandlers
    inner: Credentials | None  # what this server signs its own requests with
    # init_authentication_user: (username, password); never in a repr
    init_user: tuple[str, str] | None = dataclasses.field(default=None, repr=False)
    authentication_enabled: bool = False

    def load(self) -> None:
        """Read the users and ACLs (once: RegistryStore.load), then create the init user when
        there is no user at all. A name server calls it when built; a broker when it loads its
        tables (its metadata store is open then).

        Raises:
            StoreError: the users cannot be read, or the init user cannot be saved.
        """
        registry = self.registry
        registry.load()
        init = self.init_user
        if init is not None and len(registry) == 0:
            registry.ensure_user(init[0], init[1], UserType.SUPER)
            registry.save()
            log.info("init user %s created (Super)", init[0])
        if self.authentication_enabled and len(registry) == 0 and self.inner is None:
            log.warning("authentication is on but there is no user: set "
                        "init_authentication_user (docs/security.md)")


def build_server_access(cfg: AccessConfig, *, cluster_name: str,
                        registry: AuthRegistry) -> ServerAccess:
    """The server's access control over ``registry`` (its own, or another server's: standalone),
    which :meth:`ServerAccess.load` reads.

    Raises:
        ClientError: authorization without authentication.
    """
    if cfg.authorization_enabled and not cfg.authentication_enabled:
        raise ClientError("authorization_enabled needs authentication_enabled: rules are about "
                          "users, and without authentication nobody is a user")
    init = parse_init_user(cfg.init_authentication_user)
    inner = parse_inner_credentials(cfg.inner_client_authentication_credentials)
    if inner is None and init is not None:
        inner = Credentials(init[0], init[1])
    if inner is not None:
        registry.add_builtin(User(inner.access_key, inner.secret_key, UserType.SUPER))
    stateful = cfg.authentication_strategy == AuthenticationStrategy.STATEFUL
    settings = AccessSettings(cfg.authentication_enabled, cfg.authorization_enabled,
                              parse_whitelist(cfg.authentication_whitelist), cluster_name,
                              cfg.stateful_authentication_cache_expired_second * 1000
                              if stateful else 0)
    guard = AccessGuard(settings, registry, AuditLog(log_allowed=cfg.audit_allowed))
    return ServerAccess(registry, guard, AuthAdminHandlers(registry), inner, init,
                        cfg.authentication_enabled)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(cfg: AccessConfig, listen_host: str, what: str) -> None:
    """Refuses (ClientError, one line naming the setting) a server that listens beyond loopback
    with authentication off, unless ``allow_anonymous`` says so (then a warning, every start)."""
    if cfg.authentication_enabled or is_loopback(listen_host):
        return
    if cfg.allow_anonymous:
        log.warning("%s listens on %s with authentication off (allow_anonymous = true): anyone "
                    "who reaches it may read, write and delete everything", what, listen_host)
        return
    raise ClientError(
        f"{what} would listen on {listen_host}, beyond loopback, with authentication_enabled = "
        "false: turn it on (docs/security.md) or set allow_anonymous = true")
