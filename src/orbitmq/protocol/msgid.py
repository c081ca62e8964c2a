"""Message ids: the broker's offset id and the producer's unique id (UNIQ_KEY).

- The offset message id says where a message lies: hex (upper case) of the store host's IPv4
  address (4 bytes), its port (i32) and the message's CommitLog offset (i64), 32 characters. An
  IPv6 store host gives 16 address bytes and 56 characters, as RocketMQ does.
- The unique id is made by the producer before sending: hex of the client's IPv4 address (4 B),
  pid (i16), a per-process random i32, milliseconds since the start of the current month (i32) and
  a counter (i16), 32 characters. It survives retries and re-stores (retry, DLQ), so consumers see
  it as the message id.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import struct
import threading
import time
from collections.abc import Callable

from orbitmq.errors import ClientError, RemoteProtocolError

__all__ = ["create_offset_msg_id", "decode_offset_msg_id", "UniqIdGenerator"]

_PORT_OFFSET = struct.Struct(">iq")
_V4_ID_LENGTH = 2 * (4 + _PORT_OFFSET.size)  # 32
_V6_ID_LENGTH = 2 * (16 + _PORT_OFFSET.size)  # 56


def create_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """The offset message id of the message at ``commit_log_offset`` in the store at host:port.

    Raises:
        ClientError: host is not an IP address, or port/offset do not fit their fields.
    """
    try:
        address = ipaddress.ip_address(host).packed
        tail = _PORT_OFFSET.pack(port, commit_log_offset)
    except (ValueError, struct.error) as exc:
        raise ClientError(f"cannot make an offset message id from {host}:{port}: {exc}") from None
    return (address + tail).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(store host, port, CommitLog offset) of an offset message id.

    Raises:
        RemoteProtocolError: not an offset message id (wrong length or not hex); ids come from
            peers, e.g. in VIEW_MESSAGE_BY_ID requests.
    """
    if len(msg_id) not in (_V4_ID_LENGTH, _V6_ID_LENGTH):
        raise RemoteProtocolError(f"offset message id must have 32 or 56 hex digits: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if 2 * len(raw) != len(msg_id):  # fromhex also skips whitespace
        raise RemoteProtocolError(f"offset message id is not hexadecimal: {msg_id!r}")
    address_size = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, address_size)
    host = ipaddress.ip_address(raw[:address_size])
    return str(host), port, offset


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _month_bounds_ms(now_ms: int) -> tuple[int, int]:
    """Start of the local month containing now_ms, and start of the next one (like Java)."""
    now = datetime.datetime.fromtimestamp(now_ms / 1000)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    following = (start + datetime.timedelta(days=32)).replace(day=1)
    return int(start.timestamp() * 1000), int(following.timestamp() * 1000)


class UniqIdGenerator:
    """Makes UNIQ_KEY message ids; safe to share between threads.

    Args:
        host: the client's IPv4 address (no lookup here: protocol code touches no network).
        pid: process id, default ``os.getpid()``; only its low 16 bits are used.
        random_part: the per-process random i32, default from ``os.urandom``.
        clock_ms: wall clock in milliseconds, injectable for tests.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        pid: int | None = None,
        random_part: int | None = None,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        try:
            address = ipaddress.IPv4Address(host).packed
        except ValueError as exc:
            raise ClientError(f"UniqIdGenerator needs an IPv4 address: {exc}") from None
        pid = os.getpid() if pid is None else pid
        if random_part is None:
            random_part = int.from_bytes(os.urandom(4), "big")
        prefix = address + struct.pack(">HI", pid & 0xFFFF, random_part & 0xFFFFFFFF)
        self._prefix = prefix.hex().upper()
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._counter = 0
        self._month_start_ms, self._next_month_ms = _month_bounds_ms(clock_ms())

    def next(self) -> str:
        """A new 32-character id, distinct from every other of this generator (up to 65,536 per
        millisecond, where the counter wraps)."""
        with self._lock:
            now = self._clock_ms()
            if not self._month_start_ms <= now < self._next_month_ms:
                self._month_start_ms, self._next_month_ms = _month_bounds_ms(now)
            elapsed = (now - self._month_start_ms) & 0xFFFFFFFF
            counter = self._counter
            self._counter = (counter + 1) & 0xFFFF
        return f"{self._prefix}{elapsed:08X}{counter:04X}"

    def next_block(self, count: int) -> tuple[str, int]:
        """``count`` ids at once, as (head, first counter): the k-th is ``head`` followed by
        ``(counter + k) & 0xFFFF`` in 4 upper-case hex digits, as :meth:`next` would have made
        them in one millisecond (``protocol.column_batch.IdBlock``, for bulk encoders).

        Raises:
            ClientError: ``count`` outside 1..65536 (more would repeat the counter).
        """
        if not 1 <= count <= 0x10000:
            raise ClientError(f"an id block holds 1..65536 ids, not {count}")
        with self._lock:
            now = self._clock_ms()
            if not self._month_start_ms <= now < self._next_month_ms:
                self._month_start_ms, self._next_month_ms = _month_bounds_ms(now)
            elapsed = (now - self._month_start_ms) & 0xFFFFFFFF
            counter = self._counter
            self._counter = (counter + count) & 0xFFFF
        return f"{self._prefix}{elapsed:08X}", counter
