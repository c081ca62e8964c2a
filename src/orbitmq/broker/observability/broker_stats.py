"""The broker's traffic counters: what was stored and read, by topic and by group.

The send and pull handlers call :meth:`BrokerStats.on_send` once per request (a batch is one
call) and :meth:`BrokerStats.on_get` once per answered pull; each call is a few integer
additions on plain objects, so counting costs the hot path nothing measurable. Everything else
is derived from these counters when somebody asks:

- Prometheus (``broker/observability/metrics_collector.py``) turns them into RocketMQ 5's families at scrape;
- GET_BROKER_RUNTIME_INFO reads the broker totals and their rates over the last 10 s, 1 min and
  10 min (``putTps``, ``getTransferedTps``...) from one snapshot per second (:meth:`tick`);
- VIEW_BROKER_STATS_DATA reads one counter's sum, rate and average per request over the last
  minute, hour and day from snapshots every 10 s, 10 min and hour, as RocketMQ's stats items.

Counters start at zero when the broker starts (RocketMQ's do too). Message types follow
RocketMQ 5's ``message_type`` label: a transaction half message is ``transaction``, a message
parked for a delay level is ``delay``, everything else ``normal`` (``fifo`` is given at scrape
time to topics whose config says ``order``: nothing on the remoting wire marks an orderly send).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING

from orbitmq.broker.tables.topic_config_manager import SCHEDULE_TOPIC, TRANS_HALF_TOPIC
from orbitmq.metrics.buckets import FLUSH_LATENCY_BOUNDS_MS, MESSAGE_SIZE_BOUNDS_BYTES, Buckets

if TYPE_CHECKING:
    from orbitmq.store.message_inner import MessageInner
    from orbitmq.store.status import AppendMessageResult, GetMessageResult

__all__ = [
    "BrokerStats",
    "PutCounter",
    "GetCounter",
    "StatsWindow",
    "STATS_NAMES",
    "MESSAGE_TYPES",
    "COUNTERS_MAX",
]

NORMAL, TRANSACTION, DELAY, FIFO = "normal", "transaction", "delay", "fifo"
MESSAGE_TYPES = (NORMAL, TRANSACTION, DELAY)
_SIZE_BOUNDS = MESSAGE_SIZE_BOUNDS_BYTES
COUNTERS_MAX = 100_000  # (topic) and (topic, group) counters kept; later ones are not counted
PULL_OFFSETS_MAX = 200_000  # (group, topic, queue) pull positions kept for inflight figures
TPS_SAMPLES_MAX = 601  # one a second: the 10 s, 1 min and 10 min rates of the runtime info
MINUTE_SAMPLE_MS, HOUR_SAMPLE_MS, DAY_SAMPLE_MS = 10_000, 600_000, 3_600_000
MINUTE_SAMPLES_MAX, HOUR_SAMPLES_MAX, DAY_SAMPLES_MAX = 7, 7, 25
# VIEW_BROKER_STATS_DATA's statsName values, as RocketMQ's BrokerStatsManager names them.
STATS_NAMES = ("TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE", "GROUP_GET_NUMS", "GROUP_GET_SIZE",
               "BROKER_PUT_NUMS", "BROKER_GET_NUMS")


def _wall_ms() -> int:
    return int(time.time() * 1000)


class PutCounter:
    """Messages stored in one topic: count, bytes (as stored), requests, and the messages per
    size bucket (MESSAGE_SIZE_BOUNDS_BYTES; a batch counts its messages at their average size).
    """

    __slots__ = ("msgs", "size", "times", "by_size")

    def __init__(self) -> None:
        self.msgs = 0
        self.size = 0
        self.times = 0
        self.by_size = [0] * (len(MESSAGE_SIZE_BOUNDS_BYTES) + 1)

    @property
    def sizes(self) -> Buckets:
        """The size histogram (its count is ``msgs`` and its sum ``size``, by construction)."""
        buckets = Buckets(MESSAGE_SIZE_BOUNDS_BYTES)
        buckets.counts = list(self.by_size)
        buckets.total = sum(buckets.counts)
        buckets.sum = float(self.size)
        return buckets


class GetCounter:
    """Messages of one topic sent to one consumer group: count, bytes, pulls that found any."""

    __slots__ = ("msgs", "size", "times")

    def __init__(self) -> None:
        self.msgs = 0
        self.size = 0
        self.times = 0


@dataclasses.dataclass(frozen=True, slots=True)
class StatsWindow:
    """One counter over a window: RocketMQ's BrokerStatsItem (``sum``, ``tps``, ``avgpt``)."""

    sum: int
    tps: float
    avgpt: float


def _message_type(msg: MessageInner) -> str:
    if msg.topic == TRANS_HALF_TOPIC:
        return TRANSACTION
    if msg.topic == SCHEDULE_TOPIC:
        return DELAY
    return NORMAL


class BrokerStats:
    """The counters (see the module docstring). Used from the event loop only, except
    ``flush_latency``, which the store's flush thread updates.

    Args:
        cluster: the broker's cluster name (the key of BROKER_PUT_NUMS and BROKER_GET_NUMS).
        clock_ms: wall-clock milliseconds, injectable for tests of the windows.
    """

    def __init__(self, cluster: str, clock_ms: Callable[[], int] = _wall_ms) -> None:
        self.cluster = cluster
        self._clock_ms = clock_ms
        self.put: dict[str, dict[str, PutCounter]] = {t: {} for t in MESSAGE_TYPES}
        self._put_normal = self.put[NORMAL]
        self.get: dict[tuple[str, str], GetCounter] = {}  # (topic, group)
        self.pull_offsets: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> next
        self.get_miss = 0  # pulls answered without messages
        self.general_sends = 0  # sends that took the general path (transactions, delays, retries)
        self.dropped = 0  # calls not counted because COUNTERS_MAX was reached
        self.flush_latency = Buckets(FLUSH_LATENCY_BOUNDS_MS)  # ms per commit log sync
        now = clock_ms()
        self.boot_ms = now
        self._tps: collections.deque[tuple[int, int, int, int, int]] = collections.deque(
            [(now, 0, 0, 0, 0)], TPS_SAMPLES_MAX)
        self._minute: collections.deque[tuple[int, dict[tuple[str, str], tuple[int, int]]]] = \
            collections.deque([(now, {})], MINUTE_SAMPLES_MAX)
        self._hour: collections.deque[tuple[int, dict[tuple[str, str], tuple[int, int]]]] = \
            collections.deque([(now, {})], HOUR_SAMPLES_MAX)
        self._day: collections.deque[tuple[int, dict[tuple[str, str], tuple[int, int]]]] = \
            collections.deque([(now, {})], DAY_SAMPLES_MAX)
        self._day_of = time.localtime(now / 1000).tm_yday
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0

    # -- the hot path ------------------------------------------------------------------------
    def on_send(self, topic: str, append: AppendMessageResult | None,
                msgs: list[MessageInner] | None) -> None:
        """One send request was handled: ``append`` is None when nothing was stored; ``msgs``
        is None when the request took the encoded path (a plain message or batch)."""
        if append is None:
            return
        if msgs is None:
            counter = self._put_normal.get(topic)
            table = self._put_normal
        else:
            self.general_sends += 1
            table = self.put[_message_type(msgs[0])]
            counter = table.get(topic)
        if counter is None:
            counter = self._new_put(table, topic)
            if counter is None:
                return
        n, size = append.msg_num, append.wrote_bytes
        counter.msgs += n
        counter.size += size
        counter.times += 1
        counter.by_size[bisect_left(_SIZE_BOUNDS, size // n if n else size)] += n

    def on_fast_sends(self, counts: list[tuple[str, int, int, int, tuple[int, ...]]]) -> None:
        """What the native fast path stored in one read, per topic: (topic, requests,
        messages, bytes, messages per size bucket), counted as ``on_send`` counts plain sends."""
        for topic, times, msgs, size, by_size in counts:
            counter = self._put_normal.get(topic)
            if counter is None:
                counter = self._new_put(self._put_normal, topic)
                if counter is None:
                    continue
            counter.msgs += msgs
            counter.size += size
            counter.times += times
            buckets = counter.by_size
            for i, n in enumerate(by_size):
                if n:
                    buckets[i] += n

    def on_get(self, group: str, topic: str, queue_id: int, result: GetMessageResult) -> None:
        """One pull was answered with ``result`` (counted when it carried messages)."""
        n = result.message_count
        if not n:
            self.get_miss += 1
            return
        key = (topic, group)
        counter = self.get.get(key)
        if counter is None:
            if len(self.get) >= COUNTERS_MAX:
                self.dropped += 1
                return
            counter = self.get[key] = GetCounter()
        counter.msgs += n
        counter.size += result.total_size
        counter.times += 1
        positions = self.pull_offsets
        where = (group, topic, queue_id)
        if where in positions or len(positions) < PULL_OFFSETS_MAX:
            positions[where] = result.next_begin_offset

    def _new_put(self, table: dict[str, PutCounter], topic: str) -> PutCounter | None:
        if sum(len(t) for t in self.put.values()) >= COUNTERS_MAX:
            self.dropped += 1
            return None
        counter = table[topic] = PutCounter()
        return counter

    # -- totals (summed when asked: the hot path updates one counter per request) -------------
    @property
    def put_msgs(self) -> int:
        return sum(c.msgs for table in self.put.values() for c in table.values())

    @property
    def put_bytes(self) -> int:
        return sum(c.size for table in self.put.values() for c in table.values())

    @property
    def put_times(self) -> int:
        return sum(c.times for table in self.put.values() for c in table.values())

    @property
    def get_msgs(self) -> int:
        return sum(c.msgs for c in list(self.get.values()))

    @property
    def get_found(self) -> int:
        return sum(c.times for c in list(self.get.values()))

    @property
    def encoded_sends(self) -> int:
        """Sends stored in one step by the stored-form encoder (the common path)."""
        return self.put_times - self.general_sends

    # -- totals ------------------------------------------------------------------------------
    def topic_put(self, topic: str) -> tuple[int, int, int]:
        """(messages, bytes, requests) stored in ``topic``, every message type."""
        msgs = size = times = 0
        for table in self.put.values():
            c = table.get(topic)
            if c is not None:
                msgs, size, times = msgs + c.msgs, size + c.size, times + c.times
        return msgs, size, times

    def item(self, name: str, key: str) -> tuple[int, int]:
        """(value, times) of one of RocketMQ's stats items (see STATS_NAMES); (0, 0) when the
        key never counted. KeyError for a name not in STATS_NAMES."""
        if name == "TOPIC_PUT_NUMS":
            msgs, _, times = self.topic_put(key)
            return msgs, times
        if name == "TOPIC_PUT_SIZE":
            _, size, times = self.topic_put(key)
            return size, times
        if name in ("GROUP_GET_NUMS", "GROUP_GET_SIZE"):
            topic, _, group = key.rpartition("@")
            c = self.get.get((topic, group))
            if c is None:
                return 0, 0
            return (c.msgs if name == "GROUP_GET_NUMS" else c.size), c.times
        if name == "BROKER_PUT_NUMS":
            return (self.put_msgs, self.put_times) if key == self.cluster else (0, 0)
        if name == "BROKER_GET_NUMS":
            return (self.get_msgs, self.get_found) if key == self.cluster else (0, 0)
        raise KeyError(name)

    def _all_items(self) -> dict[tuple[str, str], tuple[int, int]]:
        items: dict[tuple[str, str], tuple[int, int]] = {}
        topics = {t for table in self.put.values() for t in table}
        for topic in topics:
            msgs, size, times = self.topic_put(topic)
            items["TOPIC_PUT_NUMS", topic] = (msgs, times)
            items["TOPIC_PUT_SIZE", topic] = (size, times)
        for (topic, group), c in self.get.items():
            items["GROUP_GET_NUMS", f"{topic}@{group}"] = (c.msgs, c.times)
            items["GROUP_GET_SIZE", f"{topic}@{group}"] = (c.size, c.times)
        items["BROKER_PUT_NUMS", self.cluster] = (self.put_msgs, self.put_times)
        items["BROKER_GET_NUMS", self.cluster] = (self.get_msgs, self.get_found)
        return items

    # -- sampling ----------------------------------------------------------------------------
    def tick(self) -> None:
        """Take the snapshots that are due (call about once a second)."""
        now = self._clock_ms()
        self._tps.append((now, self.put_msgs, self.get_msgs, self.get_found, self.get_miss))
        for ring, every in ((self._minute, MINUTE_SAMPLE_MS), (self._hour, HOUR_SAMPLE_MS),
                            (self._day, DAY_SAMPLE_MS)):
            if now - ring[-1][0] >= every:
                ring.append((now, self._all_items()))
        day = time.localtime(now / 1000).tm_yday
        if day != self._day_of:  # midnight passed: RocketMQ's "morning" totals
            self._day_of = day
            self.put_yesterday_morning, self.put_today_morning = self.put_today_morning, self.put_msgs
            self.get_yesterday_morning, self.get_today_morning = self.get_today_morning, self.get_msgs

    def rates(self, field: int) -> tuple[float, float, float]:
        """Per second over the last 10 s, 1 min and 10 min (or since the broker started) of
        the totals' ``field``: 1 messages stored, 2 messages sent to consumers, 3 pulls that
        found messages, 4 pulls that found none."""
        now = self._clock_ms()
        current = (now, self.put_msgs, self.get_msgs, self.get_found, self.get_miss)[field]
        out = []
        for span in (10_000, 60_000, 600_000):
            base = self._base(self._tps, now - span)
            elapsed = now - base[0]
            out.append((current - base[field]) * 1000.0 / elapsed if elapsed > 0 else 0.0)
        return out[0], out[1], out[2]

    @staticmethod
    def _base(ring: collections.deque, since: int):
        """The newest sample taken at or before ``since``, else the oldest one."""
        chosen = ring[0]
        for sample in ring:
            if sample[0] > since:
                break
            chosen = sample
        return chosen

    def window(self, name: str, key: str) -> tuple[StatsWindow, StatsWindow, StatsWindow]:
        """The minute, hour and day figures of one stats item (KeyError: unknown name)."""
        value, times = self.item(name, key)
        now = self._clock_ms()
        out = []
        for ring, span in ((self._minute, 60_000), (self._hour, 3_600_000),
                           (self._day, 86_400_000)):
            taken, items = self._base(ring, now - span)
            base_value, base_times = items.get((name, key), (0, 0))
            total = value - base_value
            calls = times - base_times
            elapsed = now - taken
            out.append(StatsWindow(total, total * 1000.0 / elapsed if elapsed > 0 else 0.0,
                                   total / calls if calls > 0 else 0.0))
        return out[0], out[1], out[2]
