"""A consumer of lite topics (RocketMQ 5.5) over remoting: :class:`LiteConsumer`.

Each lite topic of a LITE parent is one ordered queue on the parent's broker (its store topic
``%LMQ%{parent}%{lite}``, protocol/lite.py), pulled as a 4.x consumer pulls a queue: from the
group's committed offset (a lite topic the group never consumed: from its oldest message),
in order (:class:`AsyncLiteConsumer`, and its blocking twin :class:`LiteConsumer`).
:meth:`LiteConsumer.poll` hands out what the subscribed lite topics hold, each
message with its lite topic (``properties["__LITE_TOPIC"]``) and the parent as its topic;
:meth:`LiteConsumer.commit` records that the group consumed everything polled so far (also at
:meth:`LiteConsumer.shutdown`): a consumer that stops without committing gets the same messages
again next time (at least once). One process per group and lite topic: two consumers of the
same group polling the same lite topic both get its messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Self

from orbitmq.client._blocking import BlockingClient
from orbitmq.client.consumer.pull_consumer import AsyncPullConsumer
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.lite import lite_name_problem, lite_queue_topic
from orbitmq.protocol.message import MessageExt

__all__ = ["AsyncLiteConsumer", "LiteConsumer", "LITE_SUBSCRIPTIONS_MAX", "POLL_STEP_S"]

LITE_SUBSCRIPTIONS_MAX = 100_000  # lite topics one consumer reads
POLL_STEP_S = 0.05  # a poll that found nothing looks again this often until its timeout


class AsyncLiteConsumer:
    """Reads the subscribed lite topics of ``parent`` for ``group`` (module docstring).

    Args:
        group: the consumer group (its committed offsets are kept per lite topic).
        parent: the LITE parent topic.
        namesrv: name server address(es).
        options: as :class:`AsyncPullConsumer`'s (credentials, tls, timeouts).
    """

    def __init__(self, group: str, parent: str, namesrv: str | Sequence[str] | None = None,
                 **options: Any) -> None:
        self.group = group
        self.parent = parent
        self._pull = AsyncPullConsumer(group, namesrv, **options)
        self._broker = ""
        self._next: dict[str, int | None] = {}  # lite topic -> next offset (None: not read yet)
        self._polled: dict[str, int] = {}  # lite topic -> offset after what poll handed out
        self._turn = 0

    async def start(self) -> Self:
        """Connect and find the parent's broker (TopicNotFoundError: no route)."""
        await self._pull.start()
        try:
            queues = await self._pull.fetch_queues(self.parent)
            if not queues:
                raise ClientError(f"topic {self.parent} has no readable queue")
        except BaseException:
            await self._pull.shutdown()
            raise
        self._broker = queues[0].broker_name
        return self

    async def shutdown(self) -> None:
        """Commit what was polled, then disconnect."""
        try:
            if self._broker:
                await self.commit()
        finally:
            await self._pull.shutdown()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    @property
    def lite_topics(self) -> list[str]:
        return sorted(self._next)

    def subscribe_lite(self, lite_topic: str) -> None:
        """Read ``lite_topic`` from now on (ClientError: not a lite topic name, or past
        LITE_SUBSCRIPTIONS_MAX)."""
        problem = lite_name_problem(lite_topic)
        if problem is not None:
            raise ClientError(problem)
        if lite_topic not in self._next and len(self._next) >= LITE_SUBSCRIPTIONS_MAX:
            raise ClientError(f"a lite consumer reads at most {LITE_SUBSCRIPTIONS_MAX} lite topics")
        self._next.setdefault(lite_topic, None)

    def unsubscribe_lite(self, lite_topic: str) -> None:
        """Read ``lite_topic`` no more (what was polled of it is still committed)."""
        self._next.pop(lite_topic, None)

    def _queue(self, lite_topic: str) -> MessageQueue:
        if not self._broker:
            raise ClientError("the lite consumer is not started")
        return MessageQueue(topic=lite_queue_topic(self.parent, lite_topic),
                            broker_name=self._broker, queue_id=0)

    async def poll(self, max_messages: int = 32, timeout: float = 0.0) -> list[MessageExt]:
        """Up to ``max_messages`` messages of the subscribed lite topics (each lite topic in
        order), waiting up to ``timeout`` seconds for some."""
        if not 1 <= max_messages <= 1024:
            raise ClientError("max_messages must be within 1..1024")
        if timeout < 0:
            raise ClientError("timeout must not be negative")
        deadline = time.monotonic() + timeout
        while True:
            got = await self._poll_once(max_messages)
            if got or time.monotonic() >= deadline:
                return got
            await asyncio.sleep(min(POLL_STEP_S, max(deadline - time.monotonic(), 0.0)))

    async def _poll_once(self, max_messages: int) -> list[MessageExt]:
        out: list[MessageExt] = []
        names = list(self._next)
        if not names:
            return out
        self._turn += 1
        for i in range(len(names)):
            lite = names[(self._turn + i) % len(names)]
            mq = self._queue(lite)
            offset = self._next.get(lite)
            if offset is None:
                committed = await self._pull.fetch_offset(mq)
                offset = committed if committed >= 0 else await self._pull.min_offset(mq)
            result = await self._pull.pull(mq, offset, max_messages - len(out))
            for msg in result.messages:
                msg.topic = self.parent
                out.append(msg)
            if lite in self._next:  # not unsubscribed meanwhile
                self._next[lite] = result.next_begin_offset
            if result.messages:
                self._polled[lite] = result.next_begin_offset
            if len(out) >= max_messages:
                break
        return out

    async def commit(self) -> None:
        """Record at the broker that the group consumed everything polled so far."""
        polled, self._polled = self._polled, {}
        if not polled:
            return
        for lite, offset in polled.items():
            self._pull.update_offset(self._queue(lite), offset)
        await self._pull.persist_offsets()


class LiteConsumer(BlockingClient[AsyncLiteConsumer]):
    """The blocking twin of :class:`AsyncLiteConsumer` (same arguments); any thread may call it."""

    _thread_name = "orbitmq-lite-consumer"

    def __init__(self, group: str, parent: str, namesrv: str | Sequence[str] | None = None,
                 **options: Any) -> None:
        super().__init__(AsyncLiteConsumer(group, parent, namesrv, **options))

    @property
    def parent(self) -> str:
        return self._client.parent

    @property
    def lite_topics(self) -> list[str]:
        return self._client.lite_topics

    def subscribe_lite(self, lite_topic: str) -> None:
        """See :meth:`AsyncLiteConsumer.subscribe_lite`."""
        self._client.subscribe_lite(lite_topic)

    def unsubscribe_lite(self, lite_topic: str) -> None:
        """See :meth:`AsyncLiteConsumer.unsubscribe_lite`."""
        self._client.unsubscribe_lite(lite_topic)

    def poll(self, max_messages: int = 32, timeout: float = 0.0) -> list[MessageExt]:
        """See :meth:`AsyncLiteConsumer.poll`."""
        return self._call(self._client.poll(max_messages, timeout))

    def commit(self) -> None:
        """See :meth:`AsyncLiteConsumer.commit`."""
        self._call(self._client.commit())
