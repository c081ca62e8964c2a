"""POP consumption on the broker: receive, ack, change invisibility, dead letters, restart.

A receive (:meth:`PopService.receive`) hands out up to ``batch`` messages of a topic to a
group and makes them invisible for the requested time: first the group's messages visible
again (their invisibility passed without an ack: delivered again with one more attempt), then
new ones, read from each queue's cursor (queues taken in turn; messages the filter rejects are
passed over). A FIFO group (``consume_message_orderly``) reads a queue in order: nothing more
of a queue while one of its messages is invisible, and a message visible again comes before
everything after it. With nothing to hand out, the receive waits (long polling) until a message
arrives in the topic, one turns visible again, or its polling time ends. In controller mode a
SYNC_MASTER hands out only messages below its confirm offset (``BrokerContext.read_bound``,
docs/failover.md); waiting receives look again whenever that offset rises (:meth:`wake_all`).

A PRIORITY topic (``message.type`` PRIORITY: queue ``q`` holds priority ``q``, the last queue
the priorities from it up) is read highest queue first, strictly: a receive takes what is ready
in the highest queue that has anything, the messages visible again there before its new ones,
then goes down, so a backlog of low priorities never holds back a higher one, nor a retried
message lose its priority (it is redelivered from its own queue, its attempts counted). A FIFO
group reads such a topic's queues highest first too.

A message that was delivered the group's ``retry_max_times + 1`` times and turned visible again
goes to ``%DLQ%{group}`` (as the 4.x retry path's dead letters: one queue, RETRY_TOPIC and
ORIGIN_MESSAGE_ID set), through the durable-save seam, and leaves the state once stored.

Receipt handles are ``{queue}.{offset}.{generation}``: an ack or a change with a handle whose
generation is not the message's current one (delivered again since, or changed) is refused
(INVALID_RECEIPT_HANDLE); a change of invisibility answers a new handle.

The state (inflight.py) is logged (pop_log.py) and replayed at start: acked messages stay acked,
messages in flight keep their deadlines (a message whose deadline passed while the broker was
down is visible again at once). Each queue's committed offset (everything below is acked) is
the group's consumer offset: ``orbitmq group status`` shows the lag, and a 4.x consumer of the
same group later starts there. A group consumes with one model at a time: a receive from a
group that has live 4.x consumers is refused (``live_remoting_consumers``), and so is a 4.x
pull of a group 5.x clients received for lately (:meth:`PopService.group_active`).

Memory: at most ``pop_inflight_max`` messages in flight (a receive above it waits); bench
grpc_bench.py measures the bytes per message in flight.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import os
import time
from collections.abc import Callable

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.message_filter import PullFilter
from orbitmq.broker.pop.inflight import Change, Handed, Inflight, PopState, QueueState
from orbitmq.broker.pop.pop_log import PopLog
from orbitmq.broker.processor.send_back_processor import DLQ_QUEUE_NUMS
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.broker.tables.topic_config_manager import DLQ_GROUP_TOPIC_PREFIX
from orbitmq.config import FlushDiskType
from orbitmq.errors import BrokerError
from orbitmq.protocol.bodies import Perm
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.lite import arrival_key, is_lite_queue_topic
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.protocol.topic_attributes import TopicMessageType, topic_message_type
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageStatus
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["PopService", "Received", "parse_handle", "make_handle", "PopRefused"]

log = logging.getLogger(__name__)

REVIVE_WAIT_MAX_S = 1.0  # the reviver's longest sleep: dead letters, renewals, offsets
POLL_RECHECK_MAX_S = 5.0  # a waiting receive looks again at least this often
READ_BATCH_MAX = 32  # queue entries read per look at a queue
HANDLE_MAX = 64  # characters of a receipt handle
_RW = int(Perm.READ | Perm.WRITE)
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)


class PopRefused(BrokerError):
    """A POP request refused (the gRPC layer maps the code to the API's status)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Received:
    """A message a receive hands out."""

    message: MessageExt
    handle: str
    attempt: int
    invisible_until_ms: int


def make_handle(queue_id: int, offset: int, gen: int) -> str:
    return f"{queue_id}.{offset}.{gen}"


def parse_handle(handle: str) -> tuple[int, int, int]:
    """(queue, offset, generation) of a receipt handle; PopRefused when it is not one of ours."""
    parts = handle.split(".") if len(handle) <= HANDLE_MAX else []
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 19 for p in parts):
        raise PopRefused(ResponseCode.INVALID_PARAMETER, f"malformed receipt handle {handle[:HANDLE_MAX]!r}")
    qid, offset, gen = (int(p) for p in parts)
    if qid > 2**31 - 1 or offset > 2**63 - 1 or gen > 2**63 - 1:
        raise PopRefused(ResponseCode.INVALID_PARAMETER, "receipt handle out of range")
    return qid, offset, gen


class PopService:
    """The broker's POP consumption (module docstring).

    Args:
        ctx: the broker's context (store, topics, offsets, groups, clients, the save seam).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self.invisible_default_ms = cfg.pop_invisible_time_default_ms
        self.invisible_max_ms = cfg.pop_invisible_time_max_ms
        self.auto_renew_max_ms = cfg.pop_auto_renew_max_ms
        self.inflight_max = cfg.pop_inflight_max
        self.log = PopLog(os.path.join(cfg.store.store_path, "pop"),
                          sync_each_ack=cfg.store.flush_disk_type == FlushDiskType.SYNC_FLUSH,
                          compact_bytes=cfg.pop_log_compact_bytes)
        self.state = PopState(self.log.add)
        self.client_alive: Callable[[str], bool] = lambda client_id: False
        self.live_remoting_consumers: Callable[[str], bool] = lambda group: bool(
            ctx.clients.consumer_ids(group))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._held_back = False  # a read met a message past the read bound (bound_moved)
        self._arrivals: dict[str, asyncio.Event] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listening = False  # on the store's arrivals (once, however often it starts)
        self._dirty_offsets: set[tuple[str, str, int]] = set()
        self._dead: list[tuple[str, str, int, int]] = []  # past their attempts, for the DLQ
        self._last_receive: dict[str, float] = {}  # group -> monotonic time of its last receive
        # PRIORITY topics: (group, topic) -> queue -> messages visible again, waiting their turn
        # (each expired message is looked at once; checked against the state when taken)
        self._ready: dict[tuple[str, str], dict[int, collections.deque[Handed]]] = {}
        self.active_window_s = cfg.client_channel_expire_ms / 1000
        self.dead_lettered = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Replay the log (StoreError when it cannot be read: the log is closed again)."""
        replay = PopState()
        try:
            for change in self.log.open():
                replay.apply(change)
        except BaseException:
            self.log.close()
            raise
        replay.rebuild_heaps()
        self.state.groups, self.state.inflight_count = replay.groups, replay.inflight_count
        self.state.next_gen = replay.next_gen
        if self.state.inflight_count:
            log.info("POP state restored: %d messages in flight", self.state.inflight_count)

    def start(self) -> None:
        """Revive expired receipts (a master only); again after ``pause``."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        if not self._listening:
            self.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._task = asyncio.create_task(self._revive_loop(), name="orbitmq-pop-revive")

    async def pause(self) -> None:
        """Stop reviving, the log kept open (a master demoted to a slave; ``start`` resumes)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._commit_offsets()

    async def stop(self) -> None:
        await self.pause()
        self.log.close()

    def wake_all(self) -> None:
        """Let every waiting receive look again (the confirm offset rose: messages held back by
        it may be handed out now; loop thread)."""
        for event in self._arrivals.values():
            event.set()

    def bound_moved(self, end: int) -> None:
        """The read bound may have risen to ``end`` (SYNC_FLUSH: a sync round, in whichever
        thread ran it): :meth:`wake_all` on the loop when a read was held back by it."""
        loop = self._loop
        if loop is not None and self._held_back:
            self._held_back = False
            call_soon_from_any_thread(loop, self.wake_all)

    def arrival_event(self, key: str) -> asyncio.Event:
        """The event a waiting receive waits on: set when a message arrives in ``key``'s queues
        (a lite parent's key: any of its lite topics, protocol/lite.py), or an ack or expiry
        there may let one out."""
        return self._arrivals.setdefault(key, asyncio.Event())

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        event = self._arrivals.get(arrival_key(topic))
        if event is None or self._loop is None:
            return
        try:
            call_soon_from_any_thread(self._loop, event.set)
        except RuntimeError:
            pass

    # -- receive --------------------------------------------------------------------------------
    def group_config(self, group: str) -> SubscriptionGroupConfig:
        cfg = self.ctx.sub_groups.find(group)
        if cfg is None:
            raise PopRefused(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                             f"subscription group [{group}] does not exist")
        if not cfg.consume_enable:
            raise PopRefused(ResponseCode.NO_PERMISSION, f"subscription group [{group}] may not consume")
        return cfg

    def max_attempts(self, group: str) -> int:
        cfg = self.ctx.sub_groups.find(group)
        return (cfg.retry_max_times if cfg is not None else 16) + 1

    async def receive(self, group: str, topic: str, *, batch: int, invisible_ms: int | None,
                      poll_ms: int, message_filter: PullFilter | None, auto_renew: bool = False,
                      owner: str = "") -> list[Received]:
        """Hand out up to ``batch`` messages, waiting up to ``poll_ms`` for some (module
        docstring). Raises PopRefused."""
        if not self.ctx.role.accepts_writes:
            # What a group was handed lives on the broker that handed it out (and its dead
            # letters are stored there): a slave's state would be lost or diverge at promotion.
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"the broker[{self.ctx.config.broker_name}] is a slave: 5.x clients "
                             "receive from the master")
        cfg = self.group_config(group)
        if self.live_remoting_consumers(group):
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"group {group} is consumed by 4.x clients now: a group consumes "
                             "with one model at a time")
        if self.ctx.topics.get(topic) is None:
            raise PopRefused(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        invisible = self.invisible_default_ms if invisible_ms is None else invisible_ms
        self._last_receive[group] = time.monotonic()
        deadline = time.monotonic() + poll_ms / 1000
        event = self._arrivals.setdefault(topic, asyncio.Event())
        while True:
            event.clear()
            got = self._take(group, topic, cfg, batch, invisible, message_filter, auto_renew, owner)
            if got:
                self.log.flush()
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                self.log.flush()
                return []
            wait = min(left, POLL_RECHECK_MAX_S)
            soonest = self.state.earliest_deadline(group, topic)
            if soonest is not None:
                wait = min(wait, max(soonest - self.store.clock(), 0) / 1000 + 0.001)
            try:
                await asyncio.wait_for(event.wait(), wait)
            except TimeoutError:
                pass

    def _take(self, group: str, topic: str, cfg: SubscriptionGroupConfig, batch: int,
              invisible_ms: int, message_filter: PullFilter | None, auto_renew: bool,
              owner: str) -> list[Received]:
        room = min(batch, self.inflight_max - self.state.inflight_count)
        if room <= 0:
            return []
        now = self.store.clock()
        renew_until = now + self.auto_renew_max_ms if auto_renew else 0
        out: list[Received] = []
        if cfg.consume_message_orderly:
            self.state.drop_due_heap_items(group, topic, now)
            self._take_fifo(group, topic, room, now, invisible_ms, message_filter, renew_until, owner, out)
            return out
        if self._by_priority(topic):
            self._take_by_priority(group, topic, room, now, invisible_ms, message_filter,
                                   renew_until, owner, out)
            return out
        if (group, topic) in self._ready:  # no longer a PRIORITY topic: back in line
            for waiting in self._ready.pop((group, topic)).values():
                for handed in waiting:
                    self.state.set_visible(group, topic, handed)
        limit = self.max_attempts(group)
        for handed in list(self.state.take_expired(group, topic, now, room)):
            entry = handed.entry
            if self._renewable(entry, now):
                self.state.reschedule(group, topic, handed.queue_id, handed.offset,
                                      now + self.invisible_default_ms, new_gen=False)
            elif entry.attempt >= limit:
                self._to_dead_letters(group, topic, handed)
            else:
                got = self._redeliver(group, topic, handed, now + invisible_ms, renew_until, owner)
                if got is not None:
                    out.append(got)
        if len(out) < room:
            self._take_new(group, topic, room - len(out), now, invisible_ms, message_filter,
                           renew_until, owner, out, fifo=False)
        return out

    def _by_priority(self, topic: str) -> bool:
        tc = self.ctx.topics.get(topic)
        return tc is not None and bool(tc.attributes) and \
            topic_message_type(tc.attributes) is TopicMessageType.PRIORITY

    def _take_by_priority(self, group: str, topic: str, room: int, now: int, invisible_ms: int,
                          message_filter: PullFilter | None, renew_until: int, owner: str,
                          out: list[Received]) -> None:
        """A PRIORITY topic's receive (module docstring): per queue from the highest, its
        messages visible again, then its new ones. Messages turned visible since the last look
        are renewed, dead-lettered or put in their queue's line (once each); a line keeps what
        this receive had no room for."""
        limit = self.max_attempts(group)
        ready = self._ready.setdefault((group, topic), {})
        for handed in list(self.state.take_expired(group, topic, now, self.inflight_max)):
            if self._renewable(handed.entry, now):
                self.state.reschedule(group, topic, handed.queue_id, handed.offset,
                                      now + self.invisible_default_ms, new_gen=False)
            elif handed.entry.attempt >= limit:
                self._to_dead_letters(group, topic, handed)
            else:
                ready.setdefault(handed.queue_id, collections.deque()).append(handed)
        readable = self._queue_ids_set(topic)
        for qid in sorted(set(readable) | set(ready), reverse=True):
            waiting = ready.get(qid)
            while waiting and len(out) < room:
                handed = waiting.popleft()
                entry = self.state.get(group, topic, qid, handed.offset)
                if entry is None or entry.gen != handed.entry.gen:
                    continue  # acked, or its invisibility changed, since it turned visible
                got = self._redeliver(group, topic, handed, now + invisible_ms, renew_until, owner)
                if got is not None:
                    out.append(got)
            if waiting is not None and not waiting:
                del ready[qid]
            if len(out) < room and qid in readable:
                self._take_new(group, topic, room, now, invisible_ms, message_filter,
                               renew_until, owner, out, fifo=False, only=qid)
            if len(out) >= room:
                break
        if not ready:
            del self._ready[(group, topic)]

    def _queue_ids_set(self, topic: str) -> range:
        tc = self.ctx.topics.get(topic)
        return range(tc.read_queue_nums if tc is not None else 0)

    def _renewable(self, entry: Inflight, now: int) -> bool:
        return entry.renew_until_ms > now and bool(entry.owner) and self.client_alive(entry.owner)

    def _queue_ids(self, topic: str) -> list[int]:
        if is_lite_queue_topic(topic):
            return [0]  # a lite topic is one queue (broker/lite)
        tc = self.ctx.topics.get(topic)
        count = tc.read_queue_nums if tc is not None else 0
        if tc is not None and tc.attributes and \
                topic_message_type(tc.attributes) is TopicMessageType.PRIORITY:
            return list(range(count - 1, -1, -1))  # the highest priority first
        return list(range(count))

    def _start_offset(self, group: str, topic: str, qid: int) -> Callable[[], int]:
        def start() -> int:
            committed = self.ctx.offsets.query(group, topic, qid)
            low = self.store.get_min_offset_in_queue(topic, qid)
            return max(committed, low) if committed >= 0 else low
        return start

    def _take_new(self, group: str, topic: str, room: int, now: int, invisible_ms: int,
                  message_filter: PullFilter | None, renew_until: int, owner: str,
                  out: list[Received], *, fifo: bool, only: int | None = None) -> None:
        """New messages from the queues' cursors (queues in turn, or only ``only``)."""
        gt = self.state.group_topic(group, topic)
        qids = self._queue_ids(topic) if only is None else [only]
        if not qids:
            return
        gt.rotation += 1
        for i in range(len(qids)):
            qid = qids[(gt.rotation + i) % len(qids)]
            qs = self.state.queue(group, topic, qid, self._start_offset(group, topic, qid))
            if fifo and qs.inflight:
                continue
            while len(out) < room and self._read_queue(group, topic, qid, qs, room, now,
                                                       invisible_ms, message_filter,
                                                       renew_until, owner, out):
                pass
            if len(out) >= room:
                return

    def _read_queue(self, group: str, topic: str, qid: int, qs: QueueState, room: int, now: int,
                    invisible_ms: int, message_filter: PullFilter | None, renew_until: int,
                    owner: str, out: list[Received]) -> bool:
        """One read from the queue's cursor; False when it has nothing more now."""
        high = self.store.get_max_offset_in_queue(topic, qid)
        if qs.next_offset >= high:
            return False
        before = qs.next_offset
        want = min(room - len(out), READ_BATCH_MAX)
        bound = self.ctx.read_bound
        result = self.store.get_message(group, topic, qid, qs.next_offset, want, message_filter,
                                        max_physical_end=bound() if bound is not None else None)
        if result.held_back_end >= 0:
            self._held_back = True
        for raw in result.buffers:
            msg = decode_stored_message(raw, check_crc=False)
            entry = self.state.hand_out(group, topic, qs, qid, msg.queue_offset, 1,
                                        now + invisible_ms, renew_until, owner)
            out.append(Received(msg, make_handle(qid, msg.queue_offset, entry.gen), 1,
                                entry.deadline_ms))
            self.state.move_cursor(group, topic, qs, qid, msg.queue_offset + 1)
        # Entries the filter passed over (or an offset the store corrected) are skipped.
        self.state.move_cursor(group, topic, qs, qid, result.next_begin_offset)
        self._dirty_offsets.add((group, topic, qid))
        return qs.next_offset > before and qs.next_offset < high

    def _take_fifo(self, group: str, topic: str, room: int, now: int, invisible_ms: int,
                   message_filter: PullFilter | None, renew_until: int, owner: str,
                   out: list[Received]) -> None:
        """FIFO: per queue, the unacked messages again in offset order, or else new ones; and
        nothing from a queue while one of its messages is invisible."""
        limit = self.max_attempts(group)
        for qid in self._queue_ids(topic):
            qs = self.state.queue(group, topic, qid, self._start_offset(group, topic, qid))
            if qs.locked(now):
                continue
            for offset in sorted(qs.inflight):
                if len(out) >= room:
                    return
                handed = Handed(qid, offset, qs.inflight[offset])
                if handed.entry.attempt >= limit:
                    self._to_dead_letters(group, topic, handed)
                    continue
                got = self._redeliver(group, topic, handed, now + invisible_ms, renew_until, owner)
                if got is not None:
                    out.append(got)
            if len(out) < room and not qs.inflight:
                self._take_new(group, topic, room, now, invisible_ms, message_filter, renew_until,
                               owner, out, fifo=True, only=qid)
            if len(out) >= room:
                return

    def admit_receive(self, group: str) -> None:
        """A lite receive's part of the one-model rule (module docstring): refused while 4.x
        clients consume ``group``; else the group counts as 5.x-active. Raises PopRefused."""
        if self.live_remoting_consumers(group):
            raise PopRefused(ResponseCode.NO_PERMISSION,
                             f"group {group} is consumed by 4.x clients now: a group consumes "
                             "with one model at a time")
        self._last_receive[group] = time.monotonic()

    def take_fifo(self, group: str, topic: str, room: int, invisible_ms: int, auto_renew: bool,
                  owner: str, out: list[Received]) -> None:
        """A lite topic's part of a lite receive (broker/lite): up to ``room`` more messages of
        ``topic`` into ``out``, FIFO."""
        if room <= 0 or self.inflight_max - self.state.inflight_count <= 0:
            return
        room = min(room, self.inflight_max - self.state.inflight_count)
        now = self.store.clock()
        renew_until = now + self.auto_renew_max_ms if auto_renew else 0
        self.state.drop_due_heap_items(group, topic, now)
        mine: list[Received] = []
        self._take_fifo(group, topic, room, now, invisible_ms, None, renew_until, owner, mine)
        out.extend(mine)

    def forget_topics(self, topics: set[str]) -> None:
        """Drop every group's state of ``topics`` (expired lite topics: their queues are gone),
        in one pass over the state."""
        for key in [k for k in self.state.groups if k[1] in topics]:
            gt = self.state.groups.pop(key)
            for qs in gt.queues.values():
                self.state.inflight_count -= len(qs.inflight)
        self._dirty_offsets = {d for d in self._dirty_offsets if d[1] not in topics}

    def _redeliver(self, group: str, topic: str, handed: Handed, deadline: int, renew_until: int,
                   owner: str) -> Received | None:
        qs = self.state.group_topic(group, topic).queues[handed.queue_id]
        msg = self._message(topic, handed.queue_id, handed.offset)
        if msg is None:  # gone (retention): nothing to deliver
            self.state.remove(group, topic, handed.queue_id, handed.offset)
            self._dirty_offsets.add((group, topic, handed.queue_id))
            return None
        attempt = handed.entry.attempt + 1
        entry = self.state.hand_out(group, topic, qs, handed.queue_id, handed.offset, attempt,
                                    deadline, renew_until, owner)
        return Received(msg, make_handle(handed.queue_id, handed.offset, entry.gen), attempt, deadline)

    def _message(self, topic: str, qid: int, offset: int) -> MessageExt | None:
        entry = self.store.queue_entry(topic, qid, offset)
        if entry is None:
            return None
        return self.store.look_message_by_offset(entry[0], entry[1])

    # -- ack and change -------------------------------------------------------------------------
    def _current(self, group: str, topic: str, handle: str) -> tuple[int, int, Inflight]:
        qid, offset, gen = parse_handle(handle)
        entry = self.state.get(group, topic, qid, offset)
        if entry is None or entry.gen != gen:
            raise PopRefused(ResponseCode.NO_MESSAGE,
                             "the receipt handle has expired: the message was acked, or "
                             "delivered again since")
        return qid, offset, entry

    async def ack(self, group: str, topic: str, handle: str) -> None:
        """Ack one message: it is never delivered to the group again. Raises PopRefused."""
        qid, offset, _ = self._current(group, topic, handle)
        self.state.remove(group, topic, qid, offset)
        self._dirty_offsets.add((group, topic, qid))
        await self.log.synced()
        self._wake(topic)

    def change_invisible(self, group: str, topic: str, handle: str, invisible_ms: int) -> str:
        """A new invisibility from now; the new receipt handle. Raises PopRefused."""
        qid, offset, _ = self._current(group, topic, handle)
        entry = self.state.reschedule(group, topic, qid, offset, self.store.clock() + invisible_ms,
                                      new_gen=True)
        assert entry is not None
        entry.renew_until_ms = 0  # the client decides its time now
        self.log.flush()
        if invisible_ms == 0:
            self._wake(topic)
        return make_handle(qid, offset, entry.gen)

    async def forward_to_dead_letters(self, group: str, topic: str, handle: str) -> None:
        """ForwardMessageToDeadLetterQueue: store the message in the group's DLQ, then ack it."""
        qid, offset, entry = self._current(group, topic, handle)
        if not await self._dead_letter(group, topic, Handed(qid, offset, entry)):
            raise PopRefused(ResponseCode.SYSTEM_BUSY, "the dead-letter queue could not be written; retry")
        await self.log.synced()

    def _wake(self, topic: str) -> None:
        event = self._arrivals.get(arrival_key(topic))
        if event is not None:
            event.set()

    # -- dead letters ---------------------------------------------------------------------------
    def _to_dead_letters(self, group: str, topic: str, handed: Handed) -> None:
        """Park a message past its attempts: the reviver stores it in the DLQ (it stays in the
        state, never handed out, until then)."""
        self.state.reschedule(group, topic, handed.queue_id, handed.offset, 2**62, new_gen=True)
        self._dead.append((group, topic, handed.queue_id, handed.offset))
        self._changed.set()

    async def _dead_letter(self, group: str, topic: str, handed: Handed) -> bool:
        msg = self._message(topic, handed.queue_id, handed.offset)
        if msg is not None:
            dlq = DLQ_GROUP_TOPIC_PREFIX + group
            tc = self.ctx.topics.create_system_topic(dlq, DLQ_QUEUE_NUMS, _RW)
            props = dict(msg.properties)
            props.setdefault(PropertyKey.RETRY_TOPIC, arrival_key(msg.topic))  # a lite one: its parent
            props.setdefault(PropertyKey.ORIGIN_MESSAGE_ID, msg.uniq_key or msg.offset_msg_id)
            inner = MessageInner(
                dlq, handed.queue_id % max(tc.write_queue_nums, 1), bytes(msg.body), props, msg.flag,
                msg.sys_flag & _USER_SYS_FLAGS, msg.born_timestamp, msg.born_host,
                self.ctx.host.store_host, max(handed.entry.attempt - 1, 0))
            result = await self.ctx.saver.save([inner])
            if result.status is not PutMessageStatus.PUT_OK:
                log.warning("dead letter of %s not stored: %s", msg.msg_id, result.status.value)
                return False
            log.info("message to DLQ group=%s topic=%s msg=%s attempts=%d", group, topic,
                     msg.msg_id, handed.entry.attempt)
        self.state.remove(group, topic, handed.queue_id, handed.offset)
        self._dirty_offsets.add((group, topic, handed.queue_id))
        self.dead_lettered += 1
        return True

    # -- the reviver ----------------------------------------------------------------------------
    async def _revive_loop(self) -> None:
        """Dead letters, auto-renewals and expiries without a receive to notice them, the
        groups' offsets, the log's compaction and (ASYNC_FLUSH) its periodic sync."""
        last_sync = time.monotonic()
        while True:
            self._changed.clear()
            try:
                await self._revive_once()
                if time.monotonic() - last_sync >= self.ctx.config.store.flush_interval_commitlog_ms / 1000:
                    last_sync = time.monotonic()
                    await asyncio.to_thread(self.log.sync)
            except Exception:
                log.exception("POP reviver round failed")
            try:
                await asyncio.wait_for(self._changed.wait(), REVIVE_WAIT_MAX_S)
            except TimeoutError:
                pass

    async def _revive_once(self) -> None:
        dead, self._dead = self._dead, []
        for group, topic, qid, offset in dead:
            entry = self.state.get(group, topic, qid, offset)
            if entry is not None and not await self._dead_letter(group, topic, Handed(qid, offset, entry)):
                self._dead.append((group, topic, qid, offset))  # again next round
        now = self.store.clock()
        for (group, topic), gt in list(self.state.groups.items()):
            if gt.heap and gt.heap[0][0] <= now:
                self._expire(group, topic, now)
        self.log.flush()
        self._commit_offsets()
        if self.log.size > self.log.compact_bytes:
            self.log.compact(self.state.snapshot())

    def _expire(self, group: str, topic: str, now: int) -> None:
        """Messages whose invisibility passed: renewed while a live push consumer holds them,
        to the DLQ past their attempts, else set aside for the next receive (woken)."""
        cfg = self.ctx.sub_groups.find(group)
        if is_lite_queue_topic(topic) or (cfg is not None and cfg.consume_message_orderly):
            self.state.drop_due_heap_items(group, topic, now)  # FIFO reads its queues in order
            self._wake(topic)
            return
        woke = False
        for handed in list(self.state.take_expired(group, topic, now, 1 << 30)):
            if self._renewable(handed.entry, now):
                self.state.reschedule(group, topic, handed.queue_id, handed.offset,
                                      now + self.invisible_default_ms, new_gen=False)
            elif handed.entry.attempt >= self.max_attempts(group):
                self._to_dead_letters(group, topic, handed)
            else:
                self.state.set_visible(group, topic, handed)
                woke = True
        if woke:
            self._wake(topic)

    def _commit_offsets(self) -> None:
        dirty, self._dirty_offsets = self._dirty_offsets, set()
        for group, topic, qid in dirty:
            gt = self.state.groups.get((group, topic))
            qs = gt.queues.get(qid) if gt is not None else None
            if qs is not None:
                self.ctx.offsets.commit(group, topic, qid, qs.committed())

    def group_active(self, group: str) -> bool:
        """Whether 5.x clients received for ``group`` within ``client_channel_expire_ms``: its
        4.x pulls are refused meanwhile (one model at a time)."""
        last = self._last_receive.get(group)
        if last is None:
            return False
        if time.monotonic() - last <= self.active_window_s:
            return True
        del self._last_receive[group]
        return False

    # -- introspection --------------------------------------------------------------------------
    def changes(self) -> list[Change]:
        return list(self.state.snapshot())
