"""The base of the blocking clients: an asyncio client driven from a background event loop.

The blocking Producer, PullConsumer and Admin are thin twins of their asyncio classes: each owns a
:class:`LoopThread` (started with the client, stopped at shutdown) and runs the async client's
coroutines there, so both APIs share one implementation and any thread may call the blocking one.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, Generic, Protocol, Self, TypeVar

from orbitmq.errors import ClientError
from orbitmq.transport.loop import LoopThread

__all__ = ["BlockingClient"]

T = TypeVar("T")


class _AsyncClient(Protocol):
    async def start(self) -> Any: ...

    async def shutdown(self) -> None: ...


A = TypeVar("A", bound=_AsyncClient)


class BlockingClient(Generic[A]):
    """Runs an async client on its own loop thread. Subclasses call :meth:`_call` / :meth:`_submit`."""

    _thread_name = "orbitmq-client"

    def __init__(self, client: A) -> None:
        self._client = client
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()

    @property
    def async_client(self) -> A:
        """The asyncio client underneath (use it only from its loop)."""
        return self._client

    def start(self) -> Self:
        """Start the loop thread and the client; returns self."""
        with self._lock:
            if self._loop is not None:
                return self
            loop = LoopThread(self._thread_name)
            try:
                loop.call(self._client.start())
            except BaseException:
                loop.stop()
                raise
            self._loop = loop
        return self

    def shutdown(self) -> None:
        """Shut the client down and stop its loop thread (idempotent)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.call(self._client.shutdown())
        finally:
            loop.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()

    def _running_loop(self) -> LoopThread:
        loop = self._loop
        if loop is None:
            raise ClientError(f"{type(self).__name__} is not started; call start() or use `with`")
        return loop

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the client's loop and wait for it."""
        try:
            loop = self._running_loop()
        except ClientError:
            coro.close()
            raise
        return loop.call(coro)

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the client's loop; the future completes from that thread."""
        try:
            loop = self._running_loop()
        except ClientError:
            coro.close()
            raise
        return loop.submit(coro)
