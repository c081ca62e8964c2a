"""Auto-batching: concurrent sends to one topic leave as one SEND_BATCH_MESSAGE request.

The producer hands every eligible message (already validated and encoded) to
:meth:`SendAccumulator.add` and awaits the future it gets back. Messages of one topic collect in
one pending batch until the batch is flushed, which happens

- at the end of the current event-loop iteration (``max_delay`` 0: every send made before the
  loop next looks at its sockets goes together, and a lone send waits for nothing), or
  ``max_delay`` seconds after the batch's first message (a linger, as Kafka's ``linger.ms``);
- at once when one more message would take the batch encoding over ``max_bytes`` (what is
  pending leaves, the new message starts the next batch) or when it holds ``max_messages``;
- when the producer shuts down (:meth:`drain`).

A flushed batch of one message is sent as a plain SEND_MESSAGE_V2; a larger one as one batch
request, by one task per batch (never one per message), whose answer is fanned out as one
SendResult per message; a failure is raised by every message of the batch. A send cancelled
before its batch leaves is dropped from it; cancelled later, the message is still sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from orbitmq.client.producer.send_codec import (
    EncodedMessage,
    PreparedMessage,
    encoded_size,
    prepare_encoded_batch,
    prepare_single,
    split_batch_result,
)
from orbitmq.client.results import SendResult
from orbitmq.errors import ClientError

__all__ = ["SendAccumulator"]

SendFn = Callable[[PreparedMessage, float], Awaitable[SendResult]]


class _Batch:
    """The pending messages of one topic: their encodings and futures, in send order."""

    __slots__ = ("messages", "futures", "size", "deadline", "timer")

    def __init__(self, deadline: float) -> None:
        self.messages: list[EncodedMessage] = []
        self.futures: list[asyncio.Future[SendResult]] = []
        self.size = 0
        self.deadline = deadline  # the earliest deadline of its messages (loop time)
        self.timer: asyncio.Handle | None = None


class SendAccumulator:
    """Collects sends per topic and sends each topic's batch as one request.

    Args:
        send: sends a prepared message or batch (queue choice and retries included) before the
            loop-time deadline, returning the broker's receipt.
        max_delay: seconds a batch may wait for more messages; 0 flushes at the end of the
            current loop iteration.
        max_bytes: the largest batch encoding; a message that does not fit starts the next one.
        max_messages: the most messages in one batch.
        compress_over: a batch of one is sent like any single send, compressed over this size.
    """

    def __init__(self, send: SendFn, *, max_delay: float, max_bytes: int, max_messages: int,
                 compress_over: int) -> None:
        self._send = send
        self.max_delay = max_delay
        self.max_bytes = max_bytes
        self.max_messages = max_messages
        self.compress_over = compress_over
        self._pending: dict[str, _Batch] = {}
        # batches under way -> their futures
        self._tasks: dict[asyncio.Task[None], list[asyncio.Future[SendResult]]] = {}
        self._draining = False

    @property
    def busy(self) -> bool:
        """Whether messages are pending or batches under way."""
        return bool(self._pending or self._tasks)

    def add(self, topic: str, encoded: EncodedMessage, deadline: float,
            loop: asyncio.AbstractEventLoop) -> asyncio.Future[SendResult]:
        """Queue one encoded message of ``topic``; the future gets its SendResult or the error
        of its batch. ``deadline`` is the time of ``loop`` (the running one) its send must be
        over by."""
        size = encoded_size(encoded)
        batch = self._pending.get(topic)
        if batch is not None and batch.size + size > self.max_bytes:
            self._flush(topic, batch)
            batch = None
        if batch is None:
            batch = self._pending[topic] = _Batch(deadline)
            if self.max_delay > 0 and not self._draining:
                batch.timer = loop.call_later(self.max_delay, self._flush_due, topic, batch)
            else:
                batch.timer = loop.call_soon(self._flush_due, topic, batch)
        elif deadline < batch.deadline:
            batch.deadline = deadline
        future: asyncio.Future[SendResult] = loop.create_future()
        batch.messages.append(encoded)
        batch.futures.append(future)
        batch.size += size
        if len(batch.futures) >= self.max_messages or batch.size >= self.max_bytes:
            self._flush(topic, batch)
        return future

    def open(self) -> None:
        """Linger again after a :meth:`flush_all` (the producer started again)."""
        self._draining = False

    def flush_all(self) -> None:
        """Send every pending batch now, and from now on flush without lingering."""
        self._draining = True
        for topic, batch in list(self._pending.items()):
            self._flush(topic, batch)

    async def drain(self, timeout: float) -> None:
        """Flush everything and wait (at most ``timeout`` seconds) until no batch is under way;
        sends still unanswered then fail with ClientError."""
        self.flush_all()
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self.busy and loop.time() < end:
            self.flush_all()  # sends made while we waited
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=end - loop.time())
            else:
                await asyncio.sleep(0)
        self.fail_all(ClientError("producer shut down before the batched send was answered"))

    def fail_all(self, error: BaseException) -> None:
        """Fail every pending send and cancel the batches under way (the producer is gone)."""
        for batch in self._pending.values():
            if batch.timer is not None:
                batch.timer.cancel()
            for future in batch.futures:
                if not future.done():
                    future.set_exception(error)
        self._pending.clear()
        for task, futures in list(self._tasks.items()):
            _fan_out(futures, None, error)
            task.cancel()

    # -- internals ---------------------------------------------------------------------------
    def _flush_due(self, topic: str, batch: _Batch) -> None:
        if self._pending.get(topic) is batch:
            self._flush(topic, batch)

    def _flush(self, topic: str, batch: _Batch) -> None:
        del self._pending[topic]
        if batch.timer is not None:
            batch.timer.cancel()
        messages, futures = batch.messages, batch.futures
        if any(f.done() for f in futures):  # cancelled while waiting: not sent
            kept = [i for i, f in enumerate(futures) if not f.done()]
            if not kept:
                return
            messages, futures = [messages[i] for i in kept], [futures[i] for i in kept]
        task = asyncio.get_running_loop().create_task(
            self._send_batch(topic, messages, futures, batch.deadline))
        self._tasks[task] = futures
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        del self._tasks[task]

    async def _send_batch(self, topic: str, messages: list[EncodedMessage],
                          futures: list[asyncio.Future[SendResult]], deadline: float) -> None:
        results: list[SendResult] | None = None
        error: BaseException | None = None
        try:
            if len(messages) == 1:
                results = [await self._send(
                    prepare_single(topic, messages[0], self.compress_over), deadline)]
            else:
                result = await self._send(prepare_encoded_batch(topic, messages), deadline)
                results = split_batch_result(result, [m[0] for m in messages])
        except asyncio.CancelledError:
            _fan_out(futures, None, ClientError("batched send cancelled: the producer is shutting down"))
            raise
        except Exception as e:
            if len(messages) > 1:
                e.add_note(f"one request for a batch of {len(messages)} messages; each raises this")
            error = e
        _fan_out(futures, results, error)


def _fan_out(futures: list[asyncio.Future[SendResult]], results: list[SendResult] | None,
             error: BaseException | None) -> None:
    """Each future gets its result, or every future the error; a cancelled one is skipped."""
    if results is not None:
        for future, result in zip(futures, results, strict=True):
            if not future.done():
                future.set_result(result)
        return
    assert error is not None
    for future in futures:
        if not future.done():
            future.set_exception(error)
