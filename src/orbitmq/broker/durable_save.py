"""The durable-save seam: every message the broker stores goes through here.

A send, a batch send, END_TRANSACTION's commit, CONSUMER_SEND_MSG_BACK, a delayed message's
delivery and the transaction check's re-stored half messages are saved the same way:

1. ``append``: the store facade's one put (``MessageStore.put``); it never waits. The store's
   threads are not woken per put: one ``MessageStore.wake`` per event-loop iteration runs the
   group commit round and the dispatch for every put of that iteration (in the loop's thread, see
   MessageStore.wake). When the answers wait for a condition (below) the wake runs as soon as the
   requests read so far are taken; when they do not, two iterations on (the answers have left
   with their read), or in the read itself for a lone send while pulls wait (``appended``).
2. ``answer`` / ``settled``: wait until every *durability condition* holds up to the append's end
   offset, bounded by the conditions' ``wait_max_s``; a condition that fails or times out
   changes the put's status into its ``failure_status`` (FLUSH_DISK_TIMEOUT, ...).
3. ``put_answer``: the store's outcome as RocketMQ's response code and remark, the one mapping.

A durability condition offers "durable up to offset N" as a ``concurrent.futures.Future[bool]``
that requests made close together share (the store's group commit hands the same future to
every put of one round). Every answer waiting on the same futures forms one group: one timer, one
cross-thread hand-off per condition, however many sends it holds. That is what keeps SYNC_FLUSH
at one future and one timer per group commit (bench/journal/PROFILE.md), and what replication will reuse:
a SYNC_MASTER adds a condition "a slave holds the bytes up to N" (FLUSH_SLAVE_TIMEOUT when it does
not come in time, SLAVE_NOT_AVAILABLE when no slave is there) in :func:`durability_conditions`,
the one place that decides what "durable" means. With no condition (ASYNC_FLUSH, no replication)
an answer is built at once, in the handler's call: no future, no task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from orbitmq.config import BrokerConfig, BrokerRole
from orbitmq.errors import ClientError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX
from orbitmq.protocol.stored import EncodedBatch
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.message_store import MessageStore
from orbitmq.store.status import PutMessageResult, PutMessageStatus

__all__ = ["DurableSave", "DurabilityCondition", "DiskSync", "Unmet", "durability_conditions",
           "put_answer", "APPENDED", "WAIT_GRACE_S"]

log = logging.getLogger(__name__)

R = TypeVar("R")
Batch = Sequence[MessageInner] | EncodedBatch

WAIT_GRACE_S = 1.0  # a condition's own deadline answers first; this timer only if it never does
_PUT_OK = PutMessageStatus.PUT_OK

# Statuses after which the bytes are in the commit log: a send's answer names them (msgId, queue
# offset) even when the code says they are not durable yet, as RocketMQ's does.
APPENDED = frozenset({PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                      PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE})

_PUT_ANSWERS: dict[PutMessageStatus, tuple[ResponseCode, str | None]] = {
    PutMessageStatus.PUT_OK: (ResponseCode.SUCCESS, None),
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (ResponseCode.FLUSH_DISK_TIMEOUT, "flush to disk timed out"),
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (ResponseCode.FLUSH_SLAVE_TIMEOUT, "flush to slave timed out"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (ResponseCode.SLAVE_NOT_AVAILABLE, "slave not available"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        ResponseCode.SERVICE_NOT_AVAILABLE,
        "service not available now: the store is stopped or the disk is full"),
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: (
        ResponseCode.SYSTEM_ERROR, "create mapped file failed, server is busy or broken"),
    PutMessageStatus.MESSAGE_ILLEGAL: (
        ResponseCode.MESSAGE_ILLEGAL,
        "the message is illegal: body, topic or properties too long or malformed"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        ResponseCode.MESSAGE_ILLEGAL, f"the message properties exceed {PROPERTIES_SIZE_MAX} bytes"),
    PutMessageStatus.OS_PAGECACHE_BUSY: (ResponseCode.SYSTEM_BUSY, "[PC_SYNCHRONIZED]broker busy, try later"),
    PutMessageStatus.UNKNOWN_ERROR: (ResponseCode.SYSTEM_ERROR, "unknown error while storing the message"),
}


def put_answer(result: PutMessageResult) -> tuple[ResponseCode, str | None]:
    """The response code and remark for a put's outcome (the store's own remark, when it gave
    one, says why better than the status: which disk condition refused the put)."""
    code, remark = _PUT_ANSWERS.get(result.status, (ResponseCode.SYSTEM_ERROR, result.status.value))
    return code, result.remark or remark


class Unmet:
    """What a condition's future may hold instead of False: the failure's own status and
    remark (a replica condition tells SLAVE_NOT_AVAILABLE from FLUSH_SLAVE_TIMEOUT this way)."""

    __slots__ = ("status", "remark")

    def __init__(self, status: PutMessageStatus, remark: str | None = None) -> None:
        self.status = status
        self.remark = remark

    def __repr__(self) -> str:
        return f"Unmet({self.status.value}, {self.remark!r})"


class DurabilityCondition(Protocol):
    """One thing that must hold before a save counts as durable."""

    @property
    def wait_max_s(self) -> float:
        """The longest an answer waits for this condition (its own deadline comes first)."""
        ...

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[Any]:
        """A future that turns True once the condition holds for every byte below ``offset``,
        False (or an :class:`Unmet` naming the failure) when it will not (in time). Requests
        close together should share one future: the seam answers every save waiting on the same
        futures with one hand-off."""
        ...

    def failure_status(self) -> PutMessageStatus:
        """The status of a save this condition did not make durable (asked when it failed)."""
        ...


class DiskSync:
    """The store's group commit as a condition (SYNC_FLUSH): synced to disk up to the offset."""

    def __init__(self, store: MessageStore, sync_timeout_ms: int) -> None:
        self._store = store
        self.wait_max_s = sync_timeout_ms / 1000 + WAIT_GRACE_S

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[bool]:
        return self._store.durable_up_to(offset)

    def failure_status(self) -> PutMessageStatus:
        return PutMessageStatus.FLUSH_DISK_TIMEOUT


def durability_conditions(config: BrokerConfig, store: MessageStore,
                          role: BrokerRole | None = None,
                          replica_ack: DurabilityCondition | None = None,
                          ) -> list[DurabilityCondition]:
    """What "durable" means for this broker in ``role`` (default: the configured one): synced
    to disk under SYNC_FLUSH, and held by a slave too for a SYNC_MASTER (``replica_ack``:
    broker/replication/replica_ack.py, FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE when it does
    not hold). A slave saves nothing of its own."""
    role = config.broker_role if role is None else role
    conditions: list[DurabilityCondition] = []
    if store.sync_flush:
        conditions.append(DiskSync(store, config.store.sync_flush_timeout_ms))
    if role is BrokerRole.SYNC_MASTER:
        if replica_ack is None:
            raise ClientError("a SYNC_MASTER needs its slaves' acknowledgements (replica_ack)")
        conditions.append(replica_ack)
    return conditions


class _Group:
    """The saves waiting on one tuple of condition futures (and the conditions they came from:
    a role change may replace the broker's conditions while they wait)."""

    __slots__ = ("timer", "waiters", "pending", "conditions")

    def __init__(self, timer: asyncio.TimerHandle, pending: int,
                 conditions: tuple[DurabilityCondition, ...]) -> None:
        self.timer = timer
        self.waiters: list[tuple[asyncio.Future[Any], PutMessageResult, Callable[..., Any],
                                 tuple[Any, ...]]] = []
        self.pending = pending  # conditions not yet known to hold
        self.conditions = conditions


def _same(result: PutMessageResult) -> PutMessageResult:
    return result


def _verdict(future: concurrent.futures.Future[Any]) -> bool | Unmet:
    """What a condition's future says: True when it holds (done, True, no error), its Unmet
    when it names a failure, else False."""
    if not future.done() or future.cancelled() or future.exception() is not None:
        return False
    result = future.result()
    return result if isinstance(result, Unmet) else result is True


def _held(future: concurrent.futures.Future[Any]) -> bool:
    return _verdict(future) is True


class DurableSave:
    """Appends through the store facade and answers once the save is durable (module docstring).

    Args:
        store: the broker's store.
        conditions: what must hold before a save is acknowledged (``durability_conditions``).

    Loop-owned: ``start`` binds it to the running loop; before that (and after ``stop``) the
    store's wakeups run at once, in the caller's thread.
    """

    def __init__(self, store: MessageStore, conditions: Sequence[DurabilityCondition]) -> None:
        self.store = store
        self._put = store.put
        self._groups: dict[tuple[concurrent.futures.Future[Any], ...], _Group] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._wake_scheduled = False
        self._appends = 0  # appends of this loop iteration (since the last wake)
        self._appends_before = 0  # ... of the last iteration that appended
        self._synced_alone = False  # this iteration's append was made durable by sync_alone
        self._appended: list[Callable[[], None]] = []
        # Whether consumers wait on a topic (held pulls): a lone send to it is then dispatched
        # before its answer leaves (``deliver_first``; set by the controller; None: never).
        self.pulls_waiting: Callable[[str], bool] | None = None
        self.set_conditions(conditions)

    def set_conditions(self, conditions: Sequence[DurabilityCondition]) -> None:
        """What saves from now on wait for (a role change); saves waiting keep their own."""
        self.conditions: tuple[DurabilityCondition, ...] = tuple(conditions)
        self._waits = tuple(c.durable_up_to for c in self.conditions)  # bound once: a hot path
        self._wait_max_s = max((c.wait_max_s for c in self.conditions), default=0.0)

    @property
    def answers_at_once(self) -> bool:
        """True when no save waits for anything (no condition): an answer is built in the
        handler's call. A fast path that cannot wait must leave sends alone otherwise."""
        return not self.conditions

    def on_appended(self, listener: Callable[[], None]) -> None:
        """``listener()`` once per loop iteration that appended, right after the store's wake
        (replication streams what was appended without waiting for a poll)."""
        self._appended.append(listener)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def stop(self) -> None:
        """Answer every waiting save as not durable (the store is about to shut down)."""
        for key in list(self._groups):
            self._finish(key, self._first_unmet(key))
        self._loop = None

    # -- appending ------------------------------------------------------------------------------
    def append(self, batch: Batch) -> PutMessageResult:
        """Append ``batch`` (one topic and queue) and have the store woken this loop iteration."""
        result = self._put(batch)
        self._appends += 1
        if not self._wake_scheduled:
            self._schedule_wake()
        return result

    def deliver_first(self, topic: str) -> bool:
        """Whether a lone send to ``topic`` (a read of one send request, its bytes appended and
        nothing to wait for) should be dispatched before its answer is written: pulls wait on
        the topic, so the dispatch answers them (LongPollService.on_arrival) and the message
        leaves for its consumer first. One loop writes both answers, and a write to a sleeping
        peer holds it tens of microseconds or more (the loopback runs the peer's receive and
        wake-up in the writer's call): whichever leaves first delays the other by that much.
        Delivery first shortens a message's way to its consumer by about a fifth and lets a
        producer that sends one at a time to a waiting consumer send more a second (the broker
        is ready for its next send sooner); a producer sending slower than the broker answers
        has its answer later (docs/performance.md, "What bounds the p50")."""
        waiting = self.pulls_waiting
        return (not self.conditions and self._loop is not None and waiting is not None
                and waiting(topic))

    def appended(self, *, dispatch: bool = False) -> None:
        """Bytes were appended without ``append`` (the native fast path): have the store woken
        this loop iteration all the same. ``dispatch``: dispatch them right here too, in the
        read's own callback (``deliver_first`` said so): the pulls it wakes are answered in it,
        no loop iteration in between (the iteration's wake still runs, for any other append and
        the listeners)."""
        self._appends += 1
        if not self._wake_scheduled:
            self._schedule_wake()
        if dispatch:
            self.store.wake()

    def _schedule_wake(self) -> None:
        """``store.wake`` once for these puts: at once when answers wait for it (a sync), else
        two iterations on, so that the reads of the next iteration join the same dispatch round
        and the pull answers it gives carry more messages each (a loaded broker: with the wake
        one iteration on, 40,000 msgs/s end to end had a 1.2-1.3x delivery p50 and a 2-3x p99;
        a lone send is dispatched in its own read instead, see ``appended``). Held pulls are
        answered in that dispatch (LongPollService.on_arrival)."""
        loop = self._loop
        if loop is None:
            self.store.wake()
            return
        self._wake_scheduled = True
        if self.conditions:
            loop.call_soon(self._wake)
        else:
            loop.call_soon(loop.call_soon, self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self._appends_before, self._appends = self._appends, 0
        if not self.conditions or self._loop is None:
            self.store.wake()
        else:
            # The sync round first: the saves it made durable are answered (their callbacks run
            # next iteration and write at once) before the dispatch, which waits its turn. A
            # lone producer's send was answered already (``sync_alone``): its dispatch runs next
            # iteration, while the producer turns the answer around (~100 us on loopback), so
            # that it is over before the next send comes. (A timer of 1 ms, one round for a few
            # sends, went off in the middle of one: 26-64 us more p50. Dispatching in this
            # call instead cost 7% more CPU a send and +5% p50 in one sitting.)
            self.store.wake(dispatch=False)
            if self._synced_alone and self._appends_before == 1:
                self._loop.call_soon(self.store.wake)
            else:
                # two iterations on, as before this branch: one on (behind the answers'
                # callbacks this round queued) cost 4 producers' SYNC_FLUSH throughput 5-9%
                # (smaller dispatch rounds) in one sitting
                self._loop.call_soon(self._dispatch_after_answers)
        self._synced_alone = False
        for listener in self._appended:
            listener()

    def _dispatch_after_answers(self) -> None:
        if self._loop is not None:
            self._loop.call_soon(self.store.wake)

    # -- waiting --------------------------------------------------------------------------------
    def sync_alone(self, end: int) -> PutMessageStatus | None:
        """The status of a save ending at ``end`` made durable right here, in the loop's thread,
        by one sync (the disk's is the only condition): PUT_OK, or FLUSH_DISK_TIMEOUT when the
        sync failed or came late; None, nothing done, unless the save is alone, i.e. the only
        append of this loop iteration and of the last one (one producer waiting for each
        answer: a group would not form, and the answer leaves without a future, a timer or a
        loop iteration in between), and the store can sync now. Call it before ``appended``.
        With many producers the iteration's appends share the wake's one sync (``answer``)."""
        if (self._appends or self._appends_before > 1 or len(self.conditions) != 1
                or not isinstance(self.conditions[0], DiskSync) or self._loop is None):
            return None
        durable = self.store.sync_now(end)
        if durable is None:
            return None
        self._synced_alone = True
        return _PUT_OK if durable else PutMessageStatus.FLUSH_DISK_TIMEOUT

    def answer(self, result: PutMessageResult, respond: Callable[..., R],
               *args: Any) -> R | asyncio.Future[R]:
        """``respond(result, *args)``: now when there is nothing to wait for (no condition, or
        the put was refused), else a loop future of it once every condition holds up to the
        append's end; ``result.status`` is then the first failed condition's failure status
        when one did not hold in time. No task and no coroutine: the send path's answer."""
        append = result.append
        if not self.conditions or append is None or result.status is not _PUT_OK:
            return respond(result, *args)
        loop = self._loop or asyncio.get_running_loop()
        end = append.wrote_offset + append.wrote_bytes
        waits = self._waits
        key = (waits[0](end),) if len(waits) == 1 else tuple([wait(end) for wait in waits])
        group = self._groups.get(key)
        if group is None:
            group = self._new_group(loop, key)
        answer: asyncio.Future[R] = loop.create_future()
        group.waiters.append((answer, result, respond, args))
        return answer

    async def settled(self, result: PutMessageResult) -> PutMessageResult:
        """``result`` once durable (``answer`` for the broker's own services)."""
        outcome = self.answer(result, _same)
        return outcome if isinstance(outcome, PutMessageResult) else await outcome

    async def save(self, batch: Batch) -> PutMessageResult:
        """``append`` and wait: the outcome is PUT_OK only when the save is durable."""
        return await self.settled(self.append(batch))

    def _new_group(self, loop: asyncio.AbstractEventLoop,
                   key: tuple[concurrent.futures.Future[Any], ...]) -> _Group:
        timer = loop.call_later(self._wait_max_s, self._expired, key)
        group = self._groups[key] = _Group(timer, len(key), self.conditions)
        registered = False  # a future done already calls back at once: wait for the waiter then
        for index, future in enumerate(key):

            def done(f: concurrent.futures.Future[Any], index: int = index) -> None:
                # On the loop (a sync run by store.wake): at once, no hand-over through the loop's
                # self-pipe; from a store thread: handed over.
                if registered and threading.get_ident() == self._loop_thread:
                    self._condition_done(key, index, _verdict(f))
                    return
                try:
                    loop.call_soon_threadsafe(self._condition_done, key, index, _verdict(f))
                except RuntimeError:  # the loop closed meanwhile (broker stopped)
                    pass

            future.add_done_callback(done)
        registered = True
        return group

    def _condition_done(self, key: tuple[concurrent.futures.Future[Any], ...], index: int,
                        verdict: bool | Unmet) -> None:
        group = self._groups.get(key)
        if group is None:  # answered already (timed out)
            return
        if isinstance(verdict, Unmet):
            self._finish(key, verdict.status, verdict.remark)
            return
        if not verdict:
            self._finish(key, group.conditions[index].failure_status())
            return
        group.pending -= 1
        if group.pending == 0:
            self._finish(key, None)

    def _expired(self, key: tuple[concurrent.futures.Future[Any], ...]) -> None:
        if key in self._groups:
            log.warning("durability wait expired after %.1f s", self._wait_max_s)
            self._finish(key, self._first_unmet(key))

    def _first_unmet(self, key: tuple[concurrent.futures.Future[Any], ...]) -> PutMessageStatus:
        conditions = self._groups[key].conditions if key in self._groups else self.conditions
        for condition, future in zip(conditions, key, strict=True):
            verdict = _verdict(future)
            if isinstance(verdict, Unmet):
                return verdict.status
            if not verdict:
                return condition.failure_status()
        return conditions[0].failure_status()

    def _finish(self, key: tuple[concurrent.futures.Future[Any], ...],
                failure: PutMessageStatus | None, remark: str | None = None) -> None:
        """Answer every save of a group, once (on the loop)."""
        group = self._groups.pop(key, None)
        if group is None:
            return
        group.timer.cancel()
        for answer, result, respond, args in group.waiters:
            if failure is not None:
                result.status = failure
                if remark is not None:
                    result.remark = remark
            if answer.done():
                continue
            try:
                answer.set_result(respond(result, *args))
            except Exception as e:  # the transport answers it as our bug, logged
                answer.set_exception(e)
