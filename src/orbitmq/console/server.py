"""The console's web server: an aiohttp application on the caller's event loop, with start and
stop like the name server's and the broker's, so that ``orbitmq standalone`` runs all three in one
loop and ``orbitmq console`` runs it alone.

Everything it shows or changes goes through the SDK (:class:`~orbitmq.client.AsyncAdmin`, its
browsing calls included, and a producer for dead letter resends): it never touches a broker's
store or speaks the wire protocol itself (an import-linter contract holds it to that). With
``console_access_key`` its own client signs as that user, and people log in as users of the
cluster whose own clients sign their pages' requests (:mod:`orbitmq.console.acting`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from aiohttp import web

from orbitmq.client import AsyncAdmin
from orbitmq.config import ConsoleConfig
from orbitmq.console import (
    cluster,
    dead_letters,
    groups,
    login,
    messages,
    topics,
    traces,
    transactions,
    users,
)
from orbitmq.console.acting import UserSessions
from orbitmq.console.forms import FormError
from orbitmq.console.refusals import refusal_of
from orbitmq.console.render import make_templates, page
from orbitmq.console.sampler import RuntimeSampler
from orbitmq.console.security import SECURITY_HEADERS, Guard, Handler, check_exposure
from orbitmq.console.state import STATE, ConsoleState, user_of
from orbitmq.errors import BrokerError, ClientError, OrbitMQError
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls, ServerTls
from orbitmq.transport.tls import listen

__all__ = ["ConsoleServer", "build_app"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
REQUEST_BODY_MAX_BYTES = 64 * 1024  # the largest form is a few fields


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """An SDK error becomes a page that says what went wrong (never a stack trace)."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except (FormError, ClientError) as e:
        return page(request, "error.html", http_status=400, title="Refused", reason=str(e))
    except BrokerError as e:  # in words with the code's name, and whose fault it is
        user = user_of(request)
        refusal = refusal_of(e, f"user {user.username}" if user else "the console's own user")
        return page(request, "error.html", http_status=refusal.http_status, title=refusal.title,
                    reason=refusal.reason)
    except TimeoutError as e:  # builtin: the SDK's TimeoutError is one too
        return page(request, "error.html", http_status=504, title="The cluster did not answer",
                    reason=f"no answer in time{f': {e}' if str(e) else ''}")
    except (OrbitMQError, OSError) as e:
        return page(request, "error.html", http_status=502, title="The cluster did not answer",
                    reason=str(e) or type(e).__name__)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith("/static/"):
        response.headers["Cache-Control"] = "max-age=3600"


def build_app(st: ConsoleState) -> web.Application:
    """The application: guard first, then error pages, then the page families' routes."""
    app = web.Application(middlewares=[st.guard.middleware, errors_middleware],
                          client_max_size=REQUEST_BODY_MAX_BYTES)
    app[STATE] = st
    app.on_response_prepare.append(_security_headers)
    for module in (login, cluster, topics, groups, messages, traces, dead_letters, transactions,
                   users):
        app.add_routes(module.routes)
    app.router.add_static("/static/", STATIC_DIR, show_index=False, follow_symlinks=False)
    return app


class ConsoleServer:
    """The console on ``console_listen_host:console_listen_port`` (port 0: a free one), showing the
    cluster whose name servers are ``namesrv_addr``. ``address`` is ``host:port`` once started."""

    def __init__(self, config: ConsoleConfig) -> None:
        self.config = config
        self.address = ""
        self._runner: web.AppRunner | None = None
        self._tls_server: asyncio.AbstractServer | None = None  # tls_server_mode not disabled
        self._state: ConsoleState | None = None

    @property
    def url(self) -> str:
        host, _, port = self.address.rpartition(":")
        scheme = "https" if ServerTls.of(self.config).enabled else "http"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"

    async def start(self) -> None:
        """Listen and start sampling.

        Raises:
            ConfigError: a non-loopback address without a token.
            OSError: the port is taken.
        """
        cfg = self.config
        check_exposure(cfg)
        credentials = (Credentials(cfg.console_access_key, cfg.console_secret_key)
                       if cfg.console_access_key else None)
        admin = AsyncAdmin(cfg.namesrv_addr, timeout=cfg.console_admin_timeout_ms / 1000,
                           credentials=credentials, tls=ClientTls.of(cfg) or False)
        await admin.start()
        sampler = RuntimeSampler(admin, cfg.console_sample_interval_ms / 1000,
                                 cfg.console_history_max)
        guard = Guard(cfg)
        self._state = ConsoleState(cfg, admin, guard, sampler, make_templates(),
                                   UserSessions(cfg, guard.sessions) if guard.user_login else None)
        try:
            # aiohttp closes a connection whose request head is not in within its keep-alive
            # timeout (counted from the accept or the last answer): a slow head is closed.
            self._runner = web.AppRunner(build_app(self._state), handle_signals=False,
                                         access_log=None,
                                         keepalive_timeout=cfg.console_request_head_timeout_ms
                                         / 1000)
            await self._runner.setup()
            tls = ServerTls.of(cfg)
            if tls.enabled:  # aiohttp's sites know one TLS context: ours peeks and reloads
                handlers = self._runner.server
                assert handlers is not None  # set up just above
                self._tls_server, port = await listen(
                    handlers, cfg.console_listen_host, cfg.console_listen_port, tls,
                    name="console")
                host = cfg.console_listen_host
            else:
                site = web.TCPSite(self._runner, cfg.console_listen_host, cfg.console_listen_port)
                await site.start()
                host, port = self._runner.addresses[0][:2]
        except BaseException:
            await self.stop()
            raise
        self.address = f"{host}:{port}"
        sampler.start()
        if self._state.users is not None:
            self._state.users.start()
        log.info("orbitmq console ready on %s", self.address)

    async def stop(self) -> None:
        if self._state is not None:
            await self._state.sampler.stop()
            if self._state.users is not None:
                await self._state.users.stop()
        if self._tls_server is not None:
            self._tls_server.close()
            await self._tls_server.wait_closed()
            self._tls_server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._state is not None:
            await self._state.admin.shutdown()
            self._state = None
