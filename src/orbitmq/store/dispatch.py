"""Dispatch ("reput"): turns CommitLog entries into ConsumeQueue and index entries.

It reads what the appender published (up to the commit log's wrote offset), in order, from
``reput_offset`` on. Prepared and rolled-back transaction messages get neither a queue entry nor an
index entry. After each round, arrival listeners hear about the queues that grew, one call per
(topic, queue, tags code) with the newest max offset, so a long-polling broker can wake its
held pulls without one call per message.
"""

from __future__ import annotations

import logging
import struct
import threading
from collections.abc import Callable

from orbitmq.protocol.message import (
    BLANK_MAGIC_CODE,
    MAGIC_CODE,
    MessageSysFlag,
    header_struct,
    tags_hash,
)
from orbitmq.protocol.native import NATIVE
from orbitmq.store.commit_log import CommitLog
from orbitmq.store.consume_queue import ConsumeQueue
from orbitmq.store.file_ops import StoreSpaceError
from orbitmq.store.running_flags import RetryGate, stall_remark
from orbitmq.store.service import ServiceThread

__all__ = ["DispatchService", "ArrivalListener", "SCHEDULE_TOPIC", "parse_delay_levels"]

log = logging.getLogger(__name__)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
ArrivalListener = Callable[[str, int, int, int], None]

_PREFIX = struct.Struct(">ii")
_I16 = struct.Struct(">h")
_V4 = header_struct(0)
_TAGS = b"TAGS\x01"
_KEYS = b"KEYS\x01"
_UNIQ = b"UNIQ_KEY\x01"
_DELAY = b"DELAY\x01"
_NO_LIMIT = 1 << 62
_SCAN_BLANK, _SCAN_BAD = 1, 2  # scan_stored's stops besides "limit or count reached"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_SKIPPED_TYPES = (
    MessageSysFlag.TRANSACTION_PREPARED_TYPE,
    MessageSysFlag.TRANSACTION_ROLLBACK_TYPE,
)


def parse_delay_levels(spec: str) -> list[int]:
    """``"1s 5s 10s 30s 1m ..."`` -> delay of each level in ms (level 1 first)."""
    levels = []
    for item in spec.split():
        levels.append(int(item[:-1]) * _UNIT_MS[item[-1]])
    return levels


def _prop(props: bytes, name: bytes) -> str | None:
    # find_property inlined for the hot path: properties rarely hold a name twice.
    at = props.find(name)
    while at > 0 and props[at - 1] != 2:
        at = props.find(name, at + 1)
    if at < 0:
        return None
    start = at + len(name)
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)].decode("utf-8", "replace")


class DispatchService(ServiceThread):
    """The reput loop; ``dispatch_to`` also serves recovery's synchronous re-dispatch."""

    def __init__(
        self,
        commit_log: CommitLog,
        find_or_create_cq: Callable[[str, int], ConsumeQueue],
        build_index: Callable[[str, list[str], str | None, int, int], None] | None,
        delay_levels_ms: list[int],
        round_max: int = 4096,
    ) -> None:
        super().__init__("orbitmq-dispatch", 0.01)
        self.commit_log = commit_log
        self._cq = find_or_create_cq
        self._build_index = build_index
        self._delay_levels = delay_levels_ms
        self.reput_offset = 0
        self.listeners: list[ArrivalListener] = []
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

    def dispatch_available(self, count_max: int | None = None, *, wait: bool = True) -> bool:
        """``run_once`` for at most ``count_max`` messages (None: no limit), in any thread (the
        event loop calls it between requests, see MessageStore.wake_deferred); True when
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
                self.reput_offset, count = self.dispatch_to(self.reput_offset, end, arrived, budget)
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
            if count < budget:  # caught up with ``end`` (or stopped at a bad entry)
                return self.reput_offset >= self.commit_log.max_offset

    def _notify(self, arrived: dict[tuple[str, int, int], int]) -> None:
        for (topic, queue_id, tags_code), max_offset in arrived.items():
            for listener in self.listeners:
                try:
                    listener(topic, queue_id, max_offset, tags_code)
                except Exception:
                    log.exception("arrival listener failed topic=%s queue=%d", topic, queue_id)

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
            pos = offset - mf.file_from_offset
            limit = min(mf.wrote_position, end - mf.file_from_offset)
            if NATIVE is not None:  # the same loop in C, the queue and index puts here
                budget = _NO_LIMIT if count_max is None else count_max - count
                records, pos, scanned, stop = NATIVE.scan_stored(view, pos, limit, budget)
                for record in records:
                    self._dispatch_record(mf.file_from_offset, record, arrived)
                count += scanned
                if stop == _SCAN_BLANK:
                    pos = file_size
                elif stop == _SCAN_BAD:
                    log.error("dispatch met a bad entry offset=%d", mf.file_from_offset + pos)
                    return mf.file_from_offset + pos, count
            while pos < limit and (count_max is None or count < count_max):
                total, magic = _PREFIX.unpack_from(view, pos)
                if magic == BLANK_MAGIC_CODE:
                    pos = file_size
                    break
                if magic != MAGIC_CODE or total <= 0:
                    log.error("dispatch met a bad entry offset=%d", mf.file_from_offset + pos)
                    return mf.file_from_offset + pos, count
                self._dispatch_one(view, pos, mf.file_from_offset + pos, total, arrived)
                pos += total
                count += 1
            offset = mf.file_from_offset + pos
            if pos < file_size and pos >= mf.wrote_position:
                break
        return offset, count

    def _dispatch_one(
        self,
        view: memoryview,
        pos: int,
        phy: int,
        total: int,
        arrived: dict[tuple[str, int, int], int] | None,
    ) -> None:
        """Read what dispatch needs of the message at ``pos`` (the Python twin of the C
        ``scan_stored``) and dispatch it."""
        (sys_flag,) = struct.unpack_from(">i", view, pos + 36)
        head = _V4 if not sys_flag & 48 else header_struct(sys_flag)
        fields = head.unpack_from(view, pos)
        queue_id, queue_offset, store_ts, body_len = fields[3], fields[5], fields[11], fields[16]
        if sys_flag & 12 in _SKIPPED_TYPES:
            return
        at = pos + head.size + body_len
        topic_len = view[at]
        raw_topic = bytes(view[at + 1 : at + 1 + topic_len])
        at += 1 + topic_len
        (props_len,) = _I16.unpack_from(view, at)
        props = bytes(view[at + 2 : at + 2 + props_len])
        if props:
            tags_code = tags_hash(_prop(props, _TAGS))
            keys, uniq, delay = _prop(props, _KEYS), _prop(props, _UNIQ), _prop(props, _DELAY)
        else:
            tags_code, keys, uniq, delay = 0, None, None, None
        record = (pos, total, queue_id, queue_offset, store_ts, raw_topic, tags_code, keys, uniq, delay)
        self._dispatch_record(phy - pos, record, arrived)

    def _dispatch_record(
        self,
        base: int,
        record: tuple[int, int, int, int, int, bytes, int, str | None, str | None, str | None],
        arrived: dict[tuple[str, int, int], int] | None,
    ) -> None:
        """Queue entry, index entries and arrival of one message, from what a scan read of it
        (``scan_stored``'s record; ``base`` is the segment's first offset)."""
        pos, total, queue_id, queue_offset, store_ts, raw_topic, tags_code, keys, uniq, delay = record
        topic = self._topics.get(raw_topic)
        if topic is None:
            topic = self._topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        phy = base + pos
        if topic == SCHEDULE_TOPIC:
            tags_code = self._delivery_time(delay, store_ts)
        self._cq(topic, queue_id).put(phy, total, tags_code, queue_offset)
        if self._build_index is not None and (keys or uniq):
            self._build_index(topic, keys.split() if keys else [], uniq, phy, store_ts)
        if arrived is not None:
            arrived[(topic, queue_id, tags_code)] = queue_offset + 1

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
