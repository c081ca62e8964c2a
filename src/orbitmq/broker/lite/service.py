"""Lite topics on the broker (RocketMQ 5.5): the registry, the consumers' subscriptions, the
lite receive and the expiry of idle lite topics.

Where a lite topic's messages live (protocol/lite.py): one queue of its own in the store, named
``%LMQ%{parent}%{lite}``, written like any queue through the commit log, so that a restart (a
kill -9 included) rebuilds it from the commit log and nothing acknowledged to a producer is lost.
The broker keeps, per lite topic, only its name and the time of its last message
(:class:`LiteTopics`); the store keeps its queue in the compact layout (no mapping, no
descriptor while idle). A restart finds the lite topics again from the store's queues, their
idle time counted from the start.

Consumption is POP (broker/pop), always FIFO per lite topic: a receive of a lite consumer hands
out messages of the lite topics that consumer subscribed to (:class:`LiteSubscriptions`, one set
per client, kept in memory: the 5.x clients send their whole set again every 30 s), the next
message of a lite topic only once the previous one is acked or its invisible time passed (then
it comes again, with its attempt counted; past the group's attempts it goes to the group's DLQ).
Acks, invisible times and retries are the POP service's, per lite topic.

Expiry: a lite topic without a new message for its parent's ``lite.topic.expiration`` (minutes,
-1: never; RocketMQ 5.5's topic attribute), else the broker's ``lite_topic_ttl_s``, is removed, its queue files,
its consumer offsets and the POP state of every group for it (what was not consumed by then is
gone with it, as in RocketMQ). A lite consumer that no longer lives (no heartbeat within
``client_channel_expire_ms``) loses its subscriptions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.pop.pop_service import PopRefused, PopService, Received
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.lite import (
    LITE_WILDCARD,
    lite_name_problem,
    lite_queue_topic,
    split_lite_queue_topic,
)
from orbitmq.protocol.topic_attributes import (
    TopicMessageType,
    lite_expiration_ms,
    topic_message_type,
)

__all__ = ["LiteService", "LiteTopics", "LiteSubscriptions", "LiteRefused", "SyncAction",
           "LITE_QUEUE_ID"]

log = logging.getLogger(__name__)

LITE_QUEUE_ID = 0  # a lite topic is one queue
EXPIRY_SCAN_MAX_S = 10.0  # the longest between two looks for idle lite topics
EXPIRE_ROUND_MAX = 500  # lite topics removed per look (each removes files, on the event loop)
POLL_RECHECK_MAX_S = 5.0


class LiteRefused(BrokerError):
    """A lite request refused; ``kind`` says which API code it maps to (grpc/lite.py)."""

    def __init__(self, kind: str, remark: str) -> None:
        super().__init__(ResponseCode.INVALID_PARAMETER, remark)
        self.kind = kind  # "name", "topic_quota", "subscription_quota", "not_lite", "no_topic"


class SyncAction:
    """SyncLiteSubscription's actions (the API's LiteSubscriptionAction numbers)."""

    PARTIAL_ADD = 0
    PARTIAL_REMOVE = 1
    COMPLETE_ADD = 2  # the whole set: it replaces what the client had
    COMPLETE_REMOVE = 3  # nothing more: every subscription of the client goes
    ALL = (0, 1, 2, 3)


class LiteTopics:
    """Every lite topic the broker holds: parent -> lite name -> time of its last message (ms).

    Args:
        topics_max: ``lite_topics_max``.
    """

    def __init__(self, topics_max: int) -> None:
        self.topics_max = topics_max
        self.by_parent: dict[str, dict[str, int]] = {}
        self.count = 0

    def touch(self, parent: str, lite: str, now_ms: int) -> bool:
        """Note a message for ``lite``: True when this creates it. LiteRefused past the bound."""
        lites = self.by_parent.get(parent)
        if lites is None:
            lites = self.by_parent[parent] = {}
        if lite not in lites:
            if self.count >= self.topics_max:
                raise LiteRefused("topic_quota", f"the broker holds {self.count} lite topics, "
                                                 f"its lite_topics_max: lite topic {lite} not created")
            self.count += 1
            lites[lite] = now_ms
            return True
        lites[lite] = now_ms
        return False

    def exists(self, parent: str, lite: str) -> bool:
        lites = self.by_parent.get(parent)
        return lites is not None and lite in lites

    def names(self, parent: str) -> Iterable[str]:
        return self.by_parent.get(parent, {}).keys()

    def remove(self, parent: str, lite: str) -> None:
        lites = self.by_parent.get(parent)
        if lites is not None and lites.pop(lite, None) is not None:
            self.count -= 1
            if not lites:
                del self.by_parent[parent]

    def idle(self, now_ms: int, ttl_ms: int | Callable[[str], int]) -> list[tuple[str, str]]:
        """(parent, lite) of every lite topic without a message for its parent's TTL (``ttl_ms``,
        or ``ttl_ms(parent)``; 0: never)."""
        out: list[tuple[str, str]] = []
        for parent, lites in self.by_parent.items():
            ttl = ttl_ms(parent) if callable(ttl_ms) else ttl_ms
            if ttl <= 0:
                continue
            bound = now_ms - ttl
            out.extend((parent, lite) for lite, last in lites.items() if last <= bound)
        return out


@dataclasses.dataclass(slots=True)
class ClientLite:
    """One lite consumer's subscriptions: its group, its parent topic, its lite topics."""

    group: str
    parent: str
    names: set[str]


class LiteSubscriptions:
    """client id -> its lite subscriptions (module docstring).

    Args:
        quota: ``lite_subscription_quota``: lite topics one client may subscribe to.
    """

    def __init__(self, quota: int) -> None:
        self.quota = quota
        self.by_client: dict[str, ClientLite] = {}

    def sync(self, client_id: str, group: str, parent: str, action: int,
             names: Iterable[str]) -> ClientLite | None:
        """Apply one SyncLiteSubscription; the client's subscriptions after it (None: none).
        LiteRefused for a bad name or past the quota (nothing changed then)."""
        wanted = set(names)
        for name in wanted:
            if name != LITE_WILDCARD:
                problem = lite_name_problem(name)
                if problem is not None:
                    raise LiteRefused("name", problem)
        held = self.by_client.get(client_id)
        if held is not None and (held.group != group or held.parent != parent):
            held = None  # a client binds one group and one topic: the newer one counts
        current = set(held.names) if held is not None else set()
        if action == SyncAction.PARTIAL_ADD:
            current |= wanted
        elif action == SyncAction.PARTIAL_REMOVE:
            current -= wanted
        elif action == SyncAction.COMPLETE_ADD:
            current = wanted
        elif action == SyncAction.COMPLETE_REMOVE:
            current = set()
        else:
            raise LiteRefused("action", f"lite subscription action {action} is not one of "
                                        "PARTIAL_ADD 0, PARTIAL_REMOVE 1, COMPLETE_ADD 2, COMPLETE_REMOVE 3")
        if len(current) > self.quota:
            raise LiteRefused("subscription_quota", f"lite subscription exceeds the quota "
                                                    f"{self.quota} ({len(current)} lite topics)")
        if not current:
            self.by_client.pop(client_id, None)
            return None
        sub = self.by_client[client_id] = ClientLite(group, parent, current)
        return sub

    def of(self, client_id: str, group: str, parent: str) -> ClientLite | None:
        sub = self.by_client.get(client_id)
        if sub is None or sub.group != group or sub.parent != parent:
            return None
        return sub

    def drop_clients(self, alive: Callable[[str], bool]) -> int:
        gone = [c for c in self.by_client if not alive(c)]
        for client_id in gone:
            del self.by_client[client_id]
        return len(gone)


class LiteService:
    """Lite topics of one broker (module docstring).

    Args:
        ctx: the broker's context.
        pop: the broker's POP service (lite receives, acks and retries are its own).
    """

    def __init__(self, ctx: BrokerContext, pop: PopService) -> None:
        self.ctx = ctx
        self.pop = pop
        cfg = ctx.config
        self.ttl_ms = cfg.lite_topic_ttl_s * 1000
        self.topics = LiteTopics(cfg.lite_topics_max)
        self.subscriptions = LiteSubscriptions(cfg.lite_subscription_quota)
        self._rotation = 0
        self._task: asyncio.Task[None] | None = None
        self.expired = 0  # lite topics removed for their TTL

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Find the lite topics again from the store's queues (idle from now)."""
        now = self.ctx.store.clock()
        for topic in self.ctx.store.topics():
            split = split_lite_queue_topic(topic)
            if split is not None and not self.topics.exists(*split):
                self.topics.touch(split[0], split[1], now)
        if self.topics.count:
            log.info("lite topics found again: %d", self.topics.count)

    def start(self) -> None:
        self.load()  # the store has recovered its queues by now
        if self._task is None:
            self._task = asyncio.create_task(self._expiry_loop(), name="orbitmq-lite-expiry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def parent_ttl_ms(self, parent: str) -> int:
        """How long ``parent``'s lite topics live idle: its ``lite.topic.expiration``, else
        ``lite_topic_ttl_s`` (0: never)."""
        tc = self.ctx.topics.get(parent)
        own = lite_expiration_ms(tc.attributes) if tc is not None else None
        return self.ttl_ms if own is None else own

    # -- parents and sends ----------------------------------------------------------------------
    def is_parent(self, topic: str) -> bool:
        tc = self.ctx.topics.get(topic)
        return tc is not None and topic_message_type(tc.attributes) is TopicMessageType.LITE

    def store_topic_for_send(self, parent: str, lite: str) -> str:
        """The store topic of a message for ``lite`` under ``parent`` (created on first use).
        LiteRefused for a bad name or past ``lite_topics_max``."""
        problem = lite_name_problem(lite)
        if problem is not None:
            raise LiteRefused("name", problem)
        self.topics.touch(parent, lite, self.ctx.store.clock())
        return lite_queue_topic(parent, lite)

    # -- subscriptions --------------------------------------------------------------------------
    def sync(self, client_id: str, group: str, parent: str, action: int, names: Iterable[str],
             start_at_max: bool = False) -> None:
        """SyncLiteSubscription (LiteRefused). ``start_at_max``: a lite topic the group never
        consumed starts at its newest message rather than its oldest."""
        if not self.is_parent(parent):
            if self.ctx.topics.get(parent) is None:
                raise LiteRefused("no_topic", f"topic {parent} does not exist")
            raise LiteRefused("not_lite", f"topic {parent} is not a LITE topic (message.type)")
        self.pop.group_config(group)
        sub = self.subscriptions.sync(client_id, group, parent, action, names)
        if start_at_max and sub is not None:
            for lite in sub.names:
                if lite != LITE_WILDCARD and self.topics.exists(parent, lite):
                    self._start_at_max(group, lite_queue_topic(parent, lite))

    def _start_at_max(self, group: str, topic: str) -> None:
        offsets = self.ctx.offsets
        if offsets.query(group, topic, LITE_QUEUE_ID) < 0 and \
                (group, topic) not in self.pop.state.groups:
            offsets.commit(group, topic, LITE_QUEUE_ID,
                           self.ctx.store.get_max_offset_in_queue(topic, LITE_QUEUE_ID))

    def subscribed(self, client_id: str, group: str, parent: str) -> list[str]:
        """The existing lite topics ``client_id`` subscribed to under ``parent``."""
        sub = self.subscriptions.of(client_id, group, parent)
        if sub is None:
            return []
        if LITE_WILDCARD in sub.names:
            return list(self.topics.names(parent))
        return [n for n in sub.names if self.topics.exists(parent, n)]

    # -- receive --------------------------------------------------------------------------------
    async def receive(self, group: str, parent: str, client_id: str, *, batch: int,
                      invisible_ms: int | None, poll_ms: int, auto_renew: bool) -> list[Received]:
        """Up to ``batch`` messages of the lite topics ``client_id`` subscribed to, FIFO per lite
        topic, waiting up to ``poll_ms`` for some. Raises PopRefused."""
        pop = self.pop
        if not self.ctx.role.accepts_writes:
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"the broker[{self.ctx.config.broker_name}] is a slave: 5.x clients "
                             "receive from the master")
        pop.group_config(group)
        pop.admit_receive(group)
        if not self.is_parent(parent):
            raise PopRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{parent}] is not a LITE topic")
        invisible = pop.invisible_default_ms if invisible_ms is None else invisible_ms
        deadline = time.monotonic() + poll_ms / 1000
        event = pop.arrival_event(parent)
        while True:
            event.clear()
            got = self._take(group, parent, client_id, batch, invisible, auto_renew)
            if got:
                pop.log.flush()
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                pop.log.flush()
                return []
            try:
                await asyncio.wait_for(event.wait(), min(left, POLL_RECHECK_MAX_S))
            except TimeoutError:
                pass

    def _take(self, group: str, parent: str, client_id: str, batch: int, invisible_ms: int,
              auto_renew: bool) -> list[Received]:
        names = self.subscribed(client_id, group, parent)
        out: list[Received] = []
        if not names:
            return out
        self._rotation += 1
        start = self._rotation % len(names)
        for i in range(len(names)):
            topic = lite_queue_topic(parent, names[(start + i) % len(names)])
            self.pop.take_fifo(group, topic, batch - len(out), invisible_ms, auto_renew,
                               client_id, out)
            if len(out) >= batch:
                break
        return out

    # -- expiry ---------------------------------------------------------------------------------
    async def _expiry_loop(self) -> None:
        every = min(max(self.ttl_ms / 4000, 0.05), EXPIRY_SCAN_MAX_S)
        while True:
            await asyncio.sleep(every)
            try:
                self.expire_now()
            except Exception:
                log.exception("lite topic expiry round failed")

    def expire_now(self) -> int:
        """Remove every lite topic idle for its TTL, and the subscriptions of clients gone; the
        number of lite topics removed."""
        self.subscriptions.drop_clients(self.pop.client_alive)
        idle = self.topics.idle(self.ctx.store.clock(), self.parent_ttl_ms)[:EXPIRE_ROUND_MAX]
        if not idle:
            return 0
        doomed = set()
        for parent, lite in idle:
            doomed.add(lite_queue_topic(parent, lite))
            self.topics.remove(parent, lite)
        self.pop.forget_topics(doomed)
        self.ctx.offsets.remove_topics(doomed)
        self.ctx.store.delete_topics(doomed)
        self.expired += len(idle)
        log.info("%d lite topics expired (idle past their TTL)", len(idle))
        return len(idle)
