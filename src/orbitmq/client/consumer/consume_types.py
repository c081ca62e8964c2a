"""What a push consumer's listener sees and answers, and the consumer's settings.

- :class:`ConsumeResult`: the listener's answer. Concurrent consumers answer SUCCESS or
  RECONSUME_LATER (the failed messages go back to the broker and return after a delay level);
  orderly consumers answer SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT (the same messages are
  consumed again after a pause, nothing is skipped). A listener that raises, or returns None,
  failed: RECONSUME_LATER (or SUSPEND for orderly), as RocketMQ treats a null status.
- :class:`ConsumeFrom`: where a group with no committed offset starts.
- :class:`ConsumeContext`: the queue being consumed and the knobs a listener may turn.
- :class:`PushConsumerConfig`: every setting, validated once.
- :class:`ListenerRunner`: calls listeners: plain functions on the consume thread pool, coroutine
  functions on the event loop, both bounded by ``consume_thread_nums``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from orbitmq.client.namespace import unwrap, wrap
from orbitmq.client.renamed import Renamed, deprecated_aliases
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import ConsumeFromWhere, MessageModel, MessageQueue
from orbitmq.protocol.message import MessageExt, PropertyKey
from orbitmq.protocol.topics import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "ConsumeResult",
    "ConsumeFrom",
    "ConsumeContext",
    "MessageModel",
    "Listener",
    "PushConsumerConfig",
    "ListenerRunner",
    "PUSH_RENAMES",
    "RETRY_GROUP_TOPIC_PREFIX",
    "retry_topic",
    "restore_retry_topic",
    "cancel_and_wait",
]

log = logging.getLogger(__name__)

_HALF_HOUR_MS = 30 * 60 * 1000
# RocketMQ's "unlimited" for orderly consumers (Integer.MAX_VALUE).
UNLIMITED_RECONSUME_TIMES = 2**31 - 1


class ConsumeResult(enum.Enum):
    """A listener's answer for a batch of messages."""

    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"  # concurrent: send back, retry after a delay level
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"  # orderly: pause, retry


class ConsumeFrom(enum.Enum):
    """Where a group starts on a queue for which the broker has no offset of it (a new group).

    A group with a committed offset always resumes from it. Like RocketMQ's broker, ours answers
    0 for a new group on a queue whose first message is still stored, so such a group reads the
    queue from the start whatever this says.
    """

    LAST = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    FIRST = ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    TIMESTAMP = ConsumeFromWhere.CONSUME_FROM_TIMESTAMP

    @property
    def where(self) -> ConsumeFromWhere:
        """The wire value carried in heartbeats."""
        return ConsumeFromWhere(self.value)


@dataclasses.dataclass
class ConsumeContext:
    """Passed to the listener with each batch.

    Attributes:
        queue: the queue the messages come from (a ``%RETRY%group`` queue for retried messages,
            whose ``topic`` the listener sees restored to the original one).
        group: the consumer group.
        orderly: whether this is an orderly consumer.
        delay_level_when_next_consume: concurrent only: the delay level failed messages are sent
            back with; 0 lets the broker choose (3 + reconsume times); -1 sends them straight to
            the dead letter queue.
        ack_index: concurrent only: with SUCCESS, the messages after this index count as failed
            (None: all succeeded).
        suspend_current_queue_time_ms: orderly only: how long SUSPEND_CURRENT_QUEUE_A_MOMENT
            pauses the queue.
    """

    queue: MessageQueue
    group: str
    orderly: bool = False
    delay_level_when_next_consume: int = 0
    ack_index: int | None = None
    suspend_current_queue_time_ms: int = 1000


Listener = Callable[[list[MessageExt], ConsumeContext], Any]


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def restore_retry_topic(messages: list[MessageExt], group: str) -> None:
    """Messages pulled from ``%RETRY%group`` show their original topic (the RETRY_TOPIC
    property), so that listeners see the topic they subscribed to, as RocketMQ does."""
    rt = retry_topic(group)
    for msg in messages:
        if msg.topic == rt:
            original = msg.properties.get(PropertyKey.RETRY_TOPIC)
            if original:
                msg.topic = original


CANCEL_WAIT_S = 2.0


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], timeout: float = CANCEL_WAIT_S) -> None:
    """Cancel ``tasks`` and wait for them, but not forever: on Python 3.11 a cancellation that
    arrives just as an awaited answer does can be swallowed by ``wait_for``, leaving a loop
    running; shutdown must not hang on it (such a task is left to the loop's end)."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=timeout)


# The push consumer's timing settings in milliseconds, as RocketMQ's DefaultMQPushConsumer names
# them (persistConsumerOffsetInterval, suspendCurrentQueueTimeMillis, brokerSuspendMaxTimeMillis,
# ...): their names without a unit, in seconds, are deprecated aliases.
PUSH_RENAMES = {r.old: r for r in (
    Renamed("persist_consumer_offset_interval", "persist_consumer_offset_interval_ms"),
    Renamed("rebalance_interval", "rebalance_interval_ms"),
    Renamed("lock_renew_interval", "lock_renew_interval_ms"),
    Renamed("lock_max_live_time", "lock_max_live_time_ms"),
    Renamed("pull_suspend_time", "pull_suspend_time_ms"),
    Renamed("pull_timeout", "pull_timeout_ms"),
    Renamed("pull_delay_on_exception", "pull_delay_on_exception_ms"),
    Renamed("await_termination", "await_termination_ms"),
)}


@deprecated_aliases(*PUSH_RENAMES.values())
@dataclasses.dataclass(frozen=True)
class PushConsumerConfig:
    """Every setting of a push consumer (see :class:`orbitmq.client.AsyncPushConsumer` for what
    each one means); units last, every time in milliseconds. The names of the times in seconds
    (``rebalance_interval``, ...) still work, deprecated: see :data:`PUSH_RENAMES`."""

    group: str
    orderly: bool = False
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from: ConsumeFrom = ConsumeFrom.LAST
    consume_timestamp_ms: int | None = None
    consume_thread_nums: int = 20
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue_mib: int = 100
    consume_concurrently_max_span: int = 2000
    max_reconsume_times: int = -1
    suspend_current_queue_time_ms: int = 1000
    offset_store_dir: str = "~/.orbitmq/offsets"
    instance_name: str = "DEFAULT"
    persist_consumer_offset_interval_ms: int = 5000
    rebalance_interval_ms: int = 10_000
    lock_renew_interval_ms: int = 20_000
    lock_max_live_time_ms: int = 30_000
    pull_suspend_time_ms: int = 15_000
    pull_timeout_ms: int = 30_000
    pull_delay_on_exception_ms: int = 3000
    await_termination_ms: int = 10_000

    def __post_init__(self) -> None:
        positive = {
            "consume_thread_nums": self.consume_thread_nums,
            "consume_message_batch_max_size": self.consume_message_batch_max_size,
            "pull_threshold_for_queue": self.pull_threshold_for_queue,
            "pull_threshold_size_for_queue_mib": self.pull_threshold_size_for_queue_mib,
            "consume_concurrently_max_span": self.consume_concurrently_max_span,
            "persist_consumer_offset_interval_ms": self.persist_consumer_offset_interval_ms,
            "rebalance_interval_ms": self.rebalance_interval_ms,
            "pull_suspend_time_ms": self.pull_suspend_time_ms,
            "lock_renew_interval_ms": self.lock_renew_interval_ms,
            "lock_max_live_time_ms": self.lock_max_live_time_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ClientError(f"{name} must be positive, got {value}")
        waits = {
            "suspend_current_queue_time_ms": self.suspend_current_queue_time_ms,
            "pull_delay_on_exception_ms": self.pull_delay_on_exception_ms,
            "await_termination_ms": self.await_termination_ms,
        }
        for name, value in waits.items():
            if value < 0:
                raise ClientError(f"{name} must be 0 or more, got {value}")
        if not 1 <= self.pull_batch_size <= 1024:
            raise ClientError(f"pull_batch_size must be within 1..1024, got {self.pull_batch_size}")
        if self.max_reconsume_times < -1:
            raise ClientError("max_reconsume_times must be -1 (mode default) or >= 0")
        if self.pull_timeout_ms <= self.pull_suspend_time_ms:
            raise ClientError("pull_timeout_ms must exceed pull_suspend_time_ms (the broker holds "
                              "the request that long)")

    @property
    def clustering(self) -> bool:
        return self.message_model is MessageModel.CLUSTERING

    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means RocketMQ's default: 16 for concurrent consumers, unlimited for orderly."""
        if self.max_reconsume_times >= 0:
            return self.max_reconsume_times
        return UNLIMITED_RECONSUME_TIMES if self.orderly else 16

    @property
    def pull_threshold_size_bytes(self) -> int:
        return self.pull_threshold_size_for_queue_mib * 1024 * 1024

    def start_timestamp_ms(self) -> int:
        """The TIMESTAMP start point: the configured one, else half an hour ago (RocketMQ)."""
        if self.consume_timestamp_ms is not None:
            return self.consume_timestamp_ms
        return int(time.time() * 1000) - _HALF_HOUR_MS

    def local_offset_path(self) -> str:
        """Where a broadcasting consumer keeps its offsets:
        ``{offset_store_dir}/{instance_name}/{group}/offsets.json``."""
        root = os.path.expanduser(self.offset_store_dir)
        return os.path.join(root, self.instance_name, self.group, "offsets.json")


class _ConsumeThreads:
    """Daemon threads running plain-function listeners. A call's answer comes back to the loop
    through one ``call_soon_threadsafe``: lighter than ``run_in_executor`` (two futures chained
    per call), which counts at one call per message."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._main, name=f"orbitmq-consume-{i}",
                                          daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._jobs.put((loop, fut, fn, args))
        return fut

    def _main(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, fut, fn, args = job
            try:
                outcome: tuple[Any, BaseException | None] = (fn(*args), None)
            except BaseException as e:  # handed to the awaiting coroutine, which logs it
                outcome = (None, e)
            try:
                loop.call_soon_threadsafe(_resolve, fut, *outcome)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

    def shutdown(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)


def _resolve(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.cancelled():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class ListenerRunner:
    """Calls listeners by topic, at most ``consume_thread_nums`` at a time.

    A plain function runs on one of ``consume_thread_nums`` threads (so a slow listener never
    blocks the event loop); a coroutine function runs on the loop, as many at once. Exceptions
    and None answers become failures.
    """

    def __init__(self, listeners: dict[str, Listener], threads: int, failure: ConsumeResult,
                 namespace: str | None = None) -> None:
        self._listeners = listeners
        self._namespace = namespace  # listeners see their topics bare (client/namespace.py)
        self._failure = failure
        self._threads = threads
        self._pool: _ConsumeThreads | None = None
        self._slots: asyncio.Semaphore | None = None
        self._is_async: dict[int, bool] = {}

    def _listener_for(self, topic: str) -> Listener:
        listener = self._listeners.get(topic)
        if listener is None:  # a retried message of a topic no longer subscribed
            listener = next(iter(self._listeners.values()))
        return listener

    def _coroutine_function(self, listener: Listener) -> bool:
        known = self._is_async.get(id(listener))
        if known is None:
            known = self._is_async[id(listener)] = inspect.iscoroutinefunction(listener)
        return known

    async def run(self, messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
        """The listener's answer for ``messages`` (never raises but for cancellation)."""
        return (await self.run_coded(messages, context))[0]

    async def run_coded(self, messages: list[MessageExt],
                        context: ConsumeContext) -> tuple[ConsumeResult, str]:
        """:meth:`run`'s answer and how it came, in RocketMQ's ConsumeReturnType names
        (SUCCESS, FAILED, EXCEPTION, RETURNNULL): what a trace's SubAfter record says."""
        # (wrapped again: an orderly batch retried comes back with the topics shown bare)
        listener = self._listener_for(wrap(self._namespace, messages[0].topic))
        if self._namespace:
            for msg in messages:
                msg.topic = unwrap(msg.topic, self._namespace)
        try:
            if self._coroutine_function(listener):
                if self._slots is None:
                    self._slots = asyncio.Semaphore(self._threads)
                async with self._slots:
                    answer = await listener(messages, context)
            else:
                if self._pool is None:
                    self._pool = _ConsumeThreads(self._threads)
                answer = await self._pool.call(listener, messages, context)
                if inspect.isawaitable(answer):
                    answer = await answer
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("listener failed group=%s queue=%s offsets=%d..%d", context.group,
                          context.queue, messages[0].queue_offset, messages[-1].queue_offset)
            return self._failure, "EXCEPTION"
        if answer.__class__ is ConsumeResult:
            return answer, "SUCCESS" if answer is ConsumeResult.SUCCESS else "FAILED"
        result = self._normalize(answer, context)
        return result, ("RETURNNULL" if answer is None else
                        "SUCCESS" if result is ConsumeResult.SUCCESS else "FAILED")

    def _normalize(self, answer: object, context: ConsumeContext) -> ConsumeResult:
        if isinstance(answer, ConsumeResult):
            return answer
        if answer is None:
            log.warning("listener returned None group=%s queue=%s: treated as a failure",
                        context.group, context.queue)
        else:
            log.warning("listener returned %r, not a ConsumeResult: treated as a failure", answer)
        return self._failure

    def shutdown(self) -> None:
        """Release the threads (running listeners finish on their own)."""
        if self._pool is not None:
            self._pool.shutdown()
