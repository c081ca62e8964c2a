"""Dispatch ("reput"): turns CommitLog entries into ConsumeQueue and index entries.

It reads what the appender published (up to the commit log's wrote offset), in order, from
``reput_offset`` on. Prepared and rolled-back transaction messages get neither a queue entry nor an
index entry. After each round, arrival listeners hear about the queues that grew, one call per
(topic, queue, tags code) with the newest max offset, so a long-polling broker can wake its
held pulls without one call per message; then progress listeners hear the new ``reput_offset``
("everything below it is in the queues and the index"), so a reader that must see an
acknowledged send (read-your-writes) waits for that signal instead of polling.

With the C speedups a round is planned in C (``dispatch_plan``, store/_native/dispatch_plan.c):
each queue's new entries come as one run written with one copy (ConsumeQueue.put_run), the
index entries as one planned list (IndexService.put_planned), arrivals per run; a delay level's
messages and keys only Python splits still go message by message. Without them (or with
ORBITMQ_PURE_PYTHON=1) every message goes through ``_dispatch_record``; both give the same
queue and index files (tests/unit/store/test_dispatch_plan.py).

Invariant: ``reput_offset`` only grows (asserted after every round).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.stored import SCAN_BAD, SCAN_BLANK, ScanRecord
from orbitmq.protocol.topics import SCHEDULE_TOPIC, TIMER_TOPIC
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.file_ops import StoreSpaceError
from orbitmq.store.native import NATIVE
from orbitmq.store.running_flags import RetryGate, stall_remark
from orbitmq.store.service import ServiceThread

__all__ = ["DispatchService", "ArrivalListener", "ProgressListener", "SCHEDULE_TOPIC"]

log = logging.getLogger(__name__)

TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
ArrivalListener = Callable[[str, int, int, int], None]
ProgressListener = Callable[[int], None]

_NO_LIMIT = 1 << 62
_PLAN: Callable[..., tuple[int, int, int, list[Any], list[ScanRecord], list[Any]]] | None = (
    NATIVE.dispatch_plan if NATIVE is not None else None)


class DispatchService(ServiceThread):
    """The reput loop; ``dispatch_to`` also serves recovery's synchronous re-dispatch."""

    def __init__(
        self,
        commit_log: CommitLog,
        find_or_create_cq: Callable[[str, int], ConsumeQueue],
        build_index: Callable[[str, list[str], str | None, int, int], None] | None,
        delay_levels_ms: Sequence[int],
        round_max: int = 4096,
        put_planned_index: Callable[[list[Any]], None] | None = None,
    ) -> None:
        super().__init__("orbitmq-dispatch", 0.01)
        self.commit_log = commit_log
        self._cq = find_or_create_cq
        self._build_index = build_index
        self._put_planned_index = put_planned_index  # IndexService.put_planned
        self._plan = _PLAN if put_planned_index is not None or build_index is None else None
        self._delay_levels = delay_levels_ms
        self.reput_offset = 0
        self._reput_seen = -1  # reput_offset when this thread last looked (interval_round_due)
        self.listeners: list[ArrivalListener] = []
        self.progress_listeners: list[ProgressListener] = []
        self.round_max = round_max  # messages per round before listeners are told
        self.lock = threading.Lock()  # against delete_topics and checkpoint snapshots
        self._topics: dict[bytes, str] = {}
        # Set by the store: a queue or index write that finds no space stalls dispatch (the
        # round is dropped and tried again, whole, once the gate opens); None: the error raises.
        self.space_gate: RetryGate | None = None

    def has_work(self) -> bool:
        gate = self.space_gate
        return self.reput_offset < self.commit_log.max_offset and (gate is None or gate.is_open())

    def run_once(self) -> None:
        """Dispatch everything published so far, telling listeners after each bounded round."""
        self.dispatch_available()
        self._reput_seen = self.reput_offset

    def interval_round_due(self) -> bool:
        """Only when nobody dispatched since this thread last looked: the event loop dispatches
        inline once per iteration (MessageStore.wake), and wakes this thread when it leaves
        work over; a lone producer's sends otherwise met a thread round every interval."""
        seen, self._reput_seen = self._reput_seen, self.reput_offset
        return seen == self.reput_offset

    def dispatch_available(self, count_max: int | None = None, *, wait: bool = True) -> bool:
        """``run_once`` for at most ``count_max`` messages (None: no limit), in any thread (the
        event loop calls it between requests, see MessageStore.wake); True when
        nothing published is left undispatched. Without ``wait`` it gives up (False) when
        another thread is dispatching, instead of waiting for its round to end.

        A round that meets StoreSpaceError (see ``space_gate``) ends it with False; queue and
        index puts skip what a retry finds written already, so nothing is indexed twice."""
        gate = self.space_gate
        if gate is not None and not gate.is_open():
            return False
        done = 0
        while True:
            end = self.commit_log.max_offset
            if self.reput_offset >= end:
                return True
            budget = self.round_max if count_max is None else min(self.round_max, count_max - done)
            if budget <= 0:
                return False
            arrived: dict[tuple[str, int, int], int] = {}
            if not self.lock.acquire(blocking=wait):
                return False
            try:
                reached, count = self.dispatch_to(self.reput_offset, end, arrived, budget)
                assert reached >= self.reput_offset, "the reput offset only grows"
                self.reput_offset = reached
            except StoreSpaceError as e:
                if gate is None:
                    raise
                gate.failed(stall_remark(e))
                return False
            finally:
                self.lock.release()
            if gate is not None:
                gate.passed()
            done += count
            if arrived and self.listeners:
                self._notify(arrived)
            if self.progress_listeners:
                self._progress(reached)
            if count < budget:  # caught up with ``end`` (or stopped at a bad entry)
                return self.reput_offset >= self.commit_log.max_offset

    def _notify(self, arrived: dict[tuple[str, int, int], int]) -> None:
        for (topic, queue_id, tags_code), max_offset in arrived.items():
            for listener in self.listeners:
                try:
                    listener(topic, queue_id, max_offset, tags_code)
                except Exception:
                    log.exception("arrival listener failed topic=%s queue=%d", topic, queue_id)

    def _progress(self, reached: int) -> None:
        for listener in self.progress_listeners:
            try:
                listener(reached)
            except Exception:
                log.exception("dispatch progress listener failed offset=%d", reached)

    def dispatch_to(
        self,
        offset: int,
        end: int,
        arrived: dict[tuple[str, int, int], int] | None,
        count_max: int | None = None,
    ) -> tuple[int, int]:
        """Dispatch messages in [offset, end); returns (offset reached, messages dispatched).

        Stops early at a malformed entry (logged): recovery has already truncated any, so this only
        happens if the log changed under us.
        """
        mfq = self.commit_log.mfq
        file_size = mfq.file_size
        count = 0
        while offset < end and (count_max is None or count < count_max):
            mf = mfq.find(offset)
            if mf is None:
                log.error("dispatch found no segment offset=%d", offset)
                break
            view = mf.view
            base = mf.file_from_offset
            pos = offset - base
            limit = min(mf.wrote_position, end - base)
            budget = _NO_LIMIT if count_max is None else count_max - count
            if self._plan is not None:
                pos, scanned, stop = self._dispatch_planned(view, base, pos, limit, budget, arrived)
            else:
                records, pos, scanned, stop = stored.scan(view, pos, limit, budget)  # C or Python
                for record in records:
                    self._dispatch_record(base, record, arrived)
            count += scanned
            if stop == SCAN_BLANK:
                pos = file_size
            elif stop == SCAN_BAD:
                log.error("dispatch met a bad entry offset=%d problem=%s", base + pos,
                          stored.problem(view, pos, limit))
                return base + pos, count
            offset = base + pos
            if pos < file_size and pos >= mf.wrote_position:
                break
        return offset, count

    def _dispatch_planned(self, view: memoryview, base: int, pos: int, limit: int, budget: int,
                          arrived: dict[tuple[str, int, int], int] | None) -> tuple[int, int, int]:
        """The messages of ``view[pos:limit]`` (at most ``budget``) from the C plan (module
        docstring); returns (position reached, messages, stop)."""
        assert self._plan is not None
        reached, scanned, stop, runs, delayed, index = self._plan(
            view, pos, limit, budget, base, self._put_planned_index is not None)
        for raw_topic, queue_id, first, entries, arrivals in runs:
            topic = self._topic(raw_topic)
            self._cq(topic, queue_id).put_run(first, entries)
            if arrived is not None:
                for i in range(0, len(arrivals), 2):
                    arrived[(topic, queue_id, arrivals[i])] = arrivals[i + 1]
        for record in delayed:
            self._dispatch_record(base, record, arrived, index=False)
        if index and self._put_planned_index is not None:
            self._put_planned_index(index)
        return reached, scanned, stop

    def _topic(self, raw_topic: bytes) -> str:
        topic = self._topics.get(raw_topic)
        if topic is None:
            topic = self._topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        return topic

    def _dispatch_record(
        self,
        base: int,
        record: ScanRecord,
        arrived: dict[tuple[str, int, int], int] | None,
        index: bool = True,
    ) -> None:
        """Queue entry, index entries (unless not ``index``) and arrival of one message, from
        what the scan read of it (``base`` is the segment's first offset)."""
        pos, total, queue_id, queue_offset, store_ts, raw_topic, tags_code, keys, uniq, delay = record
        topic = self._topic(raw_topic)
        phy = base + pos
        if topic == SCHEDULE_TOPIC:
            tags_code = self._delivery_time(delay, store_ts)
        elif topic == TIMER_TOPIC:
            tags_code = self._timer_time(phy, total, store_ts)
        self._cq(topic, queue_id).put(phy, total, tags_code, queue_offset)
        if index and self._build_index is not None and (keys or uniq):
            self._build_index(topic, keys.split() if keys else [], uniq, phy, store_ts)
        if arrived is not None:
            arrived[(topic, queue_id, tags_code)] = queue_offset + 1

    def _timer_time(self, phy: int, total: int, store_ts: int) -> int:
        """A timer message's tags code: its TIMER_DELIVER_MS (the broker's timer sets it)."""
        raw = self.commit_log.read(phy, total)
        try:
            value = stored.peek(raw).properties.get(TIMER_DELIVER_MS, "") if raw is not None else ""
        except RemoteProtocolError:
            value = ""
        return int(value) if value.isdigit() and len(value) <= 18 else store_ts

    def _delivery_time(self, raw: str | None, store_ts: int) -> int:
        """A delayed message's ConsumeQueue tags code: when it is due (RocketMQ's convention)."""
        try:
            level = int(raw) if raw else 0
        except ValueError:
            level = 0
        if level <= 0 or not self._delay_levels:
            return store_ts
        level = min(level, len(self._delay_levels))
        return store_ts + self._delay_levels[level - 1]
