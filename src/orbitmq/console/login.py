"""The login form and logout, when the console has a token (``console_token``) or logs people in
as users of the cluster (``console_access_key`` set: :mod:`orbitmq.console.acting`)."""

from __future__ import annotations

from aiohttp import web

from orbitmq.console import forms
from orbitmq.console.acting import LoginRefused
from orbitmq.console.render import page
from orbitmq.console.security import SESSION_COOKIE, safe_next, tokens_equal
from orbitmq.console.state import state

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/login")
async def login_form(request: web.Request) -> web.StreamResponse:
    guard = state(request).guard
    target = safe_next(request.query.get("next"))
    if guard.authenticated(request):
        raise web.HTTPSeeOther(target)
    return page(request, "login.html", title="Log in", next=target, failed=None)


@routes.post("/login")
async def login_submit(request: web.Request) -> web.StreamResponse:
    st = state(request)
    guard = st.guard
    form = await request.post()
    target = safe_next(forms.text(form, "next", required=False, default="/"))
    given = forms.text(form, "token", required=False)
    if not guard.token and st.users is None:
        raise web.HTTPSeeOther(target)  # nothing to log in to
    if guard.token and not tokens_equal(given, guard.token):
        guard.login_failed(request)  # 429 past the throttle (the right token still works)
        return page(request, "login.html", http_status=401, title="Log in", next=target,
                    failed="token")
    user = None
    if st.users is not None:
        try:  # the password as typed: never stripped, never shown back
            user = await st.users.log_in(forms.text(form, "username", required=False),
                                         form.get("password"))
        except LoginRefused:
            guard.login_failed(request)
            return page(request, "login.html", http_status=401, title="Log in", next=target,
                        failed="user")
    response = web.HTTPSeeOther(target)
    sid = guard.login(response, request)
    if user is not None and st.users is not None:
        await st.users.bind(sid, user)
    raise response


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    st = state(request)
    response = web.HTTPSeeOther("/login?notice=logged-out")
    sid = request.cookies.get(SESSION_COOKIE)
    st.guard.logout(request, response)
    if sid and st.users is not None:
        await st.users.end(str(sid))
    raise response
