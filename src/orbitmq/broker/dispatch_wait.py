"""Read-your-writes: requests that must see every send acknowledged before them.

The store builds consume queues and the index on its dispatch step, a moment after a send is
acknowledged. A read that follows an acknowledged send (GET_MAX_OFFSET, stats, a pull that found
nothing, LIST_PENDING_TRANSACTIONS) waits for that moment. The dispatcher signals it: after every
round it tells its progress listeners "everything below offset N is dispatched"
(MessageStore.add_dispatch_listener); this module hands that to the loop with one
``call_soon_threadsafe`` (only while someone waits) and resolves the waiters whose target offset
it reached, lowest first. No polling; each wait is bounded by its timeout (False then: the dispatch
is stalled, e.g. on a full disk, and the request is answered with what is there).

No lost wake-up: a waiter registers, then reads the dispatched offset once more; the dispatcher
moves the offset before it tells the listeners. Whichever runs second sees the other's write.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
from typing import TYPE_CHECKING

from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport.connection import HandlerResult, RemotingConnection
from orbitmq.transport.loop import call_soon_from_any_thread
from orbitmq.transport.server import Handler

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["DispatchWaiter", "DISPATCH_WAIT_MAX_S"]

DISPATCH_WAIT_MAX_S = 0.5  # a read waits at most this long for acknowledged sends to be queued


class DispatchWaiter:
    """Waits, on the broker's loop, for the store's dispatch to reach the appended end.

    Args:
        store: the broker's store (its dispatch listener is added by ``start``).
    """

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._loop: asyncio.AbstractEventLoop | None = None
        # (target offset, sequence, future, timeout timer), lowest target first
        self._waiters: list[tuple[int, int, asyncio.Future[bool], asyncio.TimerHandle]] = []
        self._seq = itertools.count()
        self._listening = False

    def start(self) -> None:
        """Bind to the running loop and listen to the store's dispatch (once)."""
        self._loop = asyncio.get_running_loop()
        if not self._listening:
            self.store.add_dispatch_listener(self._on_dispatched)
            self._listening = True

    def stop(self) -> None:
        """Answer every waiter False (nothing more will be dispatched)."""
        waiters, self._waiters = self._waiters, []
        for _, _, future, timer in waiters:
            timer.cancel()
            if not future.done():
                future.set_result(False)
        self._loop = None

    # -- waiting --------------------------------------------------------------------------------
    def wait(self, timeout_s: float = DISPATCH_WAIT_MAX_S) -> asyncio.Future[bool]:
        """A future that turns True once everything appended so far is in the queues and the
        index, False after ``timeout_s`` seconds (or at stop)."""
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        target = self.store.max_physical_offset()
        if self.store.dispatched_offset() >= target:
            future.set_result(True)
            return future
        timer = loop.call_later(timeout_s, self._expire, future)
        heapq.heappush(self._waiters, (target, next(self._seq), future, timer))
        self._release(self.store.dispatched_offset())  # the dispatch may have moved meanwhile
        return future

    def after(self, handler: Handler) -> Handler:
        """``handler`` run once the store has dispatched what was appended before the request
        (directly, without a task, when nothing is pending: the usual case)."""

        def run(cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
            if self.store.dispatch_behind_bytes() <= 0:
                return handler(cmd, conn)
            return self._later(handler, cmd, conn)

        return run

    async def _later(self, handler: Handler, cmd: RemotingCommand,
                     conn: RemotingConnection) -> RemotingCommand | None:
        await self.wait()
        result = handler(cmd, conn)
        if inspect.isawaitable(result):
            return await result
        return result

    # -- signals --------------------------------------------------------------------------------
    def _on_dispatched(self, offset: int) -> None:
        """The store's dispatch listener (a store thread, or the loop's own ``store.wake``):
        hand over only while someone waits, so a broker without readers pays one check."""
        loop = self._loop
        if loop is None or not self._waiters:
            return
        try:
            call_soon_from_any_thread(loop, self._release, offset)
        except RuntimeError:  # the loop closed meanwhile (broker stopped)
            pass

    def _release(self, offset: int) -> None:
        """Resolve the waiters whose target ``offset`` reached (on the loop)."""
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, future, timer = heapq.heappop(waiters)
            timer.cancel()
            if not future.done():
                future.set_result(True)

    def _expire(self, future: asyncio.Future[bool]) -> None:
        if not future.done():
            future.set_result(False)
        self._waiters = [w for w in self._waiters if w[2] is not future]
        heapq.heapify(self._waiters)
