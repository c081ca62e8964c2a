"""The brokers' runtime info over time, for the cluster page's charts.

A broker reports rates of its own only where it has them (RocketMQ's ``putTps`` and
``getTransferedTps``: three numbers, over 10 s, 1 min and 10 min); the sampler reads every
broker's runtime info each ``console_sample_interval_ms`` and keeps the last
``console_history_max`` samples per broker, so that the charts show what happened before the page
was opened. Besides the broker's own rates it derives one that every broker has: the growth of
its commit log in bytes per second (``commitLogMaxOffset`` between two samples).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from orbitmq.client import AsyncAdmin
from orbitmq.errors import OrbitMQError

__all__ = ["Sample", "BrokerIdentity", "RuntimeSampler", "series", "first_rate", "disk_use",
           "read_runtime"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One broker's runtime info at ``at_ms`` (wall clock, ms)."""

    at_ms: int
    table: dict[str, str]


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class BrokerIdentity:
    """Where a broker address sits in the cluster (id 0: the master of its broker set)."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str

    @property
    def role(self) -> str:
        return "master" if self.broker_id == 0 else f"slave {self.broker_id}"


def first_rate(value: str | None) -> float | None:
    """The first number of a RocketMQ rate (``"12.50 10.01 3.20"``: 10 s, 1 min, 10 min); None
    when absent or not a number."""
    if not value:
        return None
    try:
        return float(value.split()[0])
    except (ValueError, IndexError):
        return None


def _int(table: dict[str, str], key: str) -> int | None:
    try:
        return int(table[key])
    except (KeyError, ValueError):
        return None


def disk_use(table: dict[str, str]) -> tuple[float | None, int | None]:
    """(share of the commit log's disk in use, 0..1, when reported; bytes the commit log holds,
    when its offsets are reported)."""
    ratio: float | None = None
    try:
        ratio = float(table["commitLogDiskRatio"])
    except (KeyError, ValueError):
        pass
    low, high = _int(table, "commitLogMinOffset"), _int(table, "commitLogMaxOffset")
    held = high - low if low is not None and high is not None and high >= low else None
    return ratio, held


def series(samples: Iterable[Sample]) -> dict[str, Any]:
    """The chart data of one broker's samples: times (s) and, per series, one value per time
    (None where unknown). ``put_tps``/``get_tps`` are None as a whole when the broker never
    reported them."""
    items = list(samples)
    times = [s.at_ms / 1000 for s in items]
    put = [first_rate(s.table.get("putTps")) for s in items]
    get = [first_rate(s.table.get("getTransferedTps")) for s in items]
    growth: list[float | None] = [None]
    for before, after in zip(items, items[1:], strict=False):
        a, b = _int(before.table, "commitLogMaxOffset"), _int(after.table, "commitLogMaxOffset")
        span_s = (after.at_ms - before.at_ms) / 1000
        growth.append(None if a is None or b is None or span_s <= 0 or b < a
                      else round((b - a) / span_s, 1))
    return {
        "t": times,
        "put_tps": put if any(v is not None for v in put) else None,
        "get_tps": get if any(v is not None for v in get) else None,
        "write_bytes_per_s": growth[: len(items)],
    }


Answers = dict[str, dict[str, str] | OrbitMQError | OSError]


async def read_runtime(admin: AsyncAdmin) -> tuple[dict[str, BrokerIdentity], Answers]:
    """Every broker the name server knows now, and each one's runtime info or why it has none
    (OrbitMQError or OSError: it did not answer, or refused)."""
    info = await admin.cluster_info()
    cluster_of = {name: c for c, names in info.cluster_addr_table.items() for name in names}
    brokers = {
        addr: BrokerIdentity(cluster_of.get(name, bd.cluster), name, int(bid), addr)
        for name, bd in info.broker_addr_table.items() for bid, addr in bd.broker_addrs.items()
    }
    answers = await asyncio.gather(*(admin.broker_runtime_info(a) for a in brokers),
                                   return_exceptions=True)
    out: Answers = {}
    for addr, answer in zip(brokers, answers, strict=True):
        if isinstance(answer, BaseException) and not isinstance(answer, OrbitMQError | OSError):
            raise answer
        out[addr] = answer
    return brokers, out


class RuntimeSampler:
    """Reads every broker's runtime info periodically (see the module docstring)."""

    def __init__(self, admin: AsyncAdmin, interval_s: float, history_max: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.admin = admin
        self.interval_s = interval_s
        self.history_max = history_max
        self._clock = clock
        self.history: dict[str, collections.deque[Sample]] = {}
        self.brokers: dict[str, BrokerIdentity] = {}
        self.errors: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None

    async def sample_once(self) -> None:
        """One round over the brokers the name server knows now; a broker that does not answer
        keeps its history and gets an error note."""
        brokers, answers = await read_runtime(self.admin)
        now_ms = int(self._clock() * 1000)
        for addr, answer in answers.items():
            if isinstance(answer, OrbitMQError | OSError):
                self.errors[addr] = str(answer) or type(answer).__name__
                continue
            self.errors.pop(addr, None)
            self.history.setdefault(addr, collections.deque(maxlen=self.history_max)).append(
                Sample(now_ms, answer))
        for gone in set(self.history) - set(brokers):  # left the cluster: its history goes too
            del self.history[gone]
            self.errors.pop(gone, None)
        self.brokers = brokers

    def latest(self, addr: str) -> Sample | None:
        samples = self.history.get(addr)
        return samples[-1] if samples else None

    def all_series(self) -> dict[str, dict[str, Any]]:
        """Broker address -> its identity and chart data (see :func:`series`)."""
        out: dict[str, dict[str, Any]] = {}
        for addr, ident in sorted(self.brokers.items(), key=lambda kv: kv[1]):
            data = series(self.history.get(addr, ()))
            out[addr] = {"broker": ident.broker_name, "role": ident.role,
                         "cluster": ident.cluster, **data}
        return out

    async def _run(self) -> None:
        failing = False
        while True:
            try:
                await self.sample_once()
                if failing:
                    log.info("runtime samples resumed")
                failing = False
            except (OrbitMQError, OSError) as e:  # the name server is away: try again later
                (log.debug if failing else log.warning)("runtime sample failed: %s", e)
                failing = True
            except Exception:  # a bug: say so, and keep the charts going
                log.exception("runtime sample failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
