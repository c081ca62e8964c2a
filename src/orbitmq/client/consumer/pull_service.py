"""The push consumer's pulling: one long-polling loop per assigned queue.

Each loop asks the queue's broker for the next ``pull_batch_size`` messages; when there are none,
the broker holds the request up to ``pull_suspend_time_ms`` (15 s) and answers as soon as one
arrives, so an idle consumer costs one request per queue every 15 s and a busy one gets messages
with no polling delay. Every pull of a clustering consumer carries the queue's current offset
(the COMMIT_OFFSET flag), so the broker learns progress between the periodic commits for free.

A loop pauses (and re-checks every ``FLOW_CONTROL_DELAY_S``) while its ProcessQueue is over a flow
control threshold, waits while an orderly queue is not locked, and backs off
``pull_delay_on_exception`` after a failure. Answers, as RocketMQ handles them:

- FOUND: cache the messages, hand them to the consume service, pull on from nextBeginOffset;
- NO_NEW_MSG / NO_MATCHED_MSG: pull on from nextBeginOffset (and move the offset there when
  nothing is cached, so a filtered-out stretch does not hold the committed offset back);
- OFFSET_ILLEGAL (PULL_OFFSET_MOVED): the queue is dropped, nextBeginOffset is stored as its offset
  and persisted, and the queue is taken up again from there by the next rebalance.

Which broker of the queue's set: the one the last answer suggested (suggestWhichBrokerId), else
the master, else a slave (ClientInstance.read_address): reads go on from a slave while the master
is gone, and back to the master once it returns. A pull to a slave carries no COMMIT_OFFSET (a
slave does not store it, as in RocketMQ): the offsets are committed by UPDATE_CONSUMER_OFFSET.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from orbitmq.client.consumer.consume_types import (
    PushConsumerConfig,
    cancel_and_wait,
    restore_retry_topic,
)
from orbitmq.client.consumer.offset_store import OffsetStore, RemoteOffsetStore
from orbitmq.client.consumer.process_queue import ProcessQueue
from orbitmq.client.consumer.pull_codec import build_pull_request, parse_pull_response
from orbitmq.client.instance import ClientInstance
from orbitmq.client.results import PullResult, PullStatus
from orbitmq.client.route import MASTER_ID
from orbitmq.errors import ConnectionClosedError, TimeoutError
from orbitmq.protocol.bodies import MessageQueue, SubscriptionData
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.expressions import compile_expression
from orbitmq.protocol.message import MessageExt

__all__ = ["PullService", "PullRequest", "ConsumeService", "build_push_pull_request"]

log = logging.getLogger(__name__)

FLOW_CONTROL_DELAY_S = 0.05  # RocketMQ re-checks a flow-controlled queue every 50 ms
NOT_LOCKED_DELAY_S = 0.5
_FLOW_LOG_EVERY_S = 10.0
_COMMITTED_CODES = (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                    ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED)


class ConsumeService(Protocol):
    def submit(self, mq: MessageQueue, pq: ProcessQueue, messages: list[MessageExt]) -> None: ...


@dataclasses.dataclass(eq=False)
class PullRequest:
    """One assigned queue's pull state."""

    mq: MessageQueue
    pq: ProcessQueue
    next_offset: int
    task: asyncio.Task[None] | None = None
    last_flow_log: float = 0.0
    broker_id: int = 0  # the broker of the set the last answer suggested for the next pull


def build_push_pull_request(
    group: str, mq: MessageQueue, offset: int, sub: SubscriptionData, cfg: PushConsumerConfig,
    commit_offset: int,
) -> RemotingCommand:
    """PULL_MESSAGE with long polling and the subscription; COMMIT_OFFSET when
    ``commit_offset`` > 0 (a clustering consumer's acknowledged progress). Built by
    :func:`orbitmq.client.consumer.pull_codec.build_pull_request`, as every pull of the SDK."""
    return build_pull_request(group, mq, offset, cfg.pull_batch_size, sub,
                              cfg.pull_suspend_time_ms / 1000, commit_offset=commit_offset)


class PullService:
    """Runs the pull loops (see the module docstring)."""

    def __init__(
        self,
        config: PushConsumerConfig,
        instance: ClientInstance,
        subscriptions: dict[str, SubscriptionData],
        offsets: OffsetStore,
        consume: ConsumeService,
        on_offset_moved: Callable[[MessageQueue, ProcessQueue, int], Awaitable[None]],
    ) -> None:
        self.config = config
        self.instance = instance
        self.subscriptions = subscriptions
        self.offsets = offsets
        self.consume = consume
        self.on_offset_moved = on_offset_moved
        self.requests: dict[MessageQueue, PullRequest] = {}
        self.pulled_messages = 0  # for running info
        self._running = True

    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        """Start pulling ``mq`` from ``offset`` (the queue was just assigned)."""
        self.stop_queue(mq)
        req = PullRequest(mq, pq, offset)
        req.task = asyncio.ensure_future(self._run(req))
        self.requests[mq] = req

    def stop_queue(self, mq: MessageQueue) -> None:
        """Stop pulling ``mq`` (an outstanding long poll is abandoned; its answer is ignored)."""
        req = self.requests.pop(mq, None)
        if req is not None and req.task is not None:
            req.task.cancel()

    async def shutdown(self) -> None:
        self._running = False
        tasks = [r.task for r in self.requests.values() if r.task is not None]
        self.requests.clear()
        await cancel_and_wait(tasks)

    async def _run(self, req: PullRequest) -> None:
        while self._running and not req.pq.dropped:
            try:
                delay = await self._pull_once(req)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broker down or refusing: try again a little later
                log.warning("pull failed group=%s queue=%s offset=%d: %r", self.config.group,
                            req.mq, req.next_offset, e)
                delay = self.config.pull_delay_on_exception_ms / 1000
            if delay > 0:
                await asyncio.sleep(delay)

    def _flow_controlled(self, req: PullRequest, now: float) -> bool:
        cfg = self.config
        reason = req.pq.flow_control(cfg.pull_threshold_for_queue, cfg.pull_threshold_size_bytes,
                                     None if cfg.orderly else cfg.consume_concurrently_max_span)
        if reason is not None and now - req.last_flow_log > _FLOW_LOG_EVERY_S:
            req.last_flow_log = now
            log.info("flow control group=%s queue=%s: %s (count=%d size=%d span=%d)", cfg.group,
                     req.mq, reason.value, req.pq.msg_count, req.pq.msg_size, req.pq.max_span())
        return reason is not None

    async def _pull_once(self, req: PullRequest) -> float:
        """One pull of ``req``'s queue; returns how long to wait before the next."""
        cfg, mq, pq = self.config, req.mq, req.pq
        loop = asyncio.get_running_loop()
        if self._flow_controlled(req, loop.time()):
            return FLOW_CONTROL_DELAY_S
        if cfg.orderly and cfg.clustering and not pq.locked:
            return NOT_LOCKED_DELAY_S  # the lock renewal or the next rebalance locks it
        sub = self.subscriptions.get(mq.topic)
        if sub is None:
            # unsubscribed: the rebalance drops the queue
            return cfg.pull_delay_on_exception_ms / 1000
        addr, broker_id = await self.instance.find_read_address(mq.broker_name, mq.topic,
                                                                req.broker_id)
        commit = self.offsets.read(mq) if cfg.clustering and broker_id == MASTER_ID else -1
        cmd = build_push_pull_request(cfg.group, mq, req.next_offset, sub, cfg, commit)
        pq.last_pull_time = loop.time()
        try:
            resp = await self.instance.remoting.invoke(addr, cmd, cfg.pull_timeout_ms / 1000)
        except (ConnectionClosedError, TimeoutError):
            self.instance.broker_failed(addr)  # the next pull tries another broker of the set
            req.broker_id = MASTER_ID
            raise
        if commit > 0 and resp.code in _COMMITTED_CODES and isinstance(self.offsets,
                                                                        RemoteOffsetStore):
            self.offsets.note_committed(mq, commit)
        result = parse_pull_response(resp, self._tags_of(sub))
        req.broker_id = result.suggest_which_broker_id
        if pq.dropped:
            return 0.0
        return await self._on_result(req, result)

    def _tags_of(self, sub: SubscriptionData) -> frozenset[str] | None:
        """The tags to re-check on the client (None for ``*`` and for SQL92, which the broker
        evaluates exactly); the subscription was parsed when it was made."""
        return compile_expression(sub.sub_string, sub.expression_type).tags

    async def _on_result(self, req: PullRequest, result: PullResult) -> float:
        mq, pq = req.mq, req.pq
        if result.status is PullStatus.FOUND:
            req.next_offset = result.next_begin_offset
            if result.messages:
                self.pulled_messages += len(result.messages)
                restore_retry_topic(result.messages, self.config.group)
                added = pq.put(result.messages)
                if added:
                    self.consume.submit(mq, pq, added)
            return 0.0
        if result.status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            req.next_offset = result.next_begin_offset
            if pq.lowest_unfinished() is None:
                self.offsets.update(mq, result.next_begin_offset, increase_only=True)
            return 0.0
        log.warning("pull offset moved group=%s queue=%s from=%d to=%d", self.config.group, mq,
                    req.next_offset, result.next_begin_offset)
        pq.dropped = True
        self.requests.pop(mq, None)
        await self.on_offset_moved(mq, pq, result.next_begin_offset)
        return 0.0
