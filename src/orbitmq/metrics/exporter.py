"""The ``/metrics`` endpoint: Prometheus text served from the server's own event loop.

Served on the loop (not in prometheus_client's own HTTP thread) so that collectors read the
broker's tables on the thread that changes them: a scrape never sees a table mid-update and no
table needs a lock. A scrape costs the loop the time to format the families (milliseconds for
thousands of series), once per scrape interval.

Only ``GET /metrics`` (and ``GET /``) are answered; anything else gets 404 or 405. A request
head larger than ``REQUEST_HEAD_MAX_BYTES`` or slower than ``REQUEST_TIMEOUT_S`` is dropped.
With a token (``metrics_token``) a scrape must send ``Authorization: Bearer <token>`` or gets 401
(compared in constant time; the token is never logged). The endpoint logs ``orbitmq metrics
ready on HOST:PORT`` once it listens.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from orbitmq.metrics.families import CallbackCollector
from orbitmq.security.tls import ServerTls
from orbitmq.transport.tls import listen

__all__ = ["MetricsExporter", "REQUEST_HEAD_MAX_BYTES", "REQUEST_TIMEOUT_S"]

log = logging.getLogger(__name__)

REQUEST_HEAD_MAX_BYTES = 16 * 1024
REQUEST_TIMEOUT_S = 10.0


class MetricsExporter:
    """Serves the families of ``sources`` (callables returning metric families) at
    ``http://host:port/metrics``; port 0 picks a free one (``port`` holds it once started).
    The process's own CPU, memory and file descriptor figures (``process_*``) come along."""

    def __init__(self, host: str, port: int, *, token: str = "",
                 tls: ServerTls | None = None) -> None:
        self.host = host
        self.port = port
        self._token_digest = hashlib.sha256(token.encode()).digest() if token else None
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.tls = tls
        self._server: asyncio.AbstractServer | None = None

    def add_source(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Families from ``collect`` are part of every scrape (it runs on the event loop)."""
        self.registry.register(CallbackCollector(collect))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        """Listen (OSError when the port is taken) and log the ready line."""
        if self.tls is None or not self.tls.enabled:
            server = await asyncio.start_server(self._serve, self.host, self.port,
                                                limit=REQUEST_HEAD_MAX_BYTES)
            self._server, self.port = server, server.sockets[0].getsockname()[1]
        else:  # https, and http too in permissive mode (transport/tls.py)
            self._server, self.port = await listen(self._stream, self.host, self.port, self.tls,
                                                   name="metrics")
        log.info("orbitmq metrics ready on %s", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _stream(self) -> asyncio.StreamReaderProtocol:
        """The protocol ``asyncio.start_server`` gives each connection (for our TLS listener)."""
        reader = asyncio.StreamReader(limit=REQUEST_HEAD_MAX_BYTES)
        return asyncio.StreamReaderProtocol(reader, self._serve)

    def authorized(self, head: bytes) -> bool:
        """Whether the request head carries the bearer token (always, without a token)."""
        if self._token_digest is None:
            return True
        given = b""
        for line in head.split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            if sep and name.strip().lower() == b"authorization":
                scheme, _, given = value.strip().partition(b" ")
                if scheme.lower() != b"bearer":
                    given = b""
                break
        # Digests of equal length: the comparison tells nothing of the token's length either.
        return hmac.compare_digest(hashlib.sha256(given.strip()).digest(), self._token_digest)

    def render(self) -> bytes:
        """The Prometheus text of one scrape."""
        return generate_latest(self.registry)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ConnectionError):
            writer.close()
            return
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        extra = ""
        if method != "GET":
            status, body, ctype = "405 Method Not Allowed", b"only GET\n", "text/plain"
        elif path not in ("/metrics", "/"):
            status, body, ctype = "404 Not Found", b"see /metrics\n", "text/plain"
        elif not self.authorized(head):
            status, body, ctype = ("401 Unauthorized", b"send 'Authorization: Bearer <token>'\n",
                                   "text/plain")
            extra = 'WWW-Authenticate: Bearer realm="metrics"\r\n'
        else:
            try:
                status, body, ctype = "200 OK", self.render(), CONTENT_TYPE_LATEST
            except Exception:  # a collector's bug must not take the endpoint down
                log.exception("metrics scrape failed")
                status, body, ctype = "500 Internal Server Error", b"scrape failed\n", "text/plain"
        writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}"
                     f"\r\n{extra}Connection: close\r\n\r\n".encode("latin-1") + body)
        try:
            await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()
