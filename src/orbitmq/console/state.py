"""What every page handler reaches through its request: the console's settings, its SDK clients,
its guard, its runtime sampler and its templates, and the client a page acts with."""

from __future__ import annotations

import dataclasses

import jinja2
from aiohttp import web

from orbitmq.client import AsyncAdmin
from orbitmq.config import ConsoleConfig
from orbitmq.console.acting import UserSession, UserSessions
from orbitmq.console.sampler import RuntimeSampler
from orbitmq.console.security import SESSION_COOKIE, Guard

__all__ = ["ConsoleState", "STATE", "state", "user_of", "admin_of"]


@dataclasses.dataclass
class ConsoleState:
    """One console's shared parts (one per application). ``users`` is None without user login
    (``console_access_key`` unset)."""

    config: ConsoleConfig
    admin: AsyncAdmin
    guard: Guard
    sampler: RuntimeSampler
    templates: jinja2.Environment
    users: UserSessions | None = None


STATE = web.AppKey("orbitmq_console", ConsoleState)


def state(request: web.Request) -> ConsoleState:
    return request.app[STATE]


def user_of(request: web.Request) -> UserSession | None:
    """The cluster user this request's session logged in as (None: no user login, or a script
    with the bearer token)."""
    st = state(request)
    return st.users.get(request.cookies.get(SESSION_COOKIE)) if st.users is not None else None


def admin_of(request: web.Request) -> AsyncAdmin:
    """The SDK admin client a page reads and changes the cluster with: the logged-in user's,
    else the console's own (see :mod:`orbitmq.console.acting`)."""
    user = user_of(request)
    if user is not None:
        return user.admin
    st = state(request)
    if st.users is not None and not st.guard.bearer_ok(request):
        # The guard let through a session whose user is gone (expired between two checks).
        raise web.HTTPSeeOther("/login")
    return st.admin
