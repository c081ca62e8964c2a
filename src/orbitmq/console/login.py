"""The login form and logout, when the console has a token (``console_token``)."""

from __future__ import annotations

from aiohttp import web

from orbitmq.console import forms
from orbitmq.console.render import page
from orbitmq.console.security import safe_next, tokens_equal
from orbitmq.console.state import state

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/login")
async def login_form(request: web.Request) -> web.StreamResponse:
    guard = state(request).guard
    target = safe_next(request.query.get("next"))
    if guard.authenticated(request):
        raise web.HTTPSeeOther(target)
    return page(request, "login.html", title="Log in", next=target, failed=False)


@routes.post("/login")
async def login_submit(request: web.Request) -> web.StreamResponse:
    guard = state(request).guard
    form = await request.post()
    target = safe_next(forms.text(form, "next", required=False, default="/"))
    given = forms.text(form, "token", required=False)
    if not guard.token:
        raise web.HTTPSeeOther(target)  # nothing to log in to
    if not tokens_equal(given, guard.token):
        return page(request, "login.html", http_status=401, title="Log in", next=target,
                    failed=True)
    response = web.HTTPSeeOther(target)
    guard.login(response)
    raise response


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    response = web.HTTPSeeOther("/login?notice=logged-out")
    state(request).guard.logout(request, response)
    raise response
