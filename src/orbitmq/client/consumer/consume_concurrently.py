"""Concurrent consumption: batches of a queue's messages consumed in parallel, in any order.

Pulled messages are cut into batches of ``consume_message_batch_max_size`` and each batch is one
listener call (on the consume thread pool, or the loop for coroutine listeners). When a call
ends, its messages leave the ProcessQueue and the queue's offset moves to the lowest message still
cached, never past one still being consumed.

Priority messages (a ``__PRIORITY`` property, 0..9; a PRIORITY topic's): batches wait for a
worker highest priority first (then in the order they came), and a pull's messages are cut into
batches of one priority each; so when a backlog is cached, a higher-priority message is consumed
before the lower ones waiting, whether it came from its topic's queue or from the group's retry
topic (a failed message keeps its priority there). Messages without one have priority 0.

Failed messages (RECONSUME_LATER, an exception, or those after ``context.ack_index``):

- clustering: each goes back to its broker with CONSUMER_SEND_MSG_BACK, which stores it in
  ``%RETRY%{group}`` with a delay level (``context.delay_level_when_next_consume``; 0 lets the broker
  use 3 + reconsume times, and after ``max_reconsume_times`` it parks the message in
  ``%DLQ%{group}``). A message the broker did not take back stays cached, so the offset cannot pass
  it, and is consumed again here after ``LOCAL_RETRY_DELAY_S``;
- broadcasting: no retry (RocketMQ's rule): the failure is logged and the message acknowledged.

A dropped queue's finished batches change nothing: its offset was persisted when it was dropped
and the queue's new owner starts from there (at-least-once, never a gap).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable

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
from orbitmq.protocol.topic_attributes import priority_of

__all__ = ["ConcurrentConsumeService", "SendBack", "ConsumeStats"]

log = logging.getLogger(__name__)

LOCAL_RETRY_DELAY_S = 5.0  # RocketMQ re-submits a batch it could not send back after 5 s

# (message, its queue, delay level) -> True when the broker took it back
SendBack = Callable[[MessageExt, MessageQueue, int], Awaitable[bool]]


class ConsumeStats:
    """Counters reported by GET_CONSUMER_RUNNING_INFO."""

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0
        self.sent_back = 0
        self.dead_lettered = 0
        self.consume_seconds = 0.0

    def as_dict(self) -> dict[str, float]:
        calls = self.ok + self.failed
        return {
            "consumeOKTotal": self.ok,
            "consumeFailedTotal": self.failed,
            "sentBackTotal": self.sent_back,
            "deadLetteredTotal": self.dead_lettered,
            "consumeRT": round(self.consume_seconds * 1000 / calls, 3) if calls else 0.0,
        }


class ConcurrentConsumeService:
    """See the module docstring.

    Batches wait in a queue for one of ``consume_thread_nums`` workers; a worker skips a batch
    whose queue was dropped meanwhile, so a queue handed over stops costing listener calls at
    once (its new owner consumes those messages).
    """

    def __init__(self, config: PushConsumerConfig, runner: ListenerRunner, offsets: OffsetStore,
                 send_back: SendBack) -> None:
        self.config = config
        self.runner = runner
        self.offsets = offsets
        self.send_back = send_back
        self.stats = ConsumeStats()
        # (-priority, arrival, (queue, its process queue, batch)): the highest priority first
        self._batches: asyncio.PriorityQueue[
            tuple[int, int, tuple[MessageQueue, ProcessQueue, list[MessageExt]]]] = (
            asyncio.PriorityQueue())
        self._arrival = itertools.count()
        self._workers: list[asyncio.Task[None]] = []
        self._busy = 0
        self._stopped = False
        self._later: set[asyncio.Task[None]] = set()

    def submit(self, mq: MessageQueue, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        if not self._workers:
            self._workers = [asyncio.ensure_future(self._work())
                             for _ in range(self.config.consume_thread_nums)]
        size = self.config.consume_message_batch_max_size
        if not any(PropertyKey.PRIORITY in m.properties for m in messages):
            for i in range(0, len(messages), size):
                self._batches.put_nowait((0, next(self._arrival), (mq, pq, messages[i:i + size])))
            return
        by_priority: dict[int, list[MessageExt]] = {}
        for m in messages:
            by_priority.setdefault(priority_of(m.properties), []).append(m)
        for priority in sorted(by_priority, reverse=True):
            same = by_priority[priority]
            for i in range(0, len(same), size):
                self._batches.put_nowait((-priority, next(self._arrival), (mq, pq, same[i:i + size])))

    def _submit_later(self, mq: MessageQueue, pq: ProcessQueue, messages: list[MessageExt]) -> None:
        async def later() -> None:
            await asyncio.sleep(LOCAL_RETRY_DELAY_S)
            if not pq.dropped:
                self.submit(mq, pq, messages)

        task = asyncio.ensure_future(later())
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    async def _work(self) -> None:
        while not self._stopped:
            _, _, (mq, pq, batch) = await self._batches.get()
            if pq.dropped or self._stopped:
                continue
            self._busy += 1
            try:
                await self._consume(mq, pq, batch)
            except Exception:  # a bug here must not kill the worker
                log.exception("consuming a batch of %s failed", mq)
            finally:
                self._busy -= 1

    async def shutdown(self, timeout: float) -> None:
        """Let running batches finish for up to ``timeout`` seconds, then abandon the rest (their
        messages are not acknowledged and come again to whoever consumes the queue next)."""
        self._stopped = True
        while not self._batches.empty():  # waiting batches are not started any more
            self._batches.get_nowait()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._busy and loop.time() < deadline:
            await asyncio.sleep(0.01)
        await cancel_and_wait([*self._workers, *self._later])

    async def _consume(self, mq: MessageQueue, pq: ProcessQueue, batch: list[MessageExt]) -> None:
        ctx = ConsumeContext(mq, self.config.group, orderly=False)
        started = time.time()
        stamp = str(int(started * 1000))
        for msg in batch:
            msg.properties[PropertyKey.CONSUME_START_TIME] = stamp
        result = await self.runner.run(batch, ctx)
        self.stats.consume_seconds += time.time() - started
        pq.last_consume_time = asyncio.get_running_loop().time()
        if pq.dropped:  # the queue went to another member meanwhile: it consumes them again
            log.debug("queue dropped while consuming group=%s queue=%s", self.config.group, mq)
            return
        await self._process(mq, pq, batch, result, ctx)

    async def _process(self, mq: MessageQueue, pq: ProcessQueue, batch: list[MessageExt],
                       result: ConsumeResult, ctx: ConsumeContext) -> None:
        acked = len(batch) if result is ConsumeResult.SUCCESS else 0
        if result is ConsumeResult.SUCCESS and ctx.ack_index is not None:
            acked = max(0, min(ctx.ack_index + 1, len(batch)))
        failed = batch[acked:]
        self.stats.ok += acked
        self.stats.failed += len(failed)
        keep: list[MessageExt] = []
        if failed and self.config.clustering:
            outcomes = await asyncio.gather(
                *(self.send_back(m, mq, ctx.delay_level_when_next_consume) for m in failed))
            keep = [m for m, ok in zip(failed, outcomes, strict=True) if not ok]
            self.stats.sent_back += len(failed) - len(keep)
            for msg in keep:
                msg.reconsume_times += 1
        elif failed:
            log.warning("broadcasting consumer does not retry: %d message(s) of %s dropped "
                        "after a failure", len(failed), mq)
        kept = {id(m) for m in keep}
        done = [m for m in batch if id(m) not in kept] if keep else batch
        offset = pq.remove(done)
        if offset >= 0 and not pq.dropped:
            self.offsets.update(mq, offset, increase_only=True)
        if keep:
            log.warning("send back failed group=%s queue=%s: %d message(s) consumed again in %.0fs",
                        self.config.group, mq, len(keep), LOCAL_RETRY_DELAY_S)
            self._submit_later(mq, pq, keep)
