"""The user and ACL administration requests, RocketMQ 5's codes 3001-3010, and a slave's copy.

Headers and bodies as RocketMQ 5 has them: users by ``username`` with a UserInfo body
(``username``, ``password``, ``userType`` Super/Normal, ``userStatus`` enable/disable), ACLs by
``subject`` (``User:NAME``) with an AclInfo body (``subject``, ``policies``: ``policyType``,
``entries``: ``resource``, ``actions``, ``sourceIps``, ``decision``). Answers that people read
(get and list users) leave the password out; GET_AUTH_METADATA (OrbitMQ, for a slave's copy of
its master's table) carries everything. Every change is saved (0600) before it is answered; the
access table lets Super users alone send any of these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson

from orbitmq.errors import AccessDeniedError, RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import loads_lenient
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import AuthRequestCode
from orbitmq.security.guard import Principal
from orbitmq.security.model import (
    Acl,
    PolicyType,
    Resource,
    User,
    check_username,
    parse_subject,
)
from orbitmq.security.registry import AuthRegistry

__all__ = ["AuthAdminHandlers"]

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, object], RemotingCommand]
FILTER_MAX_CHARS = 256


def _body(cmd: RemotingCommand) -> object:
    if not cmd.body:
        raise RemoteProtocolError(f"request code {cmd.code} needs a JSON body")
    return loads_lenient(cmd.body)


def _filter(cmd: RemotingCommand, name: str) -> str:
    value = cmd.ext_fields.get(name) or ""
    if len(value) > FILTER_MAX_CHARS:
        raise RemoteProtocolError(f"{name} longer than {FILTER_MAX_CHARS} characters")
    return value


class AuthAdminHandlers:
    """Handlers of 3001-3010 and GET_AUTH_METADATA over one registry."""

    def __init__(self, registry: AuthRegistry) -> None:
        self.registry = registry

    def table(self) -> dict[int, Handler]:
        c = AuthRequestCode
        return {
            c.AUTH_CREATE_USER: self.create_user, c.AUTH_UPDATE_USER: self.update_user,
            c.AUTH_DELETE_USER: self.delete_user, c.AUTH_GET_USER: self.get_user,
            c.AUTH_LIST_USER: self.list_users, c.AUTH_CREATE_ACL: self.create_acl,
            c.AUTH_UPDATE_ACL: self.update_acl, c.AUTH_DELETE_ACL: self.delete_acl,
            c.AUTH_GET_ACL: self.get_acl, c.AUTH_LIST_ACL: self.list_acls,
            c.GET_AUTH_METADATA: self.get_metadata,
        }

    def _saved(self, cmd: RemotingCommand, what: str) -> RemotingCommand:
        try:
            self.registry.save()
        except StoreError as e:
            log.error("users and ACLs changed (%s) but not saved: %s", what, e)
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"{what}: in effect, but the users could not be saved "
                                "(the server log says why); it is tried again at the next change")
        log.info("auth change saved: %s", what)
        return cmd.response(ResponseCode.SUCCESS)

    # -- users ---------------------------------------------------------------------------------
    def create_user(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = check_username(cmd.ext_fields.get("username"))
        user = User.from_dict(_body(cmd), username=name)
        self.registry.put_user(user, create=True)
        return self._saved(cmd, f"user {name} created")

    def update_user(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = check_username(cmd.ext_fields.get("username"))
        base = self.registry.user(name)
        if base is None:
            raise RemoteProtocolError(f"user {name!r} does not exist")
        self.registry.put_user(User.from_dict(_body(cmd), base=base, username=name),
                               create=False)
        return self._saved(cmd, f"user {name} updated")

    def delete_user(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = check_username(cmd.ext_fields.get("username"))
        principal = cmd.principal
        if getattr(principal, "username", None) == name:
            raise RemoteProtocolError("a user cannot delete itself")
        if not self.registry.delete_user(name):
            raise RemoteProtocolError(f"user {name!r} does not exist")
        return self._saved(cmd, f"user {name} deleted")

    def get_user(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = check_username(cmd.ext_fields.get("username"))
        user = self.registry.user(name)
        if user is None:
            raise RemoteProtocolError(f"user {name!r} does not exist")
        return cmd.response(ResponseCode.SUCCESS,
                            body=orjson.dumps(user.to_dict(with_password=False)))

    def list_users(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        needle = _filter(cmd, "filter")
        users = [u.to_dict(with_password=False) for u in self.registry.users()
                 if needle in u.username]
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(users))

    # -- ACLs ----------------------------------------------------------------------------------
    def create_acl(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        return self._put_acl(cmd, create=True)

    def update_acl(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        return self._put_acl(cmd, create=False)

    def _put_acl(self, cmd: RemotingCommand, *, create: bool) -> RemotingCommand:
        subject = cmd.ext_fields.get("subject")
        acl = Acl.from_dict(_body(cmd), subject)
        current = self.registry.acl(acl.username)
        if create and current is None:
            merged = acl
        elif current is None:
            raise RemoteProtocolError(f"no ACL for {acl.subject}: create it first")
        else:  # RocketMQ's create on an existing ACL adds to it, as update does
            merged = current.merged(acl)
        self.registry.put_acl(merged)
        return self._saved(cmd, f"ACL of {acl.subject} {'created' if create else 'updated'}")

    def delete_acl(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = parse_subject(cmd.ext_fields.get("subject"))
        current = self.registry.acl(name)
        if current is None:
            raise RemoteProtocolError(f"no ACL for User:{name}")
        raw_type = cmd.ext_fields.get("policyType")
        policy = PolicyType.parse(raw_type, "policyType") if raw_type else None
        raw_resource = cmd.ext_fields.get("resource")
        resources = ([Resource.parse(r, "resource") for r in raw_resource.split(",") if r]
                     if raw_resource else [])
        self.registry.put_acl(current.without(resources, policy))
        return self._saved(cmd, f"ACL of User:{name} deleted"
                                + (f" for {raw_resource}" if raw_resource else ""))

    def get_acl(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        name = parse_subject(cmd.ext_fields.get("subject"))
        acl = self.registry.acl(name)
        if acl is None:
            raise RemoteProtocolError(f"no ACL for User:{name}")
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(acl.to_dict()))

    def list_acls(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        subject_filter = _filter(cmd, "subjectFilter")
        resource_filter = _filter(cmd, "resourceFilter")
        out = []
        for acl in self.registry.acls():
            if subject_filter and subject_filter not in acl.subject:
                continue
            if resource_filter and not any(resource_filter in str(e.resource)
                                           for e in acl.all_entries()):
                continue
            out.append(acl.to_dict())
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(out))

    def get_metadata(self, cmd: RemotingCommand, conn: object) -> RemotingCommand:
        """The whole table, secrets included: to an authenticated Super user only (a slave's
        inner credentials), never to anyone while authentication is off."""
        principal = cmd.principal
        if not isinstance(principal, Principal) or not principal.is_super:
            raise AccessDeniedError("the users and ACLs with their secrets go to an "
                                    "authenticated Super user only", "super_only")
        return cmd.response(ResponseCode.SUCCESS, body=self.registry.encode())
