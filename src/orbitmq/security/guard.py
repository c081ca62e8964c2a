"""The check every request passes before a handler sees it: who sent it, and may they.

:class:`AccessGuard` is given each decoded request and the peer's address by the transport
(``RemotingServer.set_guard``). With authentication on it finds the request's user by its
``AccessKey``, checks the ``Signature`` against that user's secret, and refuses with
NO_PERMISSION (16) and a remark that says which check failed: no credentials, unsigned, unknown
user, disabled user, bad signature. Then it authorizes what the request's code needs
(security/access_table.py): Super-only codes need a Super user whenever authentication is on;
resources and actions are checked against the user's ACL when authorization is on. A code the
table does not know is refused. The request then carries its :class:`Principal` (``cmd.principal``)
for the handlers that authorize what they find in the store (``authorize_found``).

Decisions (RocketMQ 5's model, with Deny first): a Super user may do everything; otherwise an
entry applies when its resource matches (literal, prefix or any), one of the request's acceptable
actions is in its actions (``All`` is every action) and the peer is in one of its source networks
(any when it names none). A Deny that applies refuses; else an Allow that applies allows; else
the request is refused (nothing allows it).

Under the stateful strategy (``stateful_ms``; security/stateful.py) a remoting request whose
connection remembers its user, under the registry's current version and unexpired, is not
hashed again; everything else about it is checked as under the stateless one.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from orbitmq.errors import AccessDeniedError, RemoteProtocolError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import (
    ANY_USER,
    IN_HANDLER,
    SUPER,
    Permission,
    needs,
)
from orbitmq.security.audit import AuditLog
from orbitmq.security.model import Decision, User
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.signature import (
    ACCESS_KEY,
    SIGNATURE,
    GrpcAuthorization,
    grpc_signature_ok,
    remoting_signature_ok,
)
from orbitmq.security.stateful import remember, remembers, session_of

__all__ = ["AccessGuard", "AccessSettings", "Principal"]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclasses.dataclass(frozen=True)
class Principal:
    """The user a request was authenticated as, and where it came from."""

    username: str
    is_super: bool
    source: str


@dataclasses.dataclass(frozen=True)
class AccessSettings:
    """What a server enforces (the ``authentication_*`` / ``authorization_*`` settings)."""

    authentication_enabled: bool = False
    authorization_enabled: bool = False
    whitelist: frozenset[int] = frozenset()
    cluster_name: str = ""  # what Cluster resources of this server's requests name
    stateful_ms: int = 0  # the stateful strategy's trust of a connection, ms; 0: stateless


def _ip(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.removeprefix("ipv4:").removeprefix("ipv6:"))
    except ValueError:
        return None


class AccessGuard:
    """Authenticates and authorizes requests (see the module docstring)."""

    def __init__(self, settings: AccessSettings, registry: AuthRegistry,
                 audit: AuditLog | None = None) -> None:
        if settings.authorization_enabled and not settings.authentication_enabled:
            raise ValueError("authorization_enabled needs authentication_enabled: rules are "
                             "about users, and without authentication nobody is a user")
        self.settings = settings
        self.registry = registry
        self.audit = audit if audit is not None else AuditLog()
        self._admitted: list[Callable[[Principal, RemotingCommand, int], None]] = []

    def on_admitted(self, listener: Callable[[Principal, RemotingCommand, int], None]) -> None:
        """``listener(principal, cmd, version)`` after each remoting request the checks let
        through (not those of whitelisted codes), ``version`` the registry's when the checks
        began: the broker's native fast path learns from it which sends it may take itself
        (broker/fast_path.py), and drops what it learnt under an older version."""
        self._admitted.append(listener)

    @property
    def enabled(self) -> bool:
        return self.settings.authentication_enabled

    # -- remoting ------------------------------------------------------------------------------
    def check(self, cmd: RemotingCommand, peer: str,
              attributes: dict[str, Any] | None = None) -> RemotingCommand | None:
        """None when ``cmd`` may go on to its handler (``cmd.principal`` set), else the
        NO_PERMISSION answer to send instead. ``attributes``: the connection's, where the
        stateful strategy keeps what it remembers (none: every request is checked)."""
        try:
            self.admit(cmd, peer, attributes)
        except AccessDeniedError as e:
            return cmd.response(ResponseCode.NO_PERMISSION, e.remark)
        except RemoteProtocolError as e:  # a resolver found the request malformed
            self.audit.denied("malformed", user=getattr(cmd.principal, "username", "-"),
                              source=peer, code=cmd.code, resource="-", remark=str(e))
            return cmd.response(ResponseCode.NO_PERMISSION,
                                f"access check failed, the request is malformed: {e}")
        return None

    def admit(self, cmd: RemotingCommand, peer: str,
              attributes: dict[str, Any] | None = None) -> Principal | None:
        """The checks of ``check``, raising AccessDeniedError (or RemoteProtocolError from a
        malformed request) instead of answering."""
        if not self.settings.authentication_enabled or cmd.code in self.settings.whitelist:
            return None
        version = self.registry.version
        principal = self.authenticate_remoting(cmd, peer, attributes)
        cmd.principal = principal
        self.authorize_code(principal, cmd)
        for listener in self._admitted:
            listener(principal, cmd, version)
        return principal

    def authenticate_remoting(self, cmd: RemotingCommand, peer: str,
                              attributes: dict[str, Any] | None = None) -> Principal:
        fields = cmd.ext_fields
        access_key = fields.get(ACCESS_KEY)
        if not access_key:
            self._fail("no_credentials", None, peer, cmd.code,
                       "no credentials: the request carries no AccessKey (authentication is on)")
        user = self._user(access_key, peer, cmd.code)
        if not fields.get(SIGNATURE):
            self._fail("unsigned", access_key, peer, cmd.code,
                       f"the request of user {access_key} carries no Signature")
        stateful_ms = self.settings.stateful_ms if attributes is not None else 0
        if stateful_ms:
            assert attributes is not None
            session, version = session_of(attributes), self.registry.version
            now_ms = int(time.time() * 1000)
            if remembers(session, access_key, version, now_ms):
                return Principal(user.username, user.is_super, peer)
        if not remoting_signature_ok(fields, cmd.body, user.password):
            self._fail("bad_signature", access_key, peer, cmd.code,
                       f"the Signature of user {access_key}'s request does not match")
        if stateful_ms:
            remember(session, access_key, version, now_ms + stateful_ms)
        return Principal(user.username, user.is_super, peer)

    # -- gRPC ----------------------------------------------------------------------------------
    def authenticate_grpc(self, auth: GrpcAuthorization, date_time: str, peer: str,
                          what: int = 0) -> Principal:
        """The principal of a 5.x request's parsed authorization header; AccessDeniedError
        when it does not hold (``what``: a number for the audit line, e.g. the RPC's)."""
        user = self._user(auth.access_key, peer, what)
        if not grpc_signature_ok(auth, date_time, user.password):
            self._fail("bad_signature", auth.access_key, peer, what,
                       f"the signature of user {auth.access_key}'s request does not match")
        return Principal(user.username, user.is_super, peer)

    def fail_grpc(self, reason: str, peer: str, remark: str, what: int = 0) -> NoReturn:
        """Records and raises an authentication failure found by the gRPC front."""
        self._fail(reason, None, peer, what, remark)

    # -- authorization -------------------------------------------------------------------------
    def authorize_code(self, principal: Principal, cmd: RemotingCommand) -> None:
        """What ``cmd``'s code needs (the access table), for ``principal``."""
        need = needs(cmd.code)
        if need is None:
            self._deny("unknown_code", principal, cmd.code, "-",
                       f"request code {cmd.code} is in no access rule: refused")
        if need is SUPER:
            if not principal.is_super:
                self._deny("super_only", principal, cmd.code, "-",
                           f"request code {cmd.code} needs a Super user; "
                           f"{principal.username} is Normal")
        elif need is ANY_USER or need is IN_HANDLER:
            pass
        else:
            assert callable(need)
            self.authorize(principal, need(cmd), cmd.code)
        self.audit.allowed(user=principal.username, source=principal.source, code=cmd.code)

    def authorize(self, principal: Principal, permissions: Sequence[Permission],
                  code: int) -> None:
        """AccessDeniedError unless ``principal`` may do every one of ``permissions``."""
        if principal.is_super or not self.settings.authorization_enabled:
            return
        acl = self.registry.acl(principal.username)
        entries = acl.all_entries() if acl is not None else ()
        source = _ip(principal.source)
        for perm in permissions:
            name = perm.name or self.settings.cluster_name
            allowed = False
            for entry in entries:
                if not any(entry.applies(perm.rtype, name, a, source) for a in perm.actions):
                    continue
                if entry.decision is Decision.DENY:
                    self._deny("deny_rule", principal, code, f"{perm.rtype.value}:{name}",
                               f"user {principal.username} is denied {perm}"
                               f" by rule {entry.resource}")
                allowed = True
            if not allowed:
                self._deny("no_rule", principal, code, f"{perm.rtype.value}:{name}",
                           f"no rule allows user {principal.username} {perm}")

    def authorize_found(self, cmd: RemotingCommand, permission: Permission) -> None:
        """For IN_HANDLER codes: ``permission`` on what the handler found, for the request's
        principal (nothing to check when authentication is off or the code is whitelisted)."""
        principal = cmd.principal
        if isinstance(principal, Principal):
            self.authorize(principal, (permission,), cmd.code)

    # -- outcomes ------------------------------------------------------------------------------
    def _user(self, access_key: str, peer: str, code: int) -> User:
        user = self.registry.user(access_key)
        if user is None:
            return self._fail("unknown_user", access_key, peer, code, f"no user {access_key}")
        if not user.enabled:
            self._fail("disabled_user", access_key, peer, code, f"user {access_key} is disabled")
        return user

    def _fail(self, reason: str, user: str | None, peer: str, code: int, remark: str) -> NoReturn:
        self.audit.authentication_failed(reason, user=user, source=peer, code=code, remark=remark)
        raise AccessDeniedError(f"authentication failed: {remark}", reason)

    def _deny(self, reason: str, principal: Principal, code: int, resource: str,
              remark: str) -> NoReturn:
        self.audit.denied(reason, user=principal.username, source=principal.source, code=code,
                          resource=resource, remark=remark)
        raise AccessDeniedError(f"access denied: {remark}", reason)

