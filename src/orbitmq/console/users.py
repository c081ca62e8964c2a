"""Users and ACLs (RocketMQ 5's ACL 2.0): the users (never their passwords) and every rule, and
the forms that create, update and delete users and add and delete rules.

Everything goes through the SDK admin's user and ACL calls, signed as the logged-in user
(:mod:`orbitmq.console.acting`): the servers let Super users alone do any of it, so a Normal user
gets the page that says the cluster refused. A change goes to every master broker and every name
server that keeps users, as ``orbitmq user`` and ``orbitmq acl`` send it.
"""

from __future__ import annotations

import asyncio
import dataclasses

from aiohttp import web

from orbitmq.console import forms
from orbitmq.console.render import page
from orbitmq.console.state import admin_of
from orbitmq.security.model import Action, Decision, PolicyEntry, PolicyType, UserStatus, UserType

__all__ = ["routes", "AclRow"]

routes = web.RouteTableDef()

USER_TYPES = tuple(t.value for t in UserType)
STATUSES = tuple(s.value for s in UserStatus)
ACTIONS = tuple(a.value for a in Action)
DECISIONS = tuple(d.value for d in Decision)
POLICY_TYPES = tuple(p.value for p in PolicyType)


@dataclasses.dataclass(frozen=True)
class AclRow:
    """One rule of one subject, as the ACL table shows it."""

    subject: str
    policy_type: str
    entry: PolicyEntry

    @property
    def resource(self) -> str:
        return str(self.entry.resource)

    @property
    def actions(self) -> str:
        return ", ".join(sorted(a.value for a in self.entry.actions))

    @property
    def source_ips(self) -> str:
        return ", ".join(str(n) for n in self.entry.source_ips)


@routes.get("/users")
async def users_page(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    users, acls = await asyncio.gather(admin.list_users(), admin.list_acls())
    rows = [AclRow(acl.subject, ptype.value, entry) for acl in acls
            for ptype, entries in ((PolicyType.CUSTOM, acl.entries),
                                   (PolicyType.DEFAULT, acl.default_entries))
            for entry in entries]
    return page(request, "users.html", title="Users and ACLs", users=users, acls=rows,
                user_types=USER_TYPES, statuses=STATUSES, actions=ACTIONS, decisions=DECISIONS)


@routes.post("/users")
async def user_create(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    await admin_of(request).create_user(
        forms.text(form, "username"), forms.secret(form, "password"),
        user_type=forms.choice(form, "user_type", USER_TYPES, "Normal"),
        status=forms.choice(form, "status", STATUSES, "enable"))
    raise web.HTTPSeeOther("/users?notice=user-created")


@routes.post("/users/{username}/update")
async def user_update(request: web.Request) -> web.StreamResponse:
    """Type and status as chosen; the password only when one is typed."""
    form = await request.post()
    await admin_of(request).update_user(
        request.match_info["username"],
        password=forms.secret(form, "password", required=False) or None,
        user_type=forms.choice(form, "user_type", USER_TYPES, "Normal"),
        status=forms.choice(form, "status", STATUSES, "enable"))
    raise web.HTTPSeeOther("/users?notice=user-saved")


@routes.post("/users/{username}/delete")
async def user_delete(request: web.Request) -> web.StreamResponse:
    name = request.match_info["username"]
    form = await request.post()
    if forms.text(form, "confirm", required=False) != name:
        raise forms.FormError(f"type the user's name ({name}) into confirm to delete it")
    await admin_of(request).delete_user(name)
    raise web.HTTPSeeOther("/users?notice=user-deleted")


@routes.post("/acls")
async def acl_add(request: web.Request) -> web.StreamResponse:
    """One rule per resource (``Topic:orders``, ``Group:billing*``, ``Cluster:NAME``, ``*``),
    added to the subject's (a rule for a resource it has replaces that one)."""
    form = await request.post()
    actions = forms.choices(form.getall("actions", []), "actions", ACTIONS)
    if not actions:
        raise forms.FormError("actions: tick at least one")
    await admin_of(request).create_acl(
        forms.text(form, "subject"), forms.text(form, "resources"), actions,
        decision=forms.choice(form, "decision", DECISIONS, "Allow"),
        source_ips=forms.text(form, "source_ips", required=False) or None)
    raise web.HTTPSeeOther("/users?notice=acl-added")


@routes.post("/acls/delete")
async def acl_delete(request: web.Request) -> web.StreamResponse:
    """The subject's rule for ``resource`` (of ``policy_type``), or all its rules when no
    resource is given."""
    form = await request.post()
    resource = forms.text(form, "resource", required=False)
    policy = forms.text(form, "policy_type", required=False)
    if policy and policy not in POLICY_TYPES:
        raise forms.FormError(f"policy_type = {policy!r} is not one of {', '.join(POLICY_TYPES)}")
    await admin_of(request).delete_acl(forms.text(form, "subject"), resource or None,
                                       policy_type=policy or None)
    raise web.HTTPSeeOther("/users?notice=acl-deleted")
