# Types of the store's C work (store/_native/*.c), orbitmq._native._speedups.store.
# tests/unit/_native/test_native_speedups.py holds the names here to the module's.
from collections.abc import Callable
from typing import Any, Protocol

class StoreNative(Protocol):
    # index_key_hash(topic: str, key: str, /) -> int: index_file.topic_key_hash,
    # abs(hashCode(topic + "#" + key)), 0 for Integer.MIN_VALUE. Callable[..., int], so that
    # index_file can put it in place of its Python twin, whose parameters have names.
    index_key_hash: Callable[..., int]
    # (position reached, messages read, stop, runs (topic bytes, queue id, first queue offset,
    # entries, arrivals), delayed scan records, index items (planned entries as bytes, or
    # (topic, keys, uniq, phy, store ts) for Python to split))
    def dispatch_plan(
        self, buf: Any, pos: int, limit: int, count_max: int, base: int, want_index: bool, /,
    ) -> tuple[int, int, int, list[Any], list[Any], list[Any]]: ...
    # (next planned entry, (index count, begin ts, end ts, begin phy, end phy, slot count),
    # need (index_file's _PUT_*), need_at)
    def index_put(
        self, mm: Any, entries_at: int, hash_slot_num: int, index_num: int,
        state: tuple[int, int, int, int, int, int], pages: Any, entries_allocated_to: int,
        page: int, planned: Any, start: int, /,
    ) -> tuple[int, tuple[int, int, int, int, int, int], int, int]: ...
    # (runs (commit log offset, length), entries scanned, count, total size, last offset,
    # held back end or -1)
    def queue_runs(
        self, entries: Any, count_max: int, bytes_max: int, max_physical_end: int,
        codes: tuple[int, ...] | None = None, /,
    ) -> tuple[list[tuple[int, int]], int, int, int, int, int]: ...
    def runs_tags_in(self, run: Any, start: int, tags: tuple[bytes, ...], /) -> bool: ...

NATIVE: StoreNative | None
