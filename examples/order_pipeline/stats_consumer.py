"""The consumer of OrderStats: prints each stat as it arrives and keeps the totals."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

from orbitmq import PullConsumer


class StatsConsumer(threading.Thread):
    """Long-polls every queue of the stats topic; ``stats`` maps (minute ms, product) to
    (revenue, orders); ``duplicates`` counts a (minute, product) seen twice (exactly-once: 0)."""

    def __init__(self, namesrv: str, topic: str = "OrderStats", *, quiet: bool = False) -> None:
        super().__init__(daemon=True, name="stats-consumer")
        self.namesrv, self.topic, self.quiet = namesrv, topic, quiet
        self.stats: dict[tuple[int, str], tuple[float, int]] = {}
        self.duplicates = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def totals(self) -> tuple[int, float]:
        with self._lock:
            return (sum(c for _, c in self.stats.values()),
                    round(sum(r for r, _ in self.stats.values()), 2))

    def snapshot(self) -> dict[tuple[int, str], tuple[float, int]]:
        with self._lock:
            return dict(self.stats)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def _take(self, body: bytes) -> None:
        stat = json.loads(body)
        key = (int(stat["minute_ms"]), stat["product"])
        with self._lock:
            self.duplicates += key in self.stats
            self.stats[key] = (float(stat["revenue"]), int(stat["orders"]))
        if not self.quiet:
            minute = datetime.fromtimestamp(key[0] / 1000, UTC).strftime("%H:%M")
            print(f"  stat {minute} {key[1]:<9} revenue {stat['revenue']:>9.2f} "
                  f"orders {stat['orders']:>4}", flush=True)

    def run(self) -> None:
        with PullConsumer("order-stats-printer", self.namesrv) as consumer:
            queues = consumer.fetch_queues(self.topic)
            offsets = {mq: 0 for mq in queues}
            while not self._halt.is_set():
                for mq in queues:
                    r = consumer.pull(mq, offsets[mq], 256, suspend=0.2)
                    for msg in r.messages:
                        self._take(msg.body)
                    offsets[mq] = max(offsets[mq], r.next_begin_offset)
                time.sleep(0.05)
