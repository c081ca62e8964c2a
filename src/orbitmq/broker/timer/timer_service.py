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

Recall (RocketMQ 5.3's RECALL_MESSAGE; handles in protocol/recall_handle.py): a send that parks
a message, here or in a delay level (schedule_service.py), answers a recall handle
(:meth:`TimerService.recall_handle`). :meth:`TimerService.recall`
checks it as RocketMQ's broker does (``recall_message_enable``, role, permission, topic, handle,
time left) and refuses, besides, a message whose tick has been fired or is being fired (it may
have been delivered): ILLEGAL_OPERATION "recall failed, timestamp invalid". Otherwise it stores a
recall marker (``TIMER_DEL_UNIQKEY``: the real topic + the message's UNIQ_KEY, tag
``_RECALL_TAG_``) in the timer topic's queue 1, durably, and remembers its delete key; the fire
skips a message whose key is remembered, and so do the delay levels. The check, the marker and
the key happen under the lock each delivered batch holds (the delay levels' too), so a recall
answered SUCCESS is never delivered. At start the
keys are read back from queue 1 (markers whose time lies within ``MARGIN_S`` before the last
fired tick or later): a restart, a crash or a promoted slave (the markers are replicated with
the commit log) skips the same messages.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Iterator

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.durable_save import APPENDED
from orbitmq.broker.tables.topic_config_manager import (
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
)
from orbitmq.broker.timer.wheel_files import TimerRecord, WheelFiles
from orbitmq.errors import BrokerError
from orbitmq.protocol.bodies import Perm
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.recall_handle import (
    RECALL_TAG,
    TIMER_DEL_UNIQKEY,
    build_recall_handle,
    decode_recall_handle,
    delete_key,
)
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["TimerService", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
           "TIMER_OUT_MS", "timer_due_ms", "RECALL_QUEUE_ID"]

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
TIMER_QUEUE_NUMS = 2  # queue 0: the timers; queue 1: recall markers
RECALL_QUEUE_ID = 1
_PERM_WRITE = int(Perm.WRITE)
_UNAVAILABLE = "recall failed, broker service not available"  # RocketMQ's remarks
_TIME_INVALID = "recall failed, timestamp invalid"


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
        # Recalls: delete key -> (the tick of the recalled message's delivery time, when it was
        # learnt: monotonic s). Checked and changed under the lock, which each delivered batch
        # holds, the delay levels' too (module docstring).
        self._recalled: dict[str, tuple[int, float]] = {}
        self._lock = asyncio.Lock()
        self.recalled = 0  # recalled messages skipped by the fire since start

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
            self.ctx.topics.create_system_topic(TIMER_TOPIC, TIMER_QUEUE_NUMS)

    def start(self) -> None:
        """Fire and enqueue (a master only: fired timers are stored); again after ``pause``."""
        if self._tasks:
            return
        self._loop = asyncio.get_running_loop()
        if not self._listening:
            self.store.add_arrival_listener(self._on_arrival)
            self._listening = True
        tc = self.ctx.topics.get(TIMER_TOPIC)
        if tc is not None and tc.read_queue_nums < TIMER_QUEUE_NUMS:
            # Made by a broker before recall markers had queue 1 (a master's change: a slave's
            # table is its master's copy).
            tc.read_queue_nums = tc.write_queue_nums = TIMER_QUEUE_NUMS
            self.ctx.topics.update(tc)
        self._load_recalls()
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
            self._prune_recalls()
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
            while True:
                async with self._lock:  # a recall waits for the batch, or the batch for it
                    done = await self._deliver(batch, check_first)
                if done:
                    break
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
            if self._recalled and self._is_recalled(msg):
                self.recalled += 1
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

    # -- recall ---------------------------------------------------------------------------------
    def recall_handle(self, msg: MessageInner) -> str | None:
        """The recall handle of a message :meth:`park` redirected or one parked in a delay
        level (None for any other, and for a retry topic's, as RocketMQ)."""
        props = msg.properties
        if msg.topic == TIMER_TOPIC:
            due = props.get(TIMER_DELIVER_MS, "")
            due_ms = int(due) if due.isdigit() else -1
        elif msg.topic == SCHEDULE_TOPIC and 0 <= msg.queue_id < len(self.store.delay_levels_ms):
            # A delay level: due its delay after it is stored (from now: a bound below it).
            due_ms = self.store.clock() + self.store.delay_levels_ms[msg.queue_id]
        else:
            return None
        real = props.get(PropertyKey.REAL_TOPIC)
        key = props.get(PropertyKey.UNIQ_KEY)
        if not real or not key or due_ms < 0 or real.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return None
        return build_recall_handle(real, self.ctx.config.broker_name, due_ms, key)

    async def recall(self, topic: str, handle_text: str, producer_group: str | None,
                     born_host: tuple[str, int]) -> str:
        """Cancel the delivery of the timer or delay-level message ``handle_text`` names; its
        message id.

        Raises:
            BrokerError: with RocketMQ's codes and remarks: NO_PERMISSION (recall off),
                SLAVE_NOT_AVAILABLE, SERVICE_NOT_AVAILABLE (broker not writable, timer not
                running), TOPIC_NOT_EXIST, ILLEGAL_OPERATION (a bad handle, another topic or
                broker, a time passed or too far, a message fired already), SYSTEM_ERROR (the
                marker could not be stored).
        """
        cfg = self.ctx.config
        if not cfg.recall_message_enable:
            raise BrokerError(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if not self.ctx.role.accepts_writes:
            raise BrokerError(ResponseCode.SLAVE_NOT_AVAILABLE, _UNAVAILABLE)
        if not cfg.broker_permission & _PERM_WRITE or not self._tasks:
            raise BrokerError(ResponseCode.SERVICE_NOT_AVAILABLE, _UNAVAILABLE)
        if self.ctx.topics.get(topic) is None:
            raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        handle = decode_recall_handle(handle_text)
        if handle.topic != topic:
            raise BrokerError(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != cfg.broker_name:
            raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _UNAVAILABLE)
        left = handle.timestamp - self.store.clock()
        if left <= 0 or left >= self.max_delay_ms:
            raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _TIME_INVALID)
        key = delete_key(handle.topic, handle.message_id)
        tick = handle.due_ms // self.precision_ms
        async with self._lock:  # no batch of the timer or of a delay level is being delivered
            if handle.due_ms <= self.store.clock() or tick <= self._fired_or_firing():
                raise BrokerError(ResponseCode.ILLEGAL_OPERATION, _TIME_INVALID)
            if key in self._recalled:
                return handle.message_id  # recalled before: the same answer
            now = self.store.clock()
            props = {TIMER_DEL_UNIQKEY: key, PropertyKey.UNIQ_KEY: handle.message_id,
                     TIMER_DELIVER_MS: str(handle.due_ms), PropertyKey.REAL_TOPIC: handle.topic,
                     PropertyKey.TAGS: RECALL_TAG}
            if producer_group:
                props[PropertyKey.PGROUP] = producer_group
            marker = MessageInner(TIMER_TOPIC, RECALL_QUEUE_ID, b"0", props, 0, 0, now,
                                  born_host, self.ctx.host.store_host, 0)
            result = await self.ctx.saver.settled(self.ctx.saver.append([marker]))
            if result.status not in APPENDED:
                raise BrokerError(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
            self._recalled[key] = (tick, time.monotonic())
        log.info("timer message %s of %s recalled (due %d)", handle.message_id, topic, handle.due_ms)
        return handle.message_id

    def _fired_or_firing(self) -> int:
        """The last tick whose messages may have been delivered."""
        cp = self.files.checkpoint
        return max(cp.fired_through, cp.firing["tick"]) if cp.firing else cp.fired_through

    def _is_recalled(self, msg: MessageExt) -> bool:
        topic = msg.properties.get(PropertyKey.REAL_TOPIC)
        key = msg.uniq_key
        return bool(topic and key) and delete_key(topic, key) in self._recalled  # type: ignore[arg-type]

    def _load_recalls(self) -> None:
        """The delete keys of the markers in queue 1 that may still matter (module docstring)."""
        self._recalled.clear()
        floor = self._fired_or_firing() - MARGIN_S * 1000 // self.precision_ms
        offset = self.store.get_min_offset_in_queue(TIMER_TOPIC, RECALL_QUEUE_ID)
        high = self.store.get_max_offset_in_queue(TIMER_TOPIC, RECALL_QUEUE_ID)
        while offset < high:
            entry = self.store.queue_entry(TIMER_TOPIC, RECALL_QUEUE_ID, offset)
            offset += 1
            if entry is None:
                continue
            phy, size, due = entry
            if due // self.precision_ms < floor:
                continue
            msg = self.store.look_message_by_offset(phy, size)
            key = msg.properties.get(TIMER_DEL_UNIQKEY) if msg is not None else None
            if key:
                self._recalled[key] = (due // self.precision_ms, time.monotonic())
        if self._recalled:
            log.info("timer: %d recalled messages will not be delivered", len(self._recalled))

    def _prune_recalls(self) -> None:
        """Forget recalls whose time lies more than MARGIN_S before the last fired tick and
        that were learnt more than MARGIN_S ago (a broker catching up after a long stop
        delivers late: its recalls stay for that long)."""
        if not self._recalled:
            return
        floor = self.files.checkpoint.fired_through - MARGIN_S * 1000 // self.precision_ms
        old = time.monotonic() - MARGIN_S
        for key in [k for k, (tick, learnt) in self._recalled.items() if tick < floor and learnt < old]:
            del self._recalled[key]

    @property
    def recall_lock(self) -> asyncio.Lock:
        """Held by a recall's check and marker and by each batch delivered (the delay levels'
        batches too: broker/schedule_service.py)."""
        return self._lock

    def is_recalled(self, msg: MessageExt) -> bool:
        """Whether a parked message (timer or delay level) was recalled."""
        return bool(self._recalled) and self._is_recalled(msg)


def _take(records: Iterator[TimerRecord], n: int) -> list[TimerRecord]:
    out = []
    for record in records:
        out.append(record)
        if len(out) >= n:
            break
    return out
