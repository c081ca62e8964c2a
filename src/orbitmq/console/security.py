"""Who may use the console, and the guards of every request.

- Exposure: on a loopback address the console may run without a secret; on any other address it
  refuses to start without ``console_token`` (:func:`check_exposure`).
- Authentication, when a token is set: a login form that opens a session (a random id in an
  HttpOnly, SameSite=Strict cookie, forgotten after ``console_session_ttl_ms`` unused), or the
  header ``Authorization: Bearer <token>`` for scripts. Secrets are compared in constant time.
  With user login (``console_access_key`` set: the cluster has authentication on) the form also
  asks a user of the cluster, and a session is open only while that user's client is
  (:mod:`orbitmq.console.acting`).
- CSRF: every state-changing form carries ``csrf``, an HMAC (under a per-process key) of a random
  cookie the console set; a POST without a matching one is refused with 403. Requests
  authenticated by the bearer header need none (a browser cannot send that header cross-site).
- DNS rebinding: bound to loopback, the console answers only requests whose Host is a loopback
  name or address, so a web page whose name was rebound to 127.0.0.1 cannot read it.
- Every response forbids framing, sniffing and scripts from anywhere but the console itself (a
  Content-Security-Policy without inline scripts); pages escape everything (Jinja2 autoescape).
- Login throttle (:class:`LoginThrottle`): an address with ``console_login_failures_max`` failed
  logins (form or Bearer) in the last minute gets 429 with Retry-After for each wrong one; the
  right token or password still works (a person locked out by someone behind the same proxy
  can still get in). Counted and logged (one line per 10 s).
- Cookies are ``Secure`` when the console is served over TLS, or behind a proxy listed in
  ``console_trusted_proxies`` that says ``X-Forwarded-Proto: https`` (whose X-Forwarded-For then
  names the client for the throttle).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import ipaddress
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from urllib.parse import quote, urlsplit

from aiohttp import web

from orbitmq.config import ConfigError, ConsoleConfig
from orbitmq.rate_limited_log import RateLimitedLog

__all__ = [
    "SESSION_COOKIE",
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "SECURITY_HEADERS",
    "is_loopback",
    "check_exposure",
    "tokens_equal",
    "SessionTable",
    "LoginThrottle",
    "Guard",
]

log = logging.getLogger(__name__)

SESSION_COOKIE = "orbitmq_console_session"
CSRF_COOKIE = "orbitmq_console_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
PUBLIC_PREFIXES = ("/static/", "/login")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # same-origin, not no-referrer: with no-referrer a browser sends "Origin: null" on POST.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CSRF_SEED = web.RequestKey("orbitmq_csrf_seed", str)  # the CSRF cookie's value for this request


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only reaches this machine."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere


def check_exposure(config: ConsoleConfig) -> None:
    """Refuse to serve a non-loopback address without a token.

    Raises:
        ConfigError: ``console_listen_host`` is not loopback and ``console_token`` is empty.
    """
    if not is_loopback(config.console_listen_host) and not config.console_token:
        raise ConfigError(
            "console_token",
            f"the console listens on {config.console_listen_host}, which is not a loopback "
            "address: set console_token (ORBITMQ_CONSOLE_TOKEN or --console-token) so that "
            "only those who know it can use it")


def tokens_equal(given: str, expected: str) -> bool:
    """Constant-time comparison (the digests hide the lengths too)."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(),
                               hashlib.sha256(expected.encode()).digest())


class SessionTable:
    """Open login sessions: id -> last use; forgotten ``ttl_s`` after their last use, and the
    least recently used first when more than ``sessions_max`` are open."""

    def __init__(self, ttl_s: float, sessions_max: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.sessions_max = sessions_max
        self._clock = clock
        self._last_used: collections.OrderedDict[str, float] = collections.OrderedDict()

    def open(self) -> str:
        sid = secrets.token_urlsafe(32)
        self._last_used[sid] = self._clock()
        while len(self._last_used) > self.sessions_max:
            self._last_used.popitem(last=False)
        return sid

    def touch(self, sid: str) -> bool:
        """Whether ``sid`` is open (and mark it used now)."""
        last = self._last_used.get(sid)
        now = self._clock()
        if last is None:
            return False
        if now - last > self.ttl_s:
            del self._last_used[sid]
            return False
        self._last_used[sid] = now
        self._last_used.move_to_end(sid)
        return True

    def close(self, sid: str) -> None:
        self._last_used.pop(sid, None)

    def is_open(self, sid: str) -> bool:
        """Whether ``sid`` is open, without marking it used."""
        last = self._last_used.get(sid)
        return last is not None and self._clock() - last <= self.ttl_s

    def __len__(self) -> int:
        return len(self._last_used)


LOGIN_WINDOW_S = 60.0  # failures count for a minute
THROTTLED_ADDRESSES_MAX = 10_000  # addresses remembered; the least recent is forgotten past it


class LoginThrottle:
    """Failed logins per client address over the last LOGIN_WINDOW_S (module docstring).

    Memory is bounded: at most ``failures_max`` times per address, THROTTLED_ADDRESSES_MAX
    addresses (the least recently failing forgotten first)."""

    def __init__(self, failures_max: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures_max = failures_max
        self.refused = 0  # wrong logins answered 429
        self._clock = clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict())
        self._log = RateLimitedLog(log)

    def retry_after_s(self, address: str) -> float:
        """Seconds until ``address`` has room for another failure (0: not throttled)."""
        times = self._recent(address)
        if times is None or len(times) < self.failures_max:
            return 0.0
        return max(0.0, times[0] + LOGIN_WINDOW_S - self._clock())

    def failed(self, address: str) -> float:
        """Record a failed login; returns ``retry_after_s`` as it was before it (> 0: answer
        429)."""
        wait = self.retry_after_s(address)
        times = self._failures.get(address)
        if times is None:
            times = self._failures[address] = collections.deque(maxlen=self.failures_max)
            while len(self._failures) > THROTTLED_ADDRESSES_MAX:
                self._failures.popitem(last=False)
        times.append(self._clock())
        self._failures.move_to_end(address)
        if wait > 0:
            self.refused += 1
            self._log.warning("login", "console login throttled address=%s: %d failed logins "
                              "within %.0f s (console_login_failures_max)", address,
                              self.failures_max, LOGIN_WINDOW_S)
        return wait

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def _recent(self, address: str) -> collections.deque[float] | None:
        times = self._failures.get(address)
        if times is None:
            return None
        horizon = self._clock() - LOGIN_WINDOW_S
        while times and times[0] <= horizon:
            times.popleft()
        return times


def _networks(spec: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(i.strip(), strict=False) for i in spec.split(",")
                 if i.strip())


def safe_next(target: str | None) -> str:
    """A local path to go to after login (never another site: no scheme, host or ``//``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    return "/" if parts.scheme or parts.netloc else target


class Guard:
    """The checks applied to every request (see the module docstring)."""

    def __init__(self, config: ConsoleConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.token = config.console_token
        self.user_login = bool(config.console_access_key)  # people log in as cluster users
        self.loopback_only = is_loopback(config.console_listen_host)
        self.sessions = SessionTable(config.console_session_ttl_ms / 1000,
                                     config.console_sessions_max, clock)
        self._csrf_key = secrets.token_bytes(32)
        self.cookie_max_age_s = config.console_session_ttl_ms // 1000
        self.throttle = LoginThrottle(config.console_login_failures_max, clock)
        self._trusted_proxies = _networks(config.console_trusted_proxies)

    # -- where a request comes from ---------------------------------------------------------------
    def _from_trusted_proxy(self, request: web.Request) -> bool:
        if not self._trusted_proxies or request.remote is None:
            return False
        try:
            peer = ipaddress.ip_address(request.remote)
        except ValueError:
            return False
        return any(peer in net for net in self._trusted_proxies)

    def secure(self, request: web.Request) -> bool:
        """Served over TLS, here or at a trusted proxy that says so: cookies get ``Secure``."""
        if request.secure:
            return True
        return (self._from_trusted_proxy(request)
                and request.headers.get("X-Forwarded-Proto", "").strip().lower() == "https")

    def client_address(self, request: web.Request) -> str:
        """The client's address: the peer's, or the last hop a trusted proxy names."""
        if self._from_trusted_proxy(request):
            forwarded = request.headers.get("X-Forwarded-For", "")
            hops = [h.strip() for h in forwarded.split(",") if h.strip()]
            if hops:
                return hops[-1]
        return request.remote or "?"

    def login_failed(self, request: web.Request) -> None:
        """Count a failed login; past the throttle, raise 429 (web.HTTPTooManyRequests)."""
        wait = self.throttle.failed(self.client_address(request))
        if wait > 0:
            raise web.HTTPTooManyRequests(
                headers={"Retry-After": str(max(1, round(wait)))},
                text="too many failed logins from this address: try again later")

    # -- CSRF -----------------------------------------------------------------------------------
    def csrf_token(self, request: web.Request) -> str:
        """The token the forms of this page carry (bound to the client's CSRF cookie)."""
        return self._csrf_of(self._csrf_seed(request))

    def _csrf_of(self, seed: str) -> str:
        return hmac.new(self._csrf_key, seed.encode(), hashlib.sha256).hexdigest()

    @staticmethod
    def _csrf_seed(request: web.Request) -> str:
        seed = request.get(CSRF_SEED)
        if seed is None:
            seed = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
            request[CSRF_SEED] = seed
        return seed

    async def _csrf_ok(self, request: web.Request) -> bool:
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie:
            return False
        given = request.headers.get(CSRF_HEADER)
        if given is None:
            form = await request.post()
            value = form.get(CSRF_FIELD)
            given = value if isinstance(value, str) else ""
        return hmac.compare_digest(given.encode(), self._csrf_of(cookie).encode())

    # -- authentication -------------------------------------------------------------------------
    def bearer_ok(self, request: web.Request) -> bool:
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        return bool(self.token) and scheme.lower() == "bearer" and tokens_equal(value.strip(),
                                                                                 self.token)

    def session_ok(self, request: web.Request) -> bool:
        sid = request.cookies.get(SESSION_COOKIE)
        return bool(sid) and self.sessions.touch(str(sid))

    def authenticated(self, request: web.Request) -> bool:
        return ((not self.token and not self.user_login) or self.bearer_ok(request)
                or self.session_ok(request))

    def login(self, response: web.StreamResponse, request: web.Request | None = None) -> str:
        """Opens a session, sets its cookie on ``response`` (``Secure`` when ``request`` came
        over TLS, see ``secure``) and returns its id; the address's failures are forgotten."""
        sid = self.sessions.open()
        if request is not None:
            self.throttle.succeeded(self.client_address(request))
        response.set_cookie(SESSION_COOKIE, sid, httponly=True, secure=request is not None
                            and self.secure(request) or None,
                            samesite="Strict", path="/", max_age=self.cookie_max_age_s)
        return sid

    def logout(self, request: web.Request, response: web.StreamResponse) -> None:
        sid = request.cookies.get(SESSION_COOKIE)
        if sid:
            self.sessions.close(str(sid))
        response.del_cookie(SESSION_COOKIE, path="/")

    # -- the middleware ---------------------------------------------------------------------------
    def host_ok(self, request: web.Request) -> bool:
        if not self.loopback_only:
            return True
        host = request.headers.get("Host", "")
        name = urlsplit("//" + host).hostname or ""
        return is_loopback(name)

    @staticmethod
    def origin_ok(request: web.Request) -> bool:
        """A browser names the page a POST comes from: it must be the console itself (a
        client that sends no Origin, like curl, relies on the CSRF token alone)."""
        origin = request.headers.get("Origin")
        if origin is None:
            return True
        return urlsplit(origin).netloc == request.headers.get("Host", "")

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.host_ok(request):
            raise web.HTTPMisdirectedRequest(text="this console answers on a loopback address only")
        bearer = self.bearer_ok(request)
        if not bearer and self.token and request.headers.get(
                "Authorization", "").lower().startswith("bearer "):
            self.login_failed(request)  # a wrong Bearer is a failed login (429 past the throttle)
        public = request.path.startswith(PUBLIC_PREFIXES)
        if not public and not (bearer or self.authenticated(request)):
            if request.path.startswith("/api/") or request.method not in SAFE_METHODS:
                raise web.HTTPUnauthorized(text="log in, or send 'Authorization: Bearer <token>'")
            raise web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='/')}")
        if request.method not in SAFE_METHODS and not bearer and (
                not self.origin_ok(request) or not await self._csrf_ok(request)):
            raise web.HTTPForbidden(text="missing or wrong CSRF token: reload the page and "
                                             "submit the form again")
        response = await handler(request)
        seed = request.get(CSRF_SEED)
        if seed is not None and request.cookies.get(CSRF_COOKIE) != seed:
            response.set_cookie(CSRF_COOKIE, seed, httponly=True, samesite="Strict", path="/",
                                secure=self.secure(request) or None)
        return response
