"""The push consumer's rebalance: which queues this member holds, and taking them up or letting
them go cleanly.

A round runs at start, every ``rebalance_interval_ms`` (10 s), when a broker sends
NOTIFY_CONSUMER_IDS_CHANGED, and one second after an orderly queue could not be locked. Per
subscribed topic it takes the topic's readable queues from its route and, in clustering mode, the
group's client ids from one broker of the topic (GET_CONSUMER_LIST_BY_GROUP), sorts both and lets
the allocation strategy choose this member's share; broadcasting members take every queue.

- A queue taken up gets a ProcessQueue and a pull loop starting at the group's stored offset or,
  when the store has none, where ``consume_from`` says. Orderly clustering members lock the queue
  on its broker first (LOCK_BATCH_MQ) and skip it this round if another member still holds it.
- A queue let go is marked dropped (its pull stops, finished batches no longer move its offset),
  its offset is persisted and forgotten. Orderly members first wait for the batch being consumed
  (the consume lock), then persist, then unlock the queue on the broker, so the next owner starts
  exactly after the last acknowledged message.

Orderly locks are lost, and the queue stops being consumed, when a renewal is refused or fails,
and at once when the connection to the queue's broker is lost: a restarted broker has forgotten
every lock, so a member must not go on consuming under a lock another member may take from the
restarted broker. A held queue that is not locked is locked again by a background task with a
bounded backoff (RELOCK_DELAY_MIN_S doubling up to RELOCK_DELAY_MAX_S), so a broker restart
stalls orderly consumption for seconds, not until the next 20 s renewal. The broker grants a lock
to one client at a time, so two members never hold one queue, whatever their rebalances decide
while the restarted broker does not yet know every member.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from orbitmq.client.consumer.consume_types import (
    ConsumeFrom,
    PushConsumerConfig,
    cancel_and_wait,
    retry_topic,
)
from orbitmq.client.consumer.offset_store import OffsetStore
from orbitmq.client.consumer.process_queue import ProcessQueue
from orbitmq.client.consumer.pull_service import PullService
from orbitmq.client.consumer.rebalance import AllocateStrategy
from orbitmq.client.instance import ClientInstance, check_response
from orbitmq.client.route import subscribe_queues_from_route
from orbitmq.protocol.bodies import (
    ConsumerListBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    SearchOffsetByTimestampRequestHeader,
    SearchOffsetByTimestampResponseHeader,
)

__all__ = ["RebalanceService"]

log = logging.getLogger(__name__)

LOCK_RETRY_DELAY_S = 1.0
RELOCK_DELAY_MIN_S = 0.2
RELOCK_DELAY_MAX_S = 3.0
_UNLOCK_TIMEOUT_S = 3.0

Invoke = Callable[[MessageQueue, int, Any], Awaitable[RemotingCommand]]


class RebalanceService:
    """Owns the ProcessQueue table (see the module docstring)."""

    def __init__(self, config: PushConsumerConfig, instance: ClientInstance,
                 strategy: AllocateStrategy, subscriptions: dict[str, SubscriptionData],
                 offsets: OffsetStore, invoke: Invoke) -> None:
        self.config = config
        self.instance = instance
        self.strategy = strategy
        self.subscriptions = subscriptions
        self.offsets = offsets
        self.invoke = invoke
        self.pull: PullService | None = None  # set by the consumer before start
        self.kick: Callable[[MessageQueue, ProcessQueue], None] = lambda mq, pq: None
        self.table: dict[MessageQueue, ProcessQueue] = {}
        self.rounds = 0
        self._releasing: dict[MessageQueue, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._retry_soon = False
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._relock_task: asyncio.Task[None] | None = None

    # -- the loop --------------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    def request(self) -> None:
        """Rebalance as soon as possible (NOTIFY_CONSUMER_IDS_CHANGED, a moved offset...)."""
        self._wake.set()

    async def _loop(self) -> None:
        # The flag, not only the cancellation, ends the loop: a cancel arriving just as a wait
        # ends can be lost inside asyncio's timeout helpers.
        while not self._stopped:
            self._wake.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalance failed group=%s", self.config.group)
            interval = self.config.rebalance_interval_ms / 1000
            wait = LOCK_RETRY_DELAY_S if self._retry_soon else interval
            try:
                async with asyncio.timeout(min(wait, interval)):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            await cancel_and_wait([self._task])
        if self._relock_task is not None:
            await cancel_and_wait([self._relock_task])
        if self._releasing:  # orderly hand-overs finishing (each waits for at most one batch)
            await asyncio.wait(list(self._releasing.values()),
                               timeout=self.config.await_termination_ms / 1000)

    # -- one round -------------------------------------------------------------------------------
    async def rebalance(self) -> None:
        """One round over every subscribed topic."""
        self._retry_soon = False
        for topic in list(self.subscriptions):
            allocated = await self._allocate(topic)
            if allocated is not None:
                await self._update_table(topic, allocated)
        await self._drop([mq for mq in self.table if mq.topic not in self.subscriptions])
        self.rounds += 1

    async def _allocate(self, topic: str) -> set[MessageQueue] | None:
        queues = await self._topic_queues(topic)
        if queues is None:
            return None
        if not self.config.clustering:
            return set(queues)
        cids = await self._consumer_ids(topic)
        if not cids:
            return None
        mine = self.strategy.allocate(self.config.group, self.instance.client_id, sorted(queues),
                                      sorted(cids))
        return set(mine)

    async def _topic_queues(self, topic: str) -> list[MessageQueue] | None:
        route = self.instance.cached_route(topic)
        if route is None:
            route = await self.instance.update_route(topic)
        if route is None:
            log.info("no route yet for topic=%s group=%s", topic, self.config.group)
            return None
        return subscribe_queues_from_route(topic, route)

    async def _consumer_ids(self, topic: str) -> list[str] | None:
        route = self.instance.cached_route(topic)
        names = sorted({bd.broker_name for bd in route.broker_datas}) if route else []
        if not names:
            return None
        name = random.choice(names)
        try:
            addr = await self.instance.find_broker_addr(name, topic)
            header = GetConsumerListByGroupRequestHeader(self.config.group)
            cmd = RemotingCommand.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                                          header.to_ext_fields())
            resp = check_response(await self.instance.remoting.invoke(
                addr, cmd, self.instance.rpc_timeout))
            return ConsumerListBody.from_json(resp.body).consumer_id_list
        except Exception as e:
            log.info("consumer list of group=%s from broker %s failed: %r", self.config.group,
                     name, e)
            return None

    async def _update_table(self, topic: str, allocated: set[MessageQueue]) -> None:
        await self._drop([mq for mq in self.table if mq.topic == topic and mq not in allocated])
        for mq in sorted(allocated - set(self.table)):
            if mq in self._releasing:
                self._retry_soon = True  # still being handed over by an earlier round
                continue
            await self._take_up(mq)

    async def _take_up(self, mq: MessageQueue) -> None:
        cfg = self.config
        loop = asyncio.get_running_loop()
        locked = False
        if cfg.orderly and cfg.clustering:
            locked = await self.lock(mq)
            if not locked:
                self._retry_soon = True
                log.info("queue %s still locked by another member of group=%s", mq, cfg.group)
                return
        try:
            offset = await self.compute_start_offset(mq)
        except Exception as e:
            log.warning("cannot find where to start queue=%s group=%s: %r", mq, cfg.group, e)
            if locked:
                await self.unlock(mq.broker_name, [mq])
            return
        pq = ProcessQueue(mq, locked=locked, last_lock_time=loop.time() if locked else 0.0)
        self.offsets.update(mq, offset)
        self.table[mq] = pq
        assert self.pull is not None
        self.pull.start_queue(mq, pq, offset)
        log.info("queue taken up group=%s queue=%s offset=%d", cfg.group, mq, offset)

    async def compute_start_offset(self, mq: MessageQueue) -> int:
        """The stored offset, or where ``consume_from`` says when the store has none."""
        stored = await self.offsets.read_from_store(mq)
        if stored >= 0:
            return stored
        cfg = self.config
        is_retry = mq.topic == retry_topic(cfg.group)
        if cfg.consume_from is ConsumeFrom.FIRST or (is_retry and cfg.consume_from is ConsumeFrom.LAST):
            return 0
        if cfg.consume_from is ConsumeFrom.LAST or is_retry:
            resp = check_response(await self.invoke(
                mq, RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(mq.topic, mq.queue_id)))
            return GetMaxOffsetResponseHeader.from_ext_fields(resp.ext_fields).offset
        header = SearchOffsetByTimestampRequestHeader(mq.topic, mq.queue_id,
                                                      cfg.start_timestamp_ms())
        resp = check_response(await self.invoke(mq, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header))
        return SearchOffsetByTimestampResponseHeader.from_ext_fields(resp.ext_fields).offset

    # -- letting queues go -----------------------------------------------------------------------
    async def _drop(self, mqs: list[MessageQueue]) -> None:
        """Let ``mqs`` go: stop them at once, then persist their offsets together."""
        if not mqs:
            return
        assert self.pull is not None
        dropped = []
        for mq in mqs:
            pq = self.table.pop(mq)
            pq.dropped = True
            self.pull.stop_queue(mq)
            dropped.append((mq, pq))
            log.info("queue let go group=%s queue=%s", self.config.group, mq)
        if self.config.orderly and self.config.clustering:
            for mq, pq in dropped:
                task = asyncio.ensure_future(self._release_locked(mq, pq))
                self._releasing[mq] = task
                task.add_done_callback(functools.partial(self._released, mq))
            return
        await self._persist_and_forget(mqs)
        for _, pq in dropped:
            pq.clear()

    async def _persist_and_forget(self, mqs: list[MessageQueue]) -> None:
        try:
            await self.offsets.persist(mqs)
        except Exception as e:
            log.warning("persisting the offsets of dropped queues %s failed: %r", mqs, e)
        for mq in mqs:
            self.offsets.remove(mq)

    def _released(self, mq: MessageQueue, _task: asyncio.Task[None]) -> None:
        self._releasing.pop(mq, None)

    async def _release_locked(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        async with pq.consume_lock:  # the batch being consumed finishes and commits first
            await self._persist_and_forget([mq])
            pq.clear()
            await self.unlock(mq.broker_name, [mq])

    async def forget(self, mq: MessageQueue, pq: ProcessQueue, next_offset: int) -> None:
        """PULL_OFFSET_MOVED: store ``next_offset``, persist it, let the queue go; the next round
        takes it up again from there."""
        self.offsets.update(mq, next_offset)
        try:
            await self.offsets.persist([mq])
        except Exception as e:
            log.warning("persisting moved offset queue=%s failed: %r", mq, e)
        if self.table.get(mq) is pq:
            del self.table[mq]
            pq.clear()
        self.request()

    # -- orderly locks ---------------------------------------------------------------------------
    async def lock(self, mq: MessageQueue) -> bool:
        return mq in await self._lock_batch(mq.broker_name, [mq])

    async def _lock_batch(self, broker_name: str, mqs: list[MessageQueue]) -> set[MessageQueue]:
        body = LockBatchRequestBody(self.config.group, self.instance.client_id, mqs)
        try:
            addr = await self.instance.find_broker_addr(broker_name, mqs[0].topic)
            cmd = RemotingCommand.request(RequestCode.LOCK_BATCH_MQ, body=body.to_json())
            resp = check_response(await self.instance.remoting.invoke(
                addr, cmd, self.instance.rpc_timeout))
            return set(LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set)
        except Exception as e:
            log.info("LOCK_BATCH_MQ on %s failed group=%s: %r", broker_name, self.config.group, e)
            return set()

    async def unlock(self, broker_name: str, mqs: list[MessageQueue]) -> None:
        body = UnlockBatchRequestBody(self.config.group, self.instance.client_id, mqs)
        try:
            addr = await self.instance.find_broker_addr(broker_name, mqs[0].topic)
            cmd = RemotingCommand.request(RequestCode.UNLOCK_BATCH_MQ, body=body.to_json())
            check_response(await self.instance.remoting.invoke(addr, cmd, _UNLOCK_TIMEOUT_S))
        except Exception as e:
            log.info("UNLOCK_BATCH_MQ on %s failed group=%s: %r", broker_name, self.config.group, e)

    def _by_broker(self) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = {}
        for mq in sorted(self.table):
            out.setdefault(mq.broker_name, []).append(mq)
        return out

    async def lock_all(self) -> None:
        """Renew the locks of every held queue (every ``lock_renew_interval_ms``); a queue whose
        renewal failed stops being pulled and consumed until the re-lock task locks it again."""
        lost = False
        for broker_name, mqs in self._by_broker().items():
            ok = await self._lock_batch(broker_name, mqs)
            lost |= self._apply_locks(mqs, ok)
        if lost:
            self.relock_soon()

    def _apply_locks(self, mqs: list[MessageQueue], ok: set[MessageQueue]) -> bool:
        """Record a LOCK_BATCH_MQ answer; True when some queue of ``mqs`` is not locked."""
        now = asyncio.get_running_loop().time()
        missing = False
        for mq in mqs:
            pq = self.table.get(mq)
            if pq is None or pq.dropped:
                continue
            if mq in ok:
                if not pq.locked:
                    log.info("queue locked again group=%s queue=%s", self.config.group, mq)
                pq.locked, pq.last_lock_time = True, now
                self.kick(mq, pq)
                continue
            missing = True
            if pq.locked:
                log.warning("lost the lock of queue=%s group=%s", mq, self.config.group)
                pq.locked = False
        return missing

    def broker_lost(self, addr: str) -> None:
        """The connection to broker ``addr`` is gone: its locks may be gone with it (a restart
        forgets them all), so stop consuming its queues now and lock them again when it is back."""
        if not (self.config.orderly and self.config.clustering) or self._stopped:
            return
        unlocked = False
        for mq, pq in self.table.items():
            if pq.locked and self.instance.broker_addr(mq.broker_name) == addr:
                pq.locked = False
                unlocked = True
        if unlocked:
            log.warning("connection to broker %s lost: its queues are unlocked until locked "
                        "again group=%s", addr, self.config.group)
            self.relock_soon()

    def relock_soon(self) -> None:
        """Start the re-lock task unless it runs (see the module docstring)."""
        if self._stopped or (self._relock_task is not None and not self._relock_task.done()):
            return
        self._relock_task = asyncio.ensure_future(self._relock_loop())

    async def _relock_loop(self) -> None:
        delay = RELOCK_DELAY_MIN_S
        while not self._stopped:
            await asyncio.sleep(delay)
            pending: dict[str, list[MessageQueue]] = {}
            for mq, pq in sorted(self.table.items()):
                if not pq.locked and not pq.dropped:
                    pending.setdefault(mq.broker_name, []).append(mq)
            if not pending:
                return
            progress = False
            for broker_name, mqs in pending.items():
                ok = await self._lock_batch(broker_name, mqs)
                progress |= bool(ok)
                self._apply_locks(mqs, ok)
            delay = RELOCK_DELAY_MIN_S if progress else min(delay * 2, RELOCK_DELAY_MAX_S)

    async def unlock_all(self) -> None:
        await asyncio.gather(*(self.unlock(b, mqs) for b, mqs in self._by_broker().items()))
