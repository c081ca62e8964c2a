"""Orderly consumption: each queue's messages consumed one batch at a time, in offset order.

A queue has at most one consume task, and its listener calls run under the ProcessQueue's
consume lock (dropping the queue waits for that lock, so a running batch finishes, its offset is
stored and persisted, and only then is the broker lock released to the next owner). In clustering
mode a queue is consumed only while this client holds its broker lock (LOCK_BATCH_MQ, renewed
every ``lock_renew_interval_ms``; counted as lost ``lock_max_live_time_ms`` after the last renewal), so
two members never consume one queue at once.

A batch that fails (SUSPEND_CURRENT_QUEUE_A_MOMENT, RECONSUME_LATER, an exception) is put back
in front of the queue and consumed again after ``context.suspend_current_queue_time_ms``: nothing
behind it is consumed meanwhile and nothing is ever skipped. Only when every message of the batch
has been re-consumed ``max_reconsume_times`` times (unlimited by default, as RocketMQ) is the
batch sent back with delay level -1, which makes the broker store it in ``%DLQ%{group}``, and the
queue moves on; if the broker does not take it, the queue keeps retrying. A broadcasting consumer
has no retry topic: past the limit it logs the batch and moves on.
"""

from __future__ import annotations

import asyncio
import logging
import time

from orbitmq.client.consumer.consume_concurrently import ConsumeStats, SendBack
from orbitmq.client.consumer.consume_types import (
    ConsumeContext,
    ConsumeResult,
    ListenerRunner,
    PushConsumerConfig,
    cancel_and_wait,
)
from orbitmq.client.consumer.offset_store import OffsetStore
from orbitmq.client.consumer.process_queue import ProcessQueue
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt, PropertyKey

__all__ = ["OrderlyConsumeService", "DLQ_DELAY_LEVEL"]

log = logging.getLogger(__name__)

DLQ_DELAY_LEVEL = -1  # CONSUMER_SEND_MSG_BACK with a negative level: straight to %DLQ%{group}


class OrderlyConsumeService:
    """See the module docstring."""

    def __init__(self, config: PushConsumerConfig, runner: ListenerRunner, offsets: OffsetStore,
                 send_back: SendBack) -> None:
        self.config = config
        self.runner = runner
        self.offsets = offsets
        self.send_back = send_back
        self.stats = ConsumeStats()
        self._tasks: set[asyncio.Task[None]] = set()
        self._running = True

    def submit(self, mq: MessageQueue, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        self.kick(mq, pq)

    def kick(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Start consuming ``mq`` unless a task already does or there is nothing to do."""
        if pq.consuming or pq.dropped or not pq.has_cached() or not self._running:
            return
        pq.consuming = True
        task = asyncio.ensure_future(self._run(mq, pq))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def shutdown(self, timeout: float) -> None:
        """Stop taking batches; let running ones finish for up to ``timeout`` seconds."""
        self._running = False
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)
        await cancel_and_wait(list(self._tasks))

    def _may_consume(self, pq: ProcessQueue) -> bool:
        if pq.dropped or not self._running:
            return False
        if not self.config.clustering:
            return True
        now = asyncio.get_running_loop().time()
        return pq.locked and not pq.lock_expired(now, self.config.lock_max_live_time_ms / 1000)

    async def _run(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        try:
            while self._may_consume(pq):
                batch = pq.take(self.config.consume_message_batch_max_size)
                if not batch:
                    break
                pause = await self._consume_batch(mq, pq, batch)
                if pause > 0:
                    await asyncio.sleep(pause)
        finally:
            pq.consuming = False  # no await between the last check and this: no lost kick

    async def _consume_batch(self, mq: MessageQueue, pq: ProcessQueue,
                             batch: list[MessageExt]) -> float:
        """One listener call; returns the pause before the next (0 after a success)."""
        async with pq.consume_lock:
            if pq.dropped:
                pq.put_back()
                return 0.0
            ctx = ConsumeContext(mq, self.config.group, orderly=True,
                                 suspend_current_queue_time_ms=self.config.suspend_current_queue_time_ms)
            started = time.time()
            stamp = str(int(started * 1000))
            for msg in batch:
                msg.properties[PropertyKey.CONSUME_START_TIME] = stamp
            result = await self.runner.run(batch, ctx)
            self.stats.consume_seconds += time.time() - started
            pq.last_consume_time = asyncio.get_running_loop().time()
            if result is ConsumeResult.SUCCESS:
                self.stats.ok += len(batch)
                self._commit(mq, pq)
                return 0.0
            self.stats.failed += len(batch)
            if not pq.dropped and await self._past_retry_limit(mq, batch):
                self._commit(mq, pq)
                return 0.0
            for msg in batch:
                msg.reconsume_times += 1
            pq.put_back()
            return max(ctx.suspend_current_queue_time_ms, 0) / 1000

    def _commit(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        # Also when the queue was dropped during the call: this client still holds the broker
        # lock until the drop (waiting for the consume lock) persists the offset and unlocks.
        offset = pq.commit()
        if offset >= 0:
            self.offsets.update(mq, offset)

    async def _past_retry_limit(self, mq: MessageQueue, batch: list[MessageExt]) -> bool:
        """True when the whole batch is past the retry limit and has been dead-lettered (or, in
        broadcasting mode, given up on): the queue may move on."""
        limit = self.config.effective_max_reconsume_times
        if any(msg.reconsume_times < limit for msg in batch):
            return False
        if not self.config.clustering:
            log.warning("orderly broadcasting consumer gives up on %d message(s) of %s after %d "
                        "retries", len(batch), mq, limit)
            return True
        outcomes = await asyncio.gather(*(self.send_back(m, mq, DLQ_DELAY_LEVEL) for m in batch))
        if all(outcomes):
            self.stats.dead_lettered += len(batch)
            log.warning("group=%s queue=%s: %d message(s) sent to the dead letter queue after %d "
                        "retries", self.config.group, mq, len(batch), limit)
            return True
        log.warning("group=%s queue=%s: dead-lettering failed; the queue keeps retrying",
                    self.config.group, mq)
        return False
