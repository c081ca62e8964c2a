"""Delay levels: parking delayed messages in ``SCHEDULE_TOPIC_XXXX`` and delivering them on time.

A message whose DELAY property is a level > 0 (and that is not a transaction half message) is not
stored in its topic: :func:`apply_delay` turns it into a message of ``SCHEDULE_TOPIC_XXXX``, queue
``level - 1`` (levels above the highest configured one count as the highest), with its real
topic and queue in the REAL_TOPIC and REAL_QID properties. The store gives each entry of that
topic's consume queues the *delivery time* (store time + the level's delay) as its tags code.

:class:`ScheduleService` runs one delivery task per level. A level's queue is in delivery-time
order (one delay per level, store times never decrease), so a task reads from its offset, re-stores
every due message in its real topic and queue (the DELAY property removed; every other property,
UNIQ_KEY included, kept, and REAL_TOPIC / REAL_QID left as RocketMQ leaves them), then persists
the new offsets in the metadata store (store/metadata_db.py, kind ``delay_offsets``: level -> next
queue offset, one row per level, one transaction per batch). A ``delayOffset.json`` left by an
older broker (``{"offsetTable": {"1": 12}}``; Java's bare numeric keys are read too) is imported
at the first start and renamed ``delayOffset.json.migrated``. A crash after a delivery and
before the persist re-delivers that last batch once: at-least-once, with duplicates bounded by
one batch of ``DELIVER_BATCH_MAX`` per level. Re-stores go through the durable-save seam, and the
offsets move only once the seam says the batch is durable (under SYNC_FLUSH: synced up to the
batch's last message, one wait for the batch); otherwise the batch is delivered again later.

Recall (RocketMQ 5.3, broker/timer/timer_service.py): a delay-level send answers a recall handle
too. Each batch is read and re-stored under the timer service's recall lock (:attr:`recall_lock`),
and a message the timer service says is recalled (:attr:`recalled`) is passed over, never
re-stored: a recall answered SUCCESS is never delivered.

No busy polling: when the head of a queue is not due, the task sleeps until it is (bounded by
``WAIT_MAX_S``, against wall-clock jumps); when the queue is empty it sleeps until the store's
dispatch announces an arrival in it (same bound).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import orjson

from orbitmq.broker.config_file import config_path
from orbitmq.broker.context import BrokerContext
from orbitmq.broker.tables.metadata_table import MetadataTable, migrate_json
from orbitmq.broker.tables.topic_config_manager import SCHEDULE_TOPIC
from orbitmq.errors import StoreError
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.message import MessageExt, MessageSysFlag, PropertyKey, transaction_type
from orbitmq.store.message_inner import MessageInner
from orbitmq.store.metadata_db import DELAY_OFFSETS, Row
from orbitmq.store.status import PutMessageResult, PutMessageStatus
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["ScheduleService", "apply_delay", "delay_level_of", "load_delay_offsets",
           "DELAY_OFFSET_FILE"]

log = logging.getLogger(__name__)

DELAY_OFFSET_FILE = "delayOffset.json"
DELIVER_BATCH_MAX = 32  # messages re-stored (and at most re-delivered after a crash) per step
WAIT_MAX_S = 5.0  # longest sleep of an idle level: a bound against clock jumps and lost wake-ups
PUT_RETRY_WAIT_S = 1.0  # after a failed re-store (disk full, store stopping)
_USER_SYS_FLAGS = int(MessageSysFlag.COMPRESSED | MessageSysFlag.MULTI_TAGS)
_PUT_OK = PutMessageStatus.PUT_OK
_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
_HALF_TYPES = (int(MessageSysFlag.TRANSACTION_PREPARED_TYPE),
               int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE))


def delay_level_of(properties: dict[str, str]) -> int:
    """The DELAY property as a level; 0 when absent or not a number (stored undelayed)."""
    raw = properties.get(PropertyKey.DELAY)
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0


def apply_delay(msg: MessageInner, level_count: int) -> bool:
    """Redirect ``msg`` to the schedule topic when it asks for a delay; True when it did.

    Transaction half messages keep their DELAY until their commit re-stores them (the commit is
    the put to apply this to).
    """
    level = delay_level_of(msg.properties)
    if level <= 0 or level_count <= 0:
        return False
    if transaction_type(msg.sys_flag) in _HALF_TYPES or (
            msg.properties.get(PropertyKey.TRAN_MSG) == "true" and not msg.sys_flag & _COMMIT):
        return False
    level = min(level, level_count)
    props = msg.properties
    props[PropertyKey.DELAY] = str(level)
    props[PropertyKey.REAL_TOPIC] = msg.topic
    props[PropertyKey.REAL_QID] = str(msg.queue_id)
    msg.topic = SCHEDULE_TOPIC
    msg.queue_id = level - 1
    return True


def _real_message(msg: MessageExt, store_host: tuple[str, int]) -> MessageInner | None:
    """The message to store in its real topic; None when its REAL_TOPIC is missing."""
    props = dict(msg.properties)
    topic = props.get(PropertyKey.REAL_TOPIC)
    if not topic:
        return None
    try:
        queue_id = int(props.get(PropertyKey.REAL_QID, "0"))
    except ValueError:
        queue_id = 0
    props.pop(PropertyKey.DELAY, None)
    return MessageInner(
        topic, max(queue_id, 0), bytes(msg.body), props, msg.flag, msg.sys_flag & _USER_SYS_FLAGS,
        msg.born_timestamp, msg.born_host, store_host, msg.reconsume_times,
    )


def load_delay_offsets(data: object) -> dict[int, int]:
    """``{"offsetTable": {level: offset}}`` (delayOffset.json, GET_ALL_DELAY_OFFSET's body) as
    a table; ValueError naming what is wrong."""
    table = data.get("offsetTable") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        raise ValueError('expected {"offsetTable": {level: offset}}')
    try:
        parsed = {int(level): int(offset) for level, offset in table.items()}
    except (TypeError, ValueError):
        raise ValueError("offsetTable holds a non-integer level or offset") from None
    return parsed


class ScheduleService:
    """The delivery tasks of every delay level, on the broker's event loop.

    Args:
        ctx: the broker's context: its store (started before :meth:`start`) holds the delay
            levels (``message_delay_level``, parsed once), the topic table gets the schedule
            topic with one queue per level, re-stores go through ``ctx.saver``.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self.ctx = ctx
        self.levels_ms = ctx.store.delay_levels_ms
        self.store = ctx.store
        self.topics = ctx.topics
        self.path = config_path(ctx.config.store.store_path, DELAY_OFFSET_FILE)
        self.offsets: dict[int, int] = {}
        self._events: dict[int, asyncio.Event] = {}
        self._sleep_until: dict[int, float | None] = {}  # queue id -> due ms slept for; None busy
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._persist_lock = asyncio.Lock()
        self._writing: asyncio.Future[bool] | None = None
        # A failed write is logged and left marked: the next delivery, the broker's periodic
        # round or stop() tries again. The broker's metadata store, which its topics use.
        self.file = MetadataTable(ctx.topics.db, "delay offsets", self._rows)
        self.delivered = 0  # messages re-stored since start (for tests and runtime info)
        # Recall (the timer service's, set by the controller): whether a message is recalled,
        # and the lock a recall's check and marker hold against a batch's delivery.
        self.recalled: Callable[[MessageExt], bool] = lambda msg: False
        self.recall_lock: asyncio.Lock | None = None
        self.recalled_skipped = 0  # recalled messages passed over since start

    @property
    def level_count(self) -> int:
        return len(self.levels_ms)

    # -- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the offsets from the metadata store, importing delayOffset.json once
        (StoreError when either is unreadable: offsets must not reset)."""
        db = self.file.db
        db.open()
        offsets: dict[int, int] = {}
        for key, _sub, value in db.rows(DELAY_OFFSETS):
            try:
                level = int(key)
            except ValueError:
                level = 0
            if level < 1 or not isinstance(value, int) or value < 0:
                raise StoreError(f"{db.path}: delay offset {value!r} of level {key!r} is invalid")
            offsets[level] = value
        self.offsets = offsets
        migrate_json(self.path, self.file, self._import)

    def _import(self, data: object) -> None:
        try:
            imported = load_delay_offsets(data)
        except ValueError as e:
            raise StoreError(f"{self.path}: {e}") from None
        self.offsets.update(imported)
        self.file.mark_many((str(level), 0) for level in imported)

    def _rows(self, keys: list[tuple[str, int]]) -> list[Row]:
        offsets = self.offsets.copy()  # atomic for a dict of ints; the loop keeps changing it
        return [Row(DELAY_OFFSETS, key, 0, offsets.get(int(key))) for key, _ in keys]

    def start(self) -> None:
        """One task per level; call on the broker's loop once the store has started."""
        self._loop = asyncio.get_running_loop()
        tc = self.topics.get(SCHEDULE_TOPIC)
        if tc is None:
            self.topics.create_system_topic(SCHEDULE_TOPIC, self.level_count)
        elif tc.write_queue_nums != self.level_count:  # the levels changed since the last run
            self.topics.update(TopicConfig(SCHEDULE_TOPIC, self.level_count, self.level_count,
                                           tc.perm))
        self.store.add_arrival_listener(self._on_arrival)
        # Queues of levels no longer configured (the list got shorter) are still delivered.
        stored = max((qid + 1 for qid in self.store.queue_ids(SCHEDULE_TOPIC)), default=0)
        for level in range(1, max(self.level_count, stored) + 1):
            self._events[level - 1] = asyncio.Event()
            self._sleep_until[level - 1] = None
            self._tasks.append(asyncio.create_task(self._run_level(level),
                                                   name=f"orbitmq-schedule-{level}"))
        log.info("schedule service started levels=%d", self.level_count)

    async def stop(self) -> None:
        """Stop delivering and persist the offsets (idempotent)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._writing is not None and not self._writing.done():
            await asyncio.gather(self._writing, return_exceptions=True)
        if tasks:
            self.file.save(force=True)

    def replace_offsets(self, offsets: dict[int, int]) -> bool:
        """A slave's copy of its master's delay offsets (GET_ALL_DELAY_OFFSET); False when
        nothing changed. A slave runs no delivery task: it only keeps the table."""
        if offsets == self.offsets:
            return False
        levels = offsets.keys() | self.offsets.keys()
        self.offsets = dict(offsets)
        self.file.mark_many((str(level), 0) for level in levels)
        self.file.save()
        return True

    def encode(self) -> bytes:
        """The table's JSON, as GET_ALL_DELAY_OFFSET answers it (delayOffset.json's shape); works
        on a copy (atomic for a dict of ints) of what the loop keeps changing."""
        offsets = self.offsets.copy()
        return orjson.dumps({"offsetTable": {str(k): v for k, v in sorted(offsets.items())}})

    async def _persist(self) -> None:
        async with self._persist_lock:
            # Shielded: a stop() cancelling the task waits for this write instead of racing it.
            self.file.mark_many((str(level), 0) for level in list(self.offsets))  # a few rows
            self._writing = asyncio.ensure_future(asyncio.to_thread(self.file.save))
            await asyncio.shield(self._writing)

    # -- wake-ups -------------------------------------------------------------------------------
    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store dispatch thread: wake a level whose task sleeps past the new message's time."""
        if topic != SCHEDULE_TOPIC or queue_id not in self._events or self._loop is None:
            return
        until = self._sleep_until.get(queue_id)
        if until is not None and tags_code >= until:
            return  # it wakes up earlier for the head of the queue anyway
        try:
            call_soon_from_any_thread(self._loop, self._events[queue_id].set)
        except RuntimeError:
            pass  # the loop is closing: the broker is stopping

    # -- delivery -------------------------------------------------------------------------------
    async def _run_level(self, level: int) -> None:
        queue_id = level - 1
        event = self._events[queue_id]
        while True:
            event.clear()
            self._sleep_until[queue_id] = None  # busy: any arrival wakes it again
            try:
                due_ms = await self.deliver_due(level)
            except Exception:
                log.exception("delay level %d: delivery failed", level)
                due_ms = self.store.clock() + PUT_RETRY_WAIT_S * 1000
            if due_ms is not None and due_ms <= self.store.clock():
                await asyncio.sleep(0)  # more is due: go on, but let the loop breathe
                continue
            self._sleep_until[queue_id] = math.inf if due_ms is None else due_ms
            wait_s = WAIT_MAX_S if due_ms is None else (due_ms - self.store.clock()) / 1000
            try:
                await asyncio.wait_for(event.wait(), min(max(wait_s, 0.0), WAIT_MAX_S))
            except TimeoutError:
                pass

    def _bounded_offset(self, level: int) -> tuple[int, int]:
        """(next offset to deliver, max offset) of a level, the offset clamped into the queue."""
        queue_id = level - 1
        low = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
        high = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, queue_id)
        offset = self.offsets.get(level, 0)
        if not low <= offset <= high:
            log.warning("delay level %d: offset %d outside the queue [%d, %d], corrected",
                        level, offset, low, high)
            offset = min(max(offset, low), high)
            self.offsets[level] = offset
        return offset, high

    async def deliver_due(self, level: int) -> float | None:
        """Re-store up to DELIVER_BATCH_MAX due messages of a level, then persist its offset.

        Returns the delivery time (ms) of the next undelivered message (<= now when more are
        due already), or None when the level's queue has nothing left.
        """
        if self.recall_lock is None:
            return await self._deliver_due(level)
        async with self.recall_lock:
            return await self._deliver_due(level)

    async def _deliver_due(self, level: int) -> float | None:
        offset, high = self._bounded_offset(level)
        now = self.store.clock()
        start, next_due = offset, None
        pending: list[tuple[int, MessageInner | None]] = []
        while offset < high and len(pending) < DELIVER_BATCH_MAX:
            entry = self.store.queue_entry(SCHEDULE_TOPIC, level - 1, offset)
            if entry is None:
                break
            phy, size, due = entry
            if due > now:
                next_due = float(due)
                break
            msg = self.store.look_message_by_offset(phy, size)
            if msg is not None and self.recalled(msg):
                self.recalled_skipped += 1
                pending.append((offset, None))  # passed over: its offset moves on
                offset += 1
                continue
            inner = _real_message(msg, self.ctx.host.store_host) if msg is not None else None
            if inner is None:
                log.error("delay level %d: entry %d is unreadable or has no REAL_TOPIC; skipped",
                          level, offset)
            pending.append((offset, inner))
            offset += 1
        if not pending:
            return next_due
        offset, last = self._append(level, pending)
        if last is not None and (await self.ctx.saver.settled(last)).status is not _PUT_OK:
            log.warning("delay level %d: re-stored entries %d..%d not durable (%s); delivering "
                        "them again", level, start, offset - 1, last.status.value)
            return now + PUT_RETRY_WAIT_S * 1000  # offsets stay: at least once
        if offset == start:
            return now + PUT_RETRY_WAIT_S * 1000  # nothing appended: retry after a pause
        self.offsets[level] = offset
        await self._persist()
        if offset < high and offset - start < len(pending):
            return now + PUT_RETRY_WAIT_S * 1000  # a put failed midway
        return now if offset < high and next_due is None else next_due

    def _append(self, level: int, pending: list[tuple[int, MessageInner | None]],
                ) -> tuple[int, PutMessageResult | None]:
        """Append in queue order, stopping at the first refused put; returns the offset reached
        and the last append (durable up to its end means durable for all: offsets grow)."""
        last: PutMessageResult | None = None
        reached = pending[0][0]
        for offset, inner in pending:
            if inner is not None:
                result = self.ctx.saver.append([inner])
                if result.status is not _PUT_OK:
                    log.warning("delay level %d: re-store of entry %d refused: %s; retrying",
                                level, offset, result.status.value)
                    return reached, last
                last = result
                self.delivered += 1
            reached = offset + 1
        return reached, last
