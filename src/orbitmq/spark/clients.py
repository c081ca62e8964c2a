"""SDK clients for the data source: one event loop thread per Session, async clients created lazily.

Measured here: starting a PullConsumer, fetching a route and shutting it down costs about 9 ms,
an Admin about 4 ms; a pull or send is a round trip on an already open connection. So:

- on the driver (planning, commit, abort) a :class:`Session` lives for one call, in a ``with``
  block, and closes its connections when the call returns: Spark calls ``stop()`` on neither a
  reader nor a writer when a query is stopped normally, so nothing may wait for it;
- on executors, tasks of one Python worker share a cached Session per name server
  (:func:`executor_session`): its clients stay connected between tasks (and the transactional
  producer stays there to answer the brokers' transaction checks) and are closed after
  ``IDLE_CLOSE_S`` seconds without a task, or when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from orbitmq.client import new_event_loop
from orbitmq.errors import ClientError
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

if TYPE_CHECKING:
    from orbitmq.client import (
        AsyncAdmin,
        AsyncProducer,
        AsyncPullConsumer,
        AsyncTransactionProducer,
        TransactionListener,
    )

__all__ = ["Session", "executor_session", "close_executor_sessions", "IDLE_CLOSE_S"]

log = logging.getLogger(__name__)

T = TypeVar("T")
IDLE_CLOSE_S = 30.0
CALL_TIMEOUT_S = 120.0
_SHUTDOWN_TIMEOUT_S = 10.0


class Session:
    """Async SDK clients of one name server on a private loop thread; any thread may call.
    Every client signs its requests with ``credentials`` (None: unsigned) and connects with
    ``tls`` (None: plaintext; an executor never reads its own environment for either).

    Clients are created on first use: ``admin``, ``puller(group)``, ``producer(group)`` and
    ``tx_producer(group, listener)`` return started async clients to use in coroutines given to
    :meth:`run` or :meth:`submit`.
    """

    def __init__(self, namesrv: str, credentials: Credentials | None = None,
                 tls: ClientTls | None = None) -> None:
        self.namesrv = namesrv
        self.credentials = credentials
        self.tls: ClientTls | bool = tls or False
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="orbitmq-spark-loop")
        self._thread.start()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = asyncio.Lock()
        self._closed = False
        self.users = 0  # tasks using it now (executor cache)
        self.last_used = time.monotonic()

    # -- running coroutines ------------------------------------------------------------------
    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise ClientError("orbitmq spark session is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        """Run ``coro`` on the session's loop and wait for it (bounded)."""
        return self.submit(coro).result(timeout)

    # -- clients (call from coroutines on the loop) ------------------------------------------
    async def _client(self, kind: str, name: str, factory: Any) -> Any:
        async with self._lock:
            client = self._clients.get((kind, name))
            if client is None:
                client = factory()
                await client.start()
                self._clients[(kind, name)] = client
            return client

    async def admin(self) -> AsyncAdmin:
        from orbitmq.client import AsyncAdmin

        admin: AsyncAdmin = await self._client("admin", "", lambda: AsyncAdmin(
            self.namesrv, credentials=self.credentials, tls=self.tls))
        return admin

    async def puller(self, group: str) -> AsyncPullConsumer:
        from orbitmq.client import AsyncPullConsumer

        puller: AsyncPullConsumer = await self._client("pull", group, lambda: AsyncPullConsumer(
            group, self.namesrv, persist_consumer_offset_interval=3600.0,
            credentials=self.credentials, tls=self.tls))
        return puller

    async def producer(self, group: str, send_timeout_s: float = 10.0) -> AsyncProducer:
        from orbitmq.client import AsyncProducer

        producer: AsyncProducer = await self._client("produce", group, lambda: AsyncProducer(
            group, self.namesrv, send_timeout=send_timeout_s, credentials=self.credentials,
            tls=self.tls))
        return producer

    async def tx_producer(self, group: str, listener: TransactionListener,
                          send_timeout_s: float = 10.0) -> AsyncTransactionProducer:
        """The transactional producer of ``group`` (created with ``listener`` on first use; later
        calls get the same producer whatever they pass)."""
        from orbitmq.client import AsyncTransactionProducer

        producer: AsyncTransactionProducer = await self._client(
            "tx", group, lambda: AsyncTransactionProducer(
                group, self.namesrv, listener=listener, send_timeout=send_timeout_s,
                credentials=self.credentials, tls=self.tls))
        return producer

    # -- closing -------------------------------------------------------------------------------
    async def _shutdown_clients(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        results = await asyncio.gather(*(c.shutdown() for c in clients), return_exceptions=True)
        for r in results:
            if isinstance(r, Exception):
                log.info("orbitmq client shutdown failed: %r", r)

    def close(self) -> None:
        """Shut every client down (connections closed) and stop the loop thread (idempotent)."""
        if self._closed:
            return
        try:
            self.run(self._shutdown_clients(), _SHUTDOWN_TIMEOUT_S)
        except Exception as e:  # closing must not hide the caller's own error
            log.info("orbitmq spark session close: %r", e)
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(_SHUTDOWN_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the executor cache -------------------------------------------------------------------------
# by (name server, credentials, TLS): queries signing as different users never share a connection
_sessions: dict[tuple[str, Credentials | None, ClientTls | None], Session] = {}
_cache_lock = threading.Lock()
_reaper: threading.Thread | None = None


def _reap_idle() -> None:
    """Close cached sessions no task used for IDLE_CLOSE_S (daemon thread, one per process)."""
    while True:
        time.sleep(IDLE_CLOSE_S / 3)
        now = time.monotonic()
        with _cache_lock:
            idle = [ns for ns, s in _sessions.items()
                    if s.users == 0 and now - s.last_used >= IDLE_CLOSE_S]
            closing = [_sessions.pop(ns) for ns in idle]
        for session in closing:
            session.close()


@contextlib.contextmanager
def executor_session(namesrv: str, credentials: Credentials | None = None,
                     tls: ClientTls | None = None) -> Iterator[Session]:
    """The process-wide Session of ``namesrv``, ``credentials`` and ``tls`` for the duration of
    one task."""
    global _reaper
    key = (namesrv, credentials, tls)
    with _cache_lock:
        session = _sessions.get(key)
        if session is None or session.closed:
            session = _sessions[key] = Session(namesrv, credentials, tls)
        session.users += 1
        if _reaper is None:
            _reaper = threading.Thread(target=_reap_idle, daemon=True, name="orbitmq-spark-reaper")
            _reaper.start()
    try:
        yield session
    finally:
        with _cache_lock:
            session.users -= 1
            session.last_used = time.monotonic()


def close_executor_sessions() -> None:
    """Close every cached session of this process (at exit, and for tests)."""
    with _cache_lock:
        sessions = list(_sessions.values())
        _sessions.clear()
    for session in sessions:
        session.close()


atexit.register(close_executor_sessions)
