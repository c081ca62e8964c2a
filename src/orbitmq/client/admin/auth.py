"""The admin client's users and ACLs: RocketMQ 5's ACL 2.0 administration (codes 3001-3010).

Users and rules are kept by every master broker (a slave copies its master's) and by a name
server that has a users file (``auth_config_path``). So a change goes, by default, to every master
broker the name servers know and to every name server; a name server without a users file answers
REQUEST_CODE_NOT_SUPPORTED and is passed over quietly. ``broker=`` (a broker name or host:port)
sends it to that one server alone. Reads ask one server: ``broker``, else the first master by
name, else the first name server that keeps users.

Every argument is checked here, with the parsers the servers use (security/model.py), before
anything is sent. The answers are :class:`~orbitmq.security.model.User` (its ``password`` empty:
servers never send it back) and :class:`~orbitmq.security.model.Acl`. These calls need a Super
user's credentials on the Admin when the servers have authentication on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from orbitmq.client.instance import check_response
from orbitmq.errors import BrokerError, ClientError, RemoteProtocolError, broker_error
from orbitmq.protocol.bodies import loads_lenient
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import AuthRequestCode as Code
from orbitmq.security.model import (
    Acl,
    Decision,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    check_username,
    parse_actions,
    parse_source_ips,
    parse_subject,
    subject_of,
)

if TYPE_CHECKING:
    from orbitmq.client.admin.core import AdminCore

__all__ = ["AuthAdminMixin", "BlockingAuthAdminMixin", "build_acl", "FILTER_MAX_CHARS"]

FILTER_MAX_CHARS = 256  # the servers refuse longer list filters

Header = dict[str, str]
Strings = str | Iterable[str]


def _checked(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A model parser's result; its refusal as a ClientError (the caller's input, not a peer's)."""
    try:
        return fn(*args, **kwargs)
    except RemoteProtocolError as e:
        raise ClientError(str(e)) from None


def _names(values: Strings | None) -> list[str]:
    if values is None:
        return []
    items = values.split(",") if isinstance(values, str) else list(values)
    return [str(v).strip() for v in items if str(v).strip()]


def _subject(subject: str) -> str:
    """``User:NAME`` for ``User:NAME`` or a bare ``NAME``."""
    return subject_of(parse_subject_arg(subject))


def _filter(value: str, what: str) -> str:
    if len(value) > FILTER_MAX_CHARS:
        raise ClientError(f"{what} longer than {FILTER_MAX_CHARS} characters")
    return value


def build_acl(subject: str, resources: Strings, actions: Strings, *,
              decision: str | Decision = Decision.ALLOW, source_ips: Strings | None = None,
              policy_type: str | PolicyType = PolicyType.CUSTOM) -> Acl:
    """The ACL mqadmin's createAcl builds: one entry per resource, each with ``actions``,
    ``decision`` and ``source_ips`` (CIDR networks; none: from anywhere).

    Raises:
        ClientError: a subject that is not ``User:NAME``, no resource, an unknown action or
            decision, a network that does not parse.
    """
    username = parse_subject_arg(subject)
    names = _names(resources)
    if not names:
        raise ClientError("an ACL needs at least one resource (Topic:NAME, Group:NAME, "
                          "Cluster:NAME, prefixed NAME*, or *)")
    parsed = [_checked(Resource.parse, r, "resource") for r in names]
    acts = _checked(parse_actions, _names(actions), "actions")
    dec = decision if isinstance(decision, Decision) else _checked(Decision.parse, decision,
                                                                   "decision")
    ips = _checked(parse_source_ips, _names(source_ips) or None, "source ips")
    ptype = policy_type if isinstance(policy_type, PolicyType) else _checked(
        PolicyType.parse, policy_type, "policy type")
    entries = tuple(PolicyEntry(r, acts, dec, ips) for r in dict.fromkeys(parsed))
    if ptype is PolicyType.CUSTOM:
        return Acl(username, entries)
    return Acl(username, (), entries)


def parse_subject_arg(subject: str) -> str:
    """The username of ``User:NAME`` (or of a bare ``NAME``); ClientError otherwise."""
    if not isinstance(subject, str) or not subject.strip():
        raise ClientError("subject must be User:NAME")
    text = subject.strip()
    return str(_checked(parse_subject, text if ":" in text else subject_of(text)))


def _user_of(value: object) -> User:
    """A UserInfo answer (no password in it) as a User whose password is empty."""
    if not isinstance(value, dict):
        raise RemoteProtocolError("UserInfo answer is not an object")
    name = check_username(value.get("username"), "UserInfo.username")
    user_type = UserType.parse(value.get("userType") or "Normal", "UserInfo.userType")
    status = UserStatus.parse(value.get("userStatus") or "enable", "UserInfo.userStatus")
    return User(name, "", user_type, status)


def _json(resp: RemotingCommand) -> object:
    if not resp.body:
        raise RemoteProtocolError(f"answer to request {resp.opaque} carries no body")
    return loads_lenient(resp.body)


class AuthAdminMixin:
    """User and ACL coroutines of AsyncAdmin (see the module docstring)."""

    if TYPE_CHECKING:  # what the mixin uses of AsyncAdmin: its core
        _core: AdminCore

    # -- plumbing ------------------------------------------------------------------------------
    async def _auth_call(self, addr: str, code: int, header: Header,
                         body: bytes | None = None) -> RemotingCommand:
        cmd = RemotingCommand.request(code, header, body or b"")
        return await self._core.invoke(addr, cmd)

    async def _auth_targets(self, broker: str | None, cluster: str | None) -> tuple[
            list[str], list[str]]:
        """(broker addresses, name server addresses) a change or a read goes to."""
        if broker is not None:
            return [await self._core.broker_address(broker)], []
        masters = await self._core.masters(cluster)
        return [masters[name] for name in sorted(masters)], list(self._core.instance.namesrv_addrs)

    async def _auth_write(self, code: int, header: Header, body: bytes | None,
                          broker: str | None, cluster: str | None) -> list[str]:
        """Send one change to every target; the addresses that took it.

        Raises:
            ClientError: no server to send it to.
            BrokerError (AccessDeniedError for NO_PERMISSION): a server refused; its remark is
                prefixed with that server's address and names those that did take the change.
        """
        brokers, namesrvs = await self._auth_targets(broker, cluster)
        if not brokers and not namesrvs:
            raise ClientError("no master broker and no name server to send the change to")
        targets = [(a, False) for a in brokers] + [(a, True) for a in namesrvs]
        answers = await asyncio.gather(*(self._auth_call(a, code, header, body)
                                         for a, _ in targets), return_exceptions=True)
        done: list[str] = []
        failures: list[tuple[str, BaseException]] = []
        for (addr, is_ns), answer in zip(targets, answers, strict=True):
            if isinstance(answer, BaseException):
                failures.append((addr, answer))
            elif answer.code == ResponseCode.SUCCESS:
                done.append(addr)
            elif not (is_ns and answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
                failures.append((addr, broker_error(answer.code, answer.remark)))
        if not failures:
            if not done:
                raise ClientError("no server keeps users: no master broker, and no name server "
                                  "with a users file")
            return sorted(done)
        addr, first = failures[0]
        if isinstance(first, BrokerError):
            taken = f"; taken by {', '.join(sorted(done))}" if done else ""
            raise broker_error(first.code, f"{addr}: {first.remark}{taken}") from None
        raise first

    async def _auth_read(self, code: int, header: Header, broker: str | None) -> object:
        """One server's answer: ``broker``, else the first master, else a name server."""
        brokers, namesrvs = await self._auth_targets(broker, None)
        if brokers:
            return _json(check_response(await self._auth_call(brokers[0], code, header)))
        for addr in namesrvs:
            resp = await self._auth_call(addr, code, header)
            if resp.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                return _json(check_response(resp))
        raise ClientError("no server keeps users: no master broker, and no name server with a "
                          "users file")

    # -- users ---------------------------------------------------------------------------------
    async def create_user(self, username: str, password: str, *,
                          user_type: str | UserType = UserType.NORMAL,
                          status: str | UserStatus = UserStatus.ENABLE,
                          broker: str | None = None, cluster: str | None = None) -> list[str]:
        """Create a user (``Super`` or ``Normal``; ``enable`` or ``disable``) whose password is
        the secret key its clients sign with. Returns the addresses that now have it.

        Raises:
            ClientError: a bad name, a password under 6 or over 128 characters, bad type/status.
            BrokerError: a server refused (``already exists``, ...); AccessDeniedError when the
                credentials are not a Super user's.
        """
        info = {"username": username, "password": password,
                "userType": user_type.value if isinstance(user_type, UserType) else user_type,
                "userStatus": status.value if isinstance(status, UserStatus) else status}
        user: User = _checked(User.from_dict, info, username=username)
        return await self._auth_write(Code.AUTH_CREATE_USER, {"username": user.username},
                                      orjson.dumps(user.to_dict()), broker, cluster)

    async def update_user(self, username: str, *, password: str | None = None,
                          user_type: str | UserType | None = None,
                          status: str | UserStatus | None = None,
                          broker: str | None = None, cluster: str | None = None) -> list[str]:
        """Change a user's password, type or status (what is None stays as it is)."""
        name = _checked(check_username, username)
        info: dict[str, str] = {"username": name}
        if password is not None:
            info["password"] = password
        if user_type is not None:
            info["userType"] = user_type.value if isinstance(user_type, UserType) else user_type
        if status is not None:
            info["userStatus"] = status.value if isinstance(status, UserStatus) else status
        if len(info) == 1:
            raise ClientError("update_user: give a password, a user type or a status")
        # checked as the server will: against a stand-in for the fields not given
        _checked(User.from_dict, info, base=User(name, "x" * 6), username=name)
        return await self._auth_write(Code.AUTH_UPDATE_USER, {"username": name},
                                      orjson.dumps(info), broker, cluster)

    async def delete_user(self, username: str, *, broker: str | None = None,
                          cluster: str | None = None) -> list[str]:
        """Delete a user (and so what its rules allowed). A user cannot delete itself."""
        name = _checked(check_username, username)
        return await self._auth_write(Code.AUTH_DELETE_USER, {"username": name}, None,
                                      broker, cluster)

    async def get_user(self, username: str, *, broker: str | None = None) -> User:
        """The user (its ``password`` empty). BrokerError when there is no such user."""
        name = _checked(check_username, username)
        return _user_of(await self._auth_read(Code.AUTH_GET_USER, {"username": name}, broker))

    async def list_users(self, filter: str = "", *, broker: str | None = None) -> list[User]:
        """Users whose name contains ``filter`` (all when empty), by name."""
        answer = await self._auth_read(Code.AUTH_LIST_USER,
                                       {"filter": _filter(filter, "filter")}, broker)
        if not isinstance(answer, list):
            raise RemoteProtocolError("user list answer is not a list")
        return sorted((_user_of(u) for u in answer), key=lambda u: u.username)

    # -- ACLs ----------------------------------------------------------------------------------
    async def create_acl(self, subject: str, resources: Strings, actions: Strings, *,
                         decision: str | Decision = Decision.ALLOW,
                         source_ips: Strings | None = None,
                         broker: str | None = None, cluster: str | None = None) -> list[str]:
        """Give ``subject`` (``User:NAME``, the user must exist) one rule per resource
        (``Topic:orders``, ``Group:g*``, ``Cluster:C``, ``*``): ``decision`` (Allow/Deny) for
        ``actions`` (Pub, Sub, Create, Update, Delete, Get, List, All) from ``source_ips``.
        A rule for a resource the subject has a rule for already replaces it. Returns the
        addresses that took it."""
        return await self.put_acl(build_acl(subject, resources, actions, decision=decision,
                                            source_ips=source_ips),
                                  broker=broker, cluster=cluster)

    async def update_acl(self, subject: str, resources: Strings, actions: Strings, *,
                         decision: str | Decision = Decision.ALLOW,
                         source_ips: Strings | None = None,
                         broker: str | None = None, cluster: str | None = None) -> list[str]:
        """As :meth:`create_acl`, for a subject that has an ACL already."""
        return await self.put_acl(build_acl(subject, resources, actions, decision=decision,
                                            source_ips=source_ips),
                                  create=False, broker=broker, cluster=cluster)

    async def put_acl(self, acl: Acl, *, create: bool = True, broker: str | None = None,
                      cluster: str | None = None) -> list[str]:
        """Send a whole :class:`Acl` (AUTH_CREATE_ACL, or AUTH_UPDATE_ACL when not
        ``create``); its entries are added to the subject's."""
        if not isinstance(acl, Acl) or not acl.all_entries():
            raise ClientError("put_acl needs an Acl with at least one entry")
        code = Code.AUTH_CREATE_ACL if create else Code.AUTH_UPDATE_ACL
        return await self._auth_write(code, {"subject": acl.subject},
                                      orjson.dumps(acl.to_dict()), broker, cluster)

    async def delete_acl(self, subject: str, resources: Strings | None = None, *,
                         policy_type: str | PolicyType | None = None,
                         broker: str | None = None, cluster: str | None = None) -> list[str]:
        """Remove ``subject``'s rules for ``resources`` (all its rules when None), of one
        policy type (Custom or Default; both when None)."""
        header: Header = {"subject": _subject(subject)}
        names = _names(resources)
        if names:
            header["resource"] = ",".join(str(_checked(Resource.parse, r, "resource"))
                                          for r in names)
        if policy_type is not None:
            header["policyType"] = (policy_type if isinstance(policy_type, PolicyType) else
                                    _checked(PolicyType.parse, policy_type, "policy type")).value
        return await self._auth_write(Code.AUTH_DELETE_ACL, header, None, broker, cluster)

    async def get_acl(self, subject: str, *, broker: str | None = None) -> Acl:
        """``subject``'s rules. BrokerError when it has none."""
        answer = await self._auth_read(Code.AUTH_GET_ACL, {"subject": _subject(subject)}, broker)
        return Acl.from_dict(answer)

    async def list_acls(self, subject_filter: str = "", resource_filter: str = "", *,
                        broker: str | None = None) -> list[Acl]:
        """ACLs whose subject contains ``subject_filter`` and that have a rule whose resource
        contains ``resource_filter`` (empty filters: all), by subject."""
        header = {"subjectFilter": _filter(subject_filter, "subject filter"),
                  "resourceFilter": _filter(resource_filter, "resource filter")}
        answer = await self._auth_read(Code.AUTH_LIST_ACL, header, broker)
        if not isinstance(answer, list):
            raise RemoteProtocolError("ACL list answer is not a list")
        return sorted((Acl.from_dict(a) for a in answer), key=lambda a: a.username)


class BlockingAuthAdminMixin:
    """The blocking Admin's user and ACL calls (the coroutines of AuthAdminMixin)."""

    _client: Any
    _call: Any  # BlockingClient's: runs a coroutine on the client's loop and waits

    def create_user(self, username: str, password: str, **options: Any) -> list[str]:
        return self._call(self._client.create_user(username, password, **options))

    def update_user(self, username: str, **options: Any) -> list[str]:
        return self._call(self._client.update_user(username, **options))

    def delete_user(self, username: str, **options: Any) -> list[str]:
        return self._call(self._client.delete_user(username, **options))

    def get_user(self, username: str, *, broker: str | None = None) -> User:
        return self._call(self._client.get_user(username, broker=broker))

    def list_users(self, filter: str = "", *, broker: str | None = None) -> list[User]:
        return self._call(self._client.list_users(filter, broker=broker))

    def create_acl(self, subject: str, resources: Strings, actions: Strings,
                   **options: Any) -> list[str]:
        return self._call(self._client.create_acl(subject, resources, actions, **options))

    def update_acl(self, subject: str, resources: Strings, actions: Strings,
                   **options: Any) -> list[str]:
        return self._call(self._client.update_acl(subject, resources, actions, **options))

    def put_acl(self, acl: Acl, **options: Any) -> list[str]:
        return self._call(self._client.put_acl(acl, **options))

    def delete_acl(self, subject: str, resources: Strings | None = None,
                   **options: Any) -> list[str]:
        return self._call(self._client.delete_acl(subject, resources, **options))

    def get_acl(self, subject: str, *, broker: str | None = None) -> Acl:
        return self._call(self._client.get_acl(subject, broker=broker))

    def list_acls(self, subject_filter: str = "", resource_filter: str = "", *,
                  broker: str | None = None) -> list[Acl]:
        return self._call(self._client.list_acls(subject_filter, resource_filter, broker=broker))

