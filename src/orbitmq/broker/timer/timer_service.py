"""Timer messages: any delivery time, for 4.x and 5.x clients alike (RocketMQ 5's timer).

A message asks for a delivery time with ``TIMER_DELIVER_MS`` (an absolute time in ms),
``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS`` (relative); a 5.x client's ``delivery_timestamp``
becomes ``TIMER_DELIVER_MS`` at the gRPC endpoint. :meth:`TimerService.park` (the send paths'
hook) checks the time (a number; at most ``timer_max_delay_s`` ahead: MESSAGE_ILLEGAL
otherwise) and redirects a message not yet due to the timer topic ``rmq_sys_wheel_timer``
(queue 0), with its real topic and queue in REAL_TOPIC / REAL_QID and the absolute time in
TIMER_DELIVER_MS. The send itself saves it, through the durable-save seam: once answered, the
timer is as durable as any message.

Two loops on the broker's event loop, over the files of wheel_files.py:

- enqueue: reads the timer queue from ``enqueued`` and links each entry into the wheel, at the
  tick of its delivery time (an entry whose tick has passed goes to the next tick to fire);
  woken by the store's arrival listener.
- fire: every tick of ``timer_precision_ms`` that has fully passed is fired: its chain is
  detached (recorded in the checkpoint first), and its messages are re-stored in their real
  topics through the durable-save seam, a batch at a time; after each durable batch the
  checkpoint counts the records delivered. A message is thus delivered between 0 and one
  precision after its time (plus the time to store it), never before.

Restart: the checkpoint and recover() restore the wheel; a chain being fired goes on after its
last counted batch; that next batch's messages may have been stored before the crash without
being counted, so each is looked up first (by UNIQ_KEY in the real topic, a copy carrying
TIMER_OUT_MS stored after the timer entry) and skipped when found: no duplicates, no loss.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Iterator

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.tables.topic_config_manager import TIMER_TOPIC
from orbitmq.broker.timer.wheel_files import TimerRecord, WheelFiles
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["TimerService", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
           "TIMER_OUT_MS", "timer_due_ms"]

log = logging.getLogger(__name__)

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"  # set on the delivered copy: when it was fired
ENQUEUE_BATCH_MAX = 1024  # timer queue entries linked per step
DELIVER_BATCH_MAX = 32  # messages re-stored (and looked up after a crash) per step
MARGIN_S = 3600  # wheel ticks beyond the longest delay: room for an enqueue that lags behind
IDLE_WAIT_MAX_S = 1.0  # the enqueue loop's longest sleep without an arrival
PUT_RETRY_WAIT_S = 1.0
CHECKPOINT_IDLE_S = 1.0  # fired_through of empty ticks is saved at most this often
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)
_PUT_OK = PutMessageStatus.PUT_OK


def timer_due_ms(props: dict[str, str], now_ms: int) -> int | None:
    """The absolute delivery time a message's timer properties ask for; None without them.

    Raises:
        BrokerError: MESSAGE_ILLEGAL when a timer property is not a whole number or negative.
    """
    for name, scale, relative in ((TIMER_DELIVER_MS, 1, False), (TIMER_DELAY_SEC, 1000, True),
                                  (TIMER_DELAY_MS, 1, True)):
        raw = props.get(name)
        if raw is None:
            continue
        if not raw.isdigit() or len(raw) > 18:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                              f"timer property {name}={raw!r} is not a non-negative whole number")
        value = int(raw) * scale
        return now_ms + value if relative else value
    return None


class TimerService:
    """Parks timer messages and delivers them on time (module docstring).

    Args:
        ctx: the broker's context (config, store, topics, the durable-save seam).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.store = ctx.store
        cfg = ctx.config
        self.precision_ms = cfg.timer_precision_ms
        self.max_delay_ms = cfg.timer_max_delay_s * 1000
        slots = math.ceil((self.max_delay_ms + MARGIN_S * 1000) / self.precision_ms)
        self.files = WheelFiles(os.path.join(cfg.store.store_path, "timer"), self.precision_ms, slots)
        self._ids: UniqIdGenerator | None = None
        self._arrived = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = False  # on the store's arrivals (once, however often it starts)
        self._saved_at = 0.0
        self._writing: asyncio.Future[None] | None = None
        self.parked = 0  # messages parked since start
        self.delivered = 0  # messages re-stored since start
        self.skipped_after_crash = 0  # found already delivered when a fire resumed

    # -- sending --------------------------------------------------------------------------------
    def park(self, msg: MessageInner) -> bool:
        """The send paths' hook: redirect ``msg`` to the timer topic when its timer properties
        ask for a later time; True when it did. Raises BrokerError (MESSAGE_ILLEGAL) for a
        malformed time or one beyond ``timer_max_delay_s``."""
        now = self.store.clock()
        due = timer_due_ms(msg.properties, now)
        if due is None or msg.topic == TIMER_TOPIC:
            return False
        if due - now > self.max_delay_ms:
            raise BrokerError(ResponseCode.MESSAGE_ILLEGAL,
                              f"timer message delivery time {due} is more than "
                              f"{self.max_delay_ms // 1000} s ahead (timer_max_delay_s)")
        if due <= now:
            return False  # due already: stored as it is
        props = msg.properties
        if not props.get(PropertyKey.UNIQ_KEY):  # the key a resumed fire looks it up by
            props[PropertyKey.UNIQ_KEY] = self._uniq_id()
        props[TIMER_DELIVER_MS] = str(due)
        props[PropertyKey.REAL_TOPIC] = msg.topic
        props[PropertyKey.REAL_QID] = str(msg.queue_id)
        msg.topic = TIMER_TOPIC
        msg.queue_id = 0
        self.parked += 1
        return True

    def _uniq_id(self) -> str:
        if self._ids is None:
            self._ids = UniqIdGenerator(self.ctx.host.store_host[0] if ":" not in
                                        self.ctx.host.store_host[0] else "127.0.0.1")
        return self._ids.next()

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Open the files and recover them (StoreError when they cannot be used: the files
        are closed again)."""
        self.files.open()
        try:
            self.files.recover()
        except BaseException:
            self.files.close()
            raise
        if self.files.checkpoint.fired_through < 0:  # a new wheel: nothing before now to fire
            self.files.checkpoint.fired_through = self.store.clock() // self.precision_ms - 1
        if self.ctx.topics.get(TIMER_TOPIC) is None:
            self.ctx.topics.create_system_topic(TIMER_TOPIC, 1)

    def start(self) -> None:
        """Fire and enqueue (a master only: fired timers are stored); again after ``pause``."""
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        if not self._listening:
            self.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        self._tasks = [asyncio.create_task(self._fire_loop(), name="orbitmq-timer-fire"),
                       asyncio.create_task(self._enqueue_loop(), name="orbitmq-timer-enqueue")]

    async def pause(self) -> None:
        """Stop firing, files kept open (a master demoted to a slave; ``start`` resumes)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)

    async def stop(self) -> None:
        await self.pause()
        if self.files.log_size or self.files.checkpoint.fired_through >= 0:
            try:
                self.files.save_checkpoint()
            except OSError as e:
                log.error("timer checkpoint not saved at stop: %s", e)
        self.files.close()

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic != TIMER_TOPIC or self._loop is None:
            return
        try:
            call_soon_from_any_thread(self._loop, self._arrived.set)
        except RuntimeError:
            pass  # the loop is closing

    @property
    def pending(self) -> int:
        """Timer entries stored and not yet linked into the wheel (a lag, not the timers)."""
        return max(self.store.get_max_offset_in_queue(TIMER_TOPIC, 0) - self.files.checkpoint.enqueued, 0)

    # -- enqueue --------------------------------------------------------------------------------
    async def _enqueue_loop(self) -> None:
        while True:
            self._arrived.clear()
            try:
                linked = self.enqueue_once()
            except OSError:
                log.exception("timer enqueue failed; retrying")
                linked = 0
                await asyncio.sleep(PUT_RETRY_WAIT_S)
            if linked:
                await asyncio.sleep(0)
                continue
            try:
                await asyncio.wait_for(self._arrived.wait(), IDLE_WAIT_MAX_S)
            except TimeoutError:
                pass

    def _next_tick(self) -> int:
        cp = self.files.checkpoint
        return (cp.firing["tick"] if cp.firing else cp.fired_through) + 1

    def enqueue_once(self) -> int:
        """Link up to ENQUEUE_BATCH_MAX timer queue entries into the wheel; how many."""
        cp = self.files.checkpoint
        high = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        low = self.store.get_min_offset_in_queue(TIMER_TOPIC, 0)
        if cp.enqueued < low:
            log.error("timer queue entries %d..%d are gone (retention); skipped", cp.enqueued, low - 1)
            cp.enqueued = low
        floor = self._next_tick()
        entries: list[tuple[int, int, int, int, int]] = []
        offset = cp.enqueued
        while offset < high and len(entries) < ENQUEUE_BATCH_MAX:
            entry = self.store.queue_entry(TIMER_TOPIC, 0, offset)
            if entry is None:
                break
            phy, size, due = entry  # the dispatch gives a timer entry its time as tags code
            tick = max(due // self.precision_ms, floor)
            if tick - floor >= self.files.slots:
                break  # beyond the wheel until firing catches up (never after a normal park)
            entries.append((tick, due, phy, offset, size))
            offset += 1
        if not entries:
            return 0
        self.files.append(entries)
        cp.enqueued = offset
        return len(entries)

    # -- firing ---------------------------------------------------------------------------------
    async def _fire_loop(self) -> None:
        cp = self.files.checkpoint
        if cp.firing is not None:  # a chain was being fired when the broker stopped
            await self._fire_detached(resumed=True)
        while True:
            now_tick = self.store.clock() // self.precision_ms
            try:
                await self._fire_passed(now_tick)
            except OSError:
                log.exception("timer fire failed; retrying")
                await asyncio.sleep(PUT_RETRY_WAIT_S)
                continue
            next_ms = (cp.fired_through + 2) * self.precision_ms
            await asyncio.sleep(max(next_ms - self.store.clock(), 0) / 1000)

    async def _fire_passed(self, now_tick: int) -> None:
        """Fire every tick that has fully passed (a long stop: each slot once)."""
        cp = self.files.checkpoint
        last = now_tick - 1
        if last - cp.fired_through > self.files.slots:
            cp.fired_through = last - self.files.slots
        while cp.fired_through < last:
            tick = cp.fired_through + 1
            head = self.files.head(tick)
            if head:
                cp.firing = {"tick": tick, "head": head, "done": 0}
                await self._checkpoint()  # detached on disk before the head is cleared
                self.files.set_head(tick, 0)
                await self._fire_detached(resumed=False)
            else:
                cp.fired_through = tick
        if time.monotonic() - self._saved_at > CHECKPOINT_IDLE_S:
            self._saved_at = time.monotonic()
            await self._checkpoint()

    async def _checkpoint(self) -> None:
        """The checkpoint as it is now, synced and written off the loop. Shielded: a stop that
        cancels the loop waits for the write instead of writing the same file beside it."""
        self._writing = asyncio.ensure_future(
            asyncio.to_thread(self.files.write_checkpoint, self.files.snapshot()))
        await asyncio.shield(self._writing)

    async def _fire_detached(self, *, resumed: bool) -> None:
        """Deliver the chain the checkpoint says is being fired, batch by batch."""
        cp = self.files.checkpoint
        firing = cp.firing
        assert firing is not None
        records = self.files.chain(firing["head"], firing["done"])
        check_first = resumed
        while True:
            batch = _take(records, DELIVER_BATCH_MAX)
            if not batch:
                break
            while not await self._deliver(batch, check_first):
                await asyncio.sleep(PUT_RETRY_WAIT_S)  # not durable: the same batch again
            check_first = False
            firing["done"] += len(batch)
            await self._checkpoint()
        cp.fired_through = max(cp.fired_through, firing["tick"])
        cp.firing = None
        await self._checkpoint()

    async def _deliver(self, batch: list[TimerRecord], check_first: bool) -> bool:
        """Re-store a batch in the real topics; True once durable."""
        last: PutMessageResult | None = None
        now = self.store.clock()
        for record in batch:
            msg = self.store.look_message_by_offset(record.phy_offset, record.size)
            if msg is None or msg.topic != TIMER_TOPIC:
                log.error("timer record at %d names no timer message (offset %d); skipped",
                          record.pos, record.phy_offset)
                continue
            if check_first and self._already_delivered(msg):
                self.skipped_after_crash += 1
                continue
            inner = self._real_message(msg, now)
            if inner is None:
                continue
            result = self.ctx.saver.append([inner])
            if result.status is not _PUT_OK:
                log.warning("timer delivery refused by the store: %s", result.status.value)
                return False
            last = result
            self.delivered += 1
        if last is None:
            return True
        return (await self.ctx.saver.settled(last)).status is _PUT_OK

    def _real_message(self, msg: MessageExt, now_ms: int) -> MessageInner | None:
        props = dict(msg.properties)
        topic = props.get(PropertyKey.REAL_TOPIC)
        if not topic:
            log.error("timer message %s has no REAL_TOPIC; dropped", msg.uniq_key)
            return None
        tc = self.ctx.topics.get(topic)
        try:
            queue_id = int(props.get(PropertyKey.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        if tc is not None and not 0 <= queue_id < max(tc.write_queue_nums, 1):
            queue_id = queue_id % max(tc.write_queue_nums, 1)
        props.pop(TIMER_DELAY_SEC, None)
        props.pop(TIMER_DELAY_MS, None)
        props[TIMER_OUT_MS] = str(now_ms)
        return MessageInner(
            topic, max(queue_id, 0), bytes(msg.body), props, msg.flag,
            msg.sys_flag & _USER_SYS_FLAGS, msg.born_timestamp, msg.born_host,
            self.ctx.host.store_host, msg.reconsume_times,
        )

    def _already_delivered(self, msg: MessageExt) -> bool:
        """Whether the real topic holds this timer message's delivered copy (a resumed fire)."""
        topic = msg.properties.get(PropertyKey.REAL_TOPIC)
        key = msg.uniq_key
        if not topic or not key:
            return False
        for copy in self.store.query_message(topic, key, 16, msg.store_timestamp):
            if TIMER_OUT_MS in copy.properties and copy.store_timestamp >= msg.store_timestamp:
                return True
        return False


def _take(records: Iterator[TimerRecord], n: int) -> list[TimerRecord]:
    out = []
    for record in records:
        out.append(record)
        if len(out) >= n:
            break
    return out
