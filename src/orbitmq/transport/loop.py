"""Event loop selection and a loop running in a background thread for the blocking SDK.

uvloop is used when installed because the broker and clients spend most of their time in the loop's
socket and callback machinery, where uvloop is several times cheaper than the default loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["new_event_loop", "run", "LoopThread", "call_soon_from_any_thread"]

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop's when available, asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def call_soon_from_any_thread(loop: asyncio.AbstractEventLoop, callback: Callable[..., object],
                              *args: Any) -> None:
    """``callback(*args)`` on ``loop`` soon, from whichever thread calls.

    On the loop's own thread this is ``call_soon``: ``call_soon_threadsafe`` there would write
    the loop's wake-up descriptor for nothing, one syscall and one more loop iteration per call
    (the store's dispatch runs on the loop once per iteration, and its listeners hand over
    this way). Elsewhere it is ``call_soon_threadsafe``.

    Raises:
        RuntimeError: the loop is closed.
    """
    if asyncio._get_running_loop() is loop:
        loop.call_soon(callback, *args)
    else:
        loop.call_soon_threadsafe(callback, *args)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh loop from :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


class LoopThread:
    """An event loop on a daemon thread, so that blocking APIs can drive asyncio code.

    The blocking SDK classes own one each; ``call`` runs a coroutine there and waits for it.
    """

    def __init__(self, name: str = "orbitmq-loop") -> None:
        self.loop = new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()
        # Let cancelled tasks and async generators finish before closing.
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; the returned future is safe to wait on from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (``timeout`` in seconds)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.call from the loop's own thread would deadlock")
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        """Stop the loop and wait for its thread (idempotent)."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
