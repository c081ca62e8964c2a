"""Long polling: pulls that found nothing wait here until a message arrives or their time is up.

No busy polling. A held pull is woken by:
- the store's arrival listener (called after each dispatch round with the queue's new max
  offset and the tags code of what arrived): answered in that call when the dispatch runs on the
  loop (the usual case), else handed over with ``loop.call_soon_threadsafe``; a held pull
  whose tag filter rejects that tags code keeps waiting (a SQL92 filter cannot judge a tags code:
  its pull runs again and evaluates the new messages' properties);
- its own timer at ``suspendTimeoutMillis`` (then the pull runs once more and answers whatever it
  finds, normally PULL_NOT_FOUND);
- a recheck every ``long_polling_recheck_ms`` comparing each queue's max offset with the held
  offsets: a safety net for a lost notification, never the normal path;
- in controller mode, a pull that read nothing because its next message ends past the master's
  confirm offset (``wait_end``, docs/failover.md) waits for that offset instead of for the queue
  to grow (the queue already holds the message): :meth:`LongPollService.confirmed` wakes it when
  the offset passes ``wait_end``, the checks above skip it until then.

No lost wake-up: ``hold`` registers the request and only then reads the queue's max offset, while
the dispatch thread writes the queue entry before it looks for held requests. Whichever runs second
sees the other's write.

Everything but ``on_arrival`` runs on the event loop (``on_arrival`` too, when the loop dispatches).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbitmq.broker.message_filter import PullFilter
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.loop import call_soon_from_any_thread

if TYPE_CHECKING:
    from orbitmq.store.message_store import MessageStore

__all__ = ["HeldPull", "LongPollService", "HELD_PER_CONNECTION_MAX"]

log = logging.getLogger(__name__)

# A consumer holds one pull per queue it owns; past this a connection's pulls are answered at once.
HELD_PER_CONNECTION_MAX = 4096
_Key = tuple[str, int]


@dataclasses.dataclass(slots=True, eq=False)
class HeldPull:
    """A pull request waiting for a message."""

    cmd: RemotingCommand
    conn: RemotingConnection
    header: PullMessageRequestHeader
    message_filter: PullFilter | None
    timer: asyncio.TimerHandle | None = None
    wait_end: int = -1  # the confirm offset it waits for (-1: it waits for the queue to grow)
    deadline: float = 0.0  # loop time its suspend timeout ends (set by hold)

    @property
    def key(self) -> _Key:
        return (self.header.topic, self.header.queue_id)


class LongPollService:
    """Held pulls by (topic, queue id).

    Args:
        store: asked for queue max offsets (hold-time check and periodic recheck).
        resume: runs a woken pull again (without suspending) and answers it.
        recheck_ms: period of the safety-net recheck.
        read_bound: controller mode: the confirm offset now (None: no bound), for pulls held
            with a ``wait_end``.
    """

    def __init__(self, store: MessageStore, resume: Callable[[HeldPull], None], recheck_ms: int,
                 read_bound: Callable[[], int | None] | None = None) -> None:
        self.store = store
        self._resume = resume
        self._read_bound = read_bound
        self._waiting_confirm: set[HeldPull] = set()
        self._recheck_s = max(recheck_ms, 10) / 1000
        self._held: dict[_Key, list[HeldPull]] = {}
        self._by_topic: dict[str, int] = {}  # held pulls per topic (``waits_on``: a send path asks)
        self._by_conn: dict[RemotingConnection, set[HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._recheck_task: asyncio.Task[None] | None = None
        # The connections whose pulls a dispatch round on the loop answered: written once at
        # the round's end (one write for all the pulls of a connection, in that call).
        self._answered: set[RemotingConnection] = set()
        self._in_round = False
        self._listening = False

    @property
    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def waits_on(self, topic: str) -> bool:
        """Whether a pull is held on one of ``topic``'s queues now (one dict lookup: the fast
        path asks it per read of one send)."""
        return topic in self._by_topic

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Which thread runs the loop: asked per dispatch round, where asyncio's own question
        # (_get_running_loop) costs a getpid(2).
        self._loop_thread = threading.get_ident()
        self._recheck_task = self._loop.create_task(self._recheck_loop())
        if not self._listening:  # the end of each dispatch round: write what it answered
            self.store.add_dispatch_listener(self._round_done)
            self._listening = True

    async def stop(self) -> None:
        """Forget every held pull (their connections are being closed with the server)."""
        if self._recheck_task is not None:
            self._recheck_task.cancel()
            await asyncio.gather(self._recheck_task, return_exceptions=True)
            self._recheck_task = None
        for waiting in self._held.values():
            for held in waiting:
                if held.timer is not None:
                    held.timer.cancel()
        self._held.clear()
        self._by_topic.clear()
        self._by_conn.clear()
        self._waiting_confirm.clear()
        self._loop = None

    # -- holding --------------------------------------------------------------------------------
    def hold(self, held: HeldPull, timeout_ms: int) -> bool:
        """Park ``held`` for up to ``timeout_ms``; False when it cannot be held (answer it now)."""
        loop = self._loop
        if loop is None:
            return False
        mine = self._by_conn.get(held.conn)
        if mine is not None and len(mine) >= HELD_PER_CONNECTION_MAX:
            return False
        self._held.setdefault(held.key, []).append(held)
        topic = held.header.topic
        self._by_topic[topic] = self._by_topic.get(topic, 0) + 1
        self._by_conn.setdefault(held.conn, set()).add(held)
        held.deadline = loop.time() + max(timeout_ms, 0) / 1000
        held.timer = loop.call_later(max(timeout_ms, 0) / 1000, self._wake, held)
        if held.wait_end >= 0:
            self._waiting_confirm.add(held)
        # A message may have been dispatched (or confirmed) between the pull's read and the
        # registration above.
        h = held.header
        if self._readable(held, self.store.get_max_offset_in_queue(h.topic, h.queue_id)):
            loop.call_soon(self._wake, held)
        return True

    def time_left_ms(self, held: HeldPull) -> int:
        """Whole milliseconds left of ``held``'s suspend timeout (0 when up or stopped)."""
        loop = self._loop
        return max(0, int((held.deadline - loop.time()) * 1000)) if loop is not None else 0

    def _readable(self, held: HeldPull, max_offset: int) -> bool:
        """Whether ``held`` would read something now that its queue ends at ``max_offset``."""
        if held.wait_end >= 0 and self._read_bound is not None:
            bound = self._read_bound()
            return bound is None or bound >= held.wait_end
        return max_offset > held.header.queue_offset

    def _take(self, held: HeldPull) -> bool:
        """Unregister ``held``; False when it was already woken."""
        waiting = self._held.get(held.key)
        if waiting is None:
            return False
        try:
            waiting.remove(held)
        except ValueError:
            return False
        if not waiting:
            del self._held[held.key]
        topic = held.header.topic
        left = self._by_topic[topic] - 1
        if left:
            self._by_topic[topic] = left
        else:
            del self._by_topic[topic]
        mine = self._by_conn.get(held.conn)
        if mine is not None:
            mine.discard(held)
            if not mine:
                del self._by_conn[held.conn]
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        self._waiting_confirm.discard(held)
        return True

    def _wake(self, held: HeldPull) -> None:
        if not self._take(held):
            return
        if not held.conn.is_open:
            return
        try:
            self._resume(held)
        except Exception:
            log.exception("resuming a held pull failed topic=%s queue=%d", *held.key)
        if self._in_round:
            self._answered.add(held.conn)

    # -- waking ---------------------------------------------------------------------------------
    def on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """The store's arrival listener: only when some pull waits on that queue (a busy broker
        without long polls pays one dict lookup), the pulls answered right here when the
        dispatch runs on the loop (MessageStore.wake, the usual case: the message reaches its
        consumer in the loop iteration it is dispatched in, no hand-over), else (the dispatch
        thread) handed over to the loop."""
        loop = self._loop
        if loop is None or (topic, queue_id) not in self._held:
            return
        if threading.get_ident() == self._loop_thread:
            self._in_round = True
            try:
                self.notify(topic, queue_id, max_offset, tags_code)
            finally:
                self._in_round = False
            return
        try:
            loop.call_soon_threadsafe(self.notify, topic, queue_id, max_offset, tags_code)
        except RuntimeError:  # the loop closed meanwhile (shutdown)
            pass

    def notify(self, topic: str, queue_id: int, max_offset: int, tags_code: int | None) -> None:
        """Wake the pulls of a queue that can now read something (loop thread)."""
        waiting = self._held.get((topic, queue_id))
        if not waiting:
            return
        for held in list(waiting):
            if not self._readable(held, max_offset):
                continue
            if held.message_filter is not None and not held.message_filter.match_tags_code(tags_code):
                continue
            self._wake(held)

    def _round_done(self, offset: int) -> None:
        """The store's dispatch progress listener: after a round that answered held pulls on
        the loop, their answers leave now, one write a connection."""
        if not self._answered or threading.get_ident() != self._loop_thread:
            return
        answered, self._answered = self._answered, set()
        for conn in answered:
            conn.flush()

    def confirmed(self, end: int) -> None:
        """The read bound rose to ``end`` (the confirm offset, or what is synced; loop thread):
        wake the pulls that waited for less."""
        for held in [h for h in self._waiting_confirm if h.wait_end <= end]:
            self._wake(held)

    def bound_moved(self, end: int) -> None:
        """The read bound may have risen to ``end`` (SYNC_FLUSH: a sync round, in whichever
        thread ran it): :meth:`confirmed` on the loop when pulls wait for one."""
        loop = self._loop
        if loop is not None and self._waiting_confirm:
            call_soon_from_any_thread(loop, self.confirmed, end)

    def connection_closed(self, conn: RemotingConnection) -> None:
        for held in list(self._by_conn.get(conn, ())):
            self._take(held)

    async def _recheck_loop(self) -> None:
        while True:
            await asyncio.sleep(self._recheck_s)
            try:
                self.recheck()
            except Exception:
                log.exception("long-poll recheck failed")

    def recheck(self) -> None:
        """Wake every held pull whose queue grew past its offset (tags unknown: let it run)."""
        for topic, queue_id in list(self._held):
            max_offset = self.store.get_max_offset_in_queue(topic, queue_id)
            self.notify(topic, queue_id, max_offset, None)
