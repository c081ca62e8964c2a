# Types of the broker's C fast path (broker/_native/*.c), orbitmq._native._speedups.broker.
# tests/unit/_native/test_native_speedups.py holds the names here to the module's.
from typing import Any, Protocol

class FastPath:
    """The native fast path of plain sends (broker/_native/fastpath.h)."""

    def __init__(
        self, store_host: bytes, max_message_size: int, max_blob_size: int, max_frame_size: int,
        inert_properties: tuple[str, ...], size_bounds: tuple[int, ...], gil_release_bytes: int,
        auth: tuple[bool, tuple[int, ...]] | None = ..., /,
    ) -> None: ...
    # (next position in buf, segment position reached, answers or None, stop (STOP_*),
    # per-topic counts or None, handled requests by code)
    def take(
        self, buf: Any, pos: int, born: bytes, segment: Any, seg_pos: int, base: int, now: int,
        queue_table: dict[tuple[str, int], int], /,
    ) -> tuple[Any, ...]: ...
    def set_topics(self, table: dict[str, int], /) -> int: ...
    # True: take() may store the frame at pos; a tuple: a pull read in C; False: neither
    def peek(self, buf: Any, pos: int, /) -> bool | tuple[Any, ...]: ...
    def put_topic(self, topic: str, write_queue_nums: int, /) -> bool: ...
    def counts(self) -> dict[str, int]: ...
    def set_users(self, version: int, users: dict[str, tuple[bytes, bool, bool]], /) -> int: ...
    def allow(self, version: int, user: str, topic: str, /) -> bool: ...
    def auth_check(self, frame: Any, /) -> int: ...

class BrokerNative(Protocol):
    STOP_PARTIAL: int
    STOP_DECLINED: int
    STOP_SEGMENT_FULL: int
    FastPath: type[FastPath]

NATIVE: BrokerNative | None
