"""What a remoting server allows a peer to hold: memory, time and connections.

A hostile or careless client must not exhaust a server. :class:`ConnectionLimits` holds the
bounds (from the server's config); :class:`FrameBudget` is the memory all partial frames of a
server share; :class:`AcceptGate` refuses a connection at once when it would pass a count or eat
the descriptors the store needs; :class:`LimitCounters` counts each limit as it bites (the
metrics' ``orbitmq_limit_hits_total``) and :class:`RateLimitedLog` says so in the log without
letting a flood of refusals flood the log. docs/limits.md is the table for operators.
"""

from __future__ import annotations

import dataclasses
import logging
import resource
from typing import Protocol

__all__ = [
    "ConnectionLimits",
    "FrameBudget",
    "AcceptGate",
    "LimitCounters",
    "LIMIT_NAMES",
    "descriptor_limit",
]

log = logging.getLogger(__name__)

SWEEP_INTERVAL_MAX_S = 1.0  # the idle and slow-frame sweep runs at least this often...
SWEEP_INTERVAL_MIN_S = 0.01  # ...and at most this often (a tenth of the smallest limit)

# Every limit by the name its metric label and its log lines use.
LIMIT_NAMES = (
    "frame_buffer_budget",  # partial frames of all connections past frame_buffer_budget_mb
    "channel_idle",  # nothing received for server_channel_max_idle_ms
    "frame_read_timeout",  # a frame begun and not whole within frame_read_timeout_ms
    "connections_max",  # connections of the server at connections_max
    "connections_per_ip_max",  # connections of one address at connections_per_ip_max
    "fd_reserve",  # descriptors left for the store at fd_reserve
    "send_queue_wait",  # SYSTEM_BUSY [TIMEOUT_CLEAN_QUEUE]
    "page_cache_busy",  # SYSTEM_BUSY [PCBUSY_CLEAN_QUEUE]
    "topics_max",
    "groups_max",
    "console_login_throttle",
)


class LimitSettings(Protocol):
    """The fields of a server config that name its limits (config/shared.py's limit_settings)."""

    @property
    def frame_buffer_budget_mb(self) -> int: ...
    @property
    def server_channel_max_idle_ms(self) -> int: ...
    @property
    def frame_read_timeout_ms(self) -> int: ...
    @property
    def connections_max(self) -> int: ...
    @property
    def connections_per_ip_max(self) -> int: ...
    @property
    def fd_reserve(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class ConnectionLimits:
    """The bounds of one server's connections (0 turns a time or count limit off).

    Attributes:
        frame_buffer_budget_bytes: memory all partial frames of the server may hold together;
            the connection whose frame would pass it is closed.
        channel_max_idle_ms: a connection that sent nothing this long is closed (RocketMQ's
            serverChannelMaxIdleTimeSeconds, 120 s): clients heartbeat every 30 s.
        frame_read_timeout_ms: a frame begun must be whole within this (slow senders closed).
        connections_max: connections open at once; more are closed as they are accepted.
        connections_per_ip_max: connections of one peer address at once.
        fd_reserve: descriptors below the process's RLIMIT_NOFILE that sockets may not take
            (the store opens and syncs its files with them).
    """

    frame_buffer_budget_bytes: int = 256 * 1024 * 1024
    channel_max_idle_ms: int = 120_000
    frame_read_timeout_ms: int = 30_000
    connections_max: int = 10_000
    connections_per_ip_max: int = 1_000
    fd_reserve: int = 64

    @classmethod
    def of(cls, config: LimitSettings) -> ConnectionLimits:
        """The limits named by a server config's fields (BrokerConfig, NamesrvConfig)."""
        return cls(
            frame_buffer_budget_bytes=config.frame_buffer_budget_mb * 1024 * 1024,
            channel_max_idle_ms=config.server_channel_max_idle_ms,
            frame_read_timeout_ms=config.frame_read_timeout_ms,
            connections_max=config.connections_max,
            connections_per_ip_max=config.connections_per_ip_max,
            fd_reserve=config.fd_reserve,
        )

    def sweep_interval_s(self) -> float | None:
        """How often the idle and slow-frame sweep runs (None: neither limit is on)."""
        limits = [ms for ms in (self.channel_max_idle_ms, self.frame_read_timeout_ms) if ms > 0]
        if not limits:
            return None
        return min(SWEEP_INTERVAL_MAX_S, max(SWEEP_INTERVAL_MIN_S, min(limits) / 10_000))


class LimitCounters:
    """How often each limit bit (by the names of LIMIT_NAMES): read by the metrics."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = dict.fromkeys(LIMIT_NAMES, 0)

    def hit(self, name: str, count: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + count


class FrameBudget:
    """The memory all partial frames of one server may hold together (module docstring)."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self.held_bytes = 0

    def charge(self, delta: int) -> bool:
        """Take ``delta`` more bytes (or give back, when negative); False, nothing taken, when
        they would pass the budget."""
        held = self.held_bytes + delta
        if delta > 0 and held > self.budget_bytes:
            return False
        self.held_bytes = held
        return True


def descriptor_limit() -> int:
    """The process's soft RLIMIT_NOFILE (RLIM_INFINITY as a very large number)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 62


class AcceptGate:
    """Counts a server's connections by peer address and refuses one past a limit.

    The descriptor reserve relies on Linux giving each new descriptor the lowest free number:
    an accepted socket numbered ``RLIMIT_NOFILE - fd_reserve`` or above means fewer than
    ``fd_reserve`` descriptors are free, and it is closed. Sockets thus never hold the last
    ``fd_reserve`` descriptors, which stay for the store's segments, syncs and tables. One
    comparison per accept; the limit is read again by ``refresh`` (the server's sweep).
    """

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.total = 0
        self.by_host: dict[str, int] = {}
        self.fd_ceiling = 0
        self.refresh()

    def refresh(self) -> None:
        """Read RLIMIT_NOFILE again (it may be raised while the server runs)."""
        reserve = self.limits.fd_reserve
        self.fd_ceiling = descriptor_limit() - reserve if reserve > 0 else 1 << 62

    def refusal(self, host: str, fd: int) -> str | None:
        """The name of the limit a new connection from ``host`` on descriptor ``fd`` would pass
        (None: admit it, and count it with ``admit``)."""
        limits = self.limits
        if fd >= self.fd_ceiling:
            return "fd_reserve"
        if 0 < limits.connections_max <= self.total:
            return "connections_max"
        if 0 < limits.connections_per_ip_max <= self.by_host.get(host, 0):
            return "connections_per_ip_max"
        return None

    def admit(self, host: str) -> None:
        self.total += 1
        self.by_host[host] = self.by_host.get(host, 0) + 1

    def release(self, host: str) -> None:
        self.total -= 1
        left = self.by_host.get(host, 0) - 1
        if left > 0:
            self.by_host[host] = left
        else:
            self.by_host.pop(host, None)
