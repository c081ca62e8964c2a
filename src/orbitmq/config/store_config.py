"""Settings of one broker's message store, and the TEST_MIN_STORE preset."""

from __future__ import annotations

import dataclasses
import enum

from orbitmq.config.checks import (
    blank_problem,
    cq_entries_problem,
    delay_levels_problem,
    delete_hours_problem,
    false_only_problem,
    file_mode_problem,
)
from orbitmq.config.fields import (
    CONSUME_QUEUE_ENTRY_SIZE,
    DELAY_LEVELS_MAX,
    HOUR_MS,
    I32_MAX,
    GiB,
    MiB,
    setting,
    validate,
)

__all__ = ["FlushDiskType", "StoreType", "StoreConfig", "TEST_MIN_STORE"]


class FlushDiskType(enum.StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


class StoreType(enum.StrEnum):
    """How consume queue files are accessed (RocketMQ's ``storeType``); the files are the same.

    DEFAULT maps every queue's files; COMPACT reads and writes a small queue's entries with
    pread/pwrite (no mapped page a queue: for many small queues) and maps it once it grows past
    ``compact_queue_bytes_max`` (docs/store.md).
    """

    DEFAULT = "default"
    COMPACT = "compact"


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Settings of one broker's message store (directory layout in docs/store.md)."""

    store_path: str = setting(
        "./data/broker-a", "directory of the commit log, consume queues, index and tables",
        check=blank_problem, allowed="a directory path")
    mapped_file_size_commitlog: int = setting(
        GiB, "bytes of one commit log segment (no message may be larger)", 4096, I32_MAX)
    mapped_file_size_consume_queue: int = setting(
        300_000 * CONSUME_QUEUE_ENTRY_SIZE, "bytes of one consume queue file, 20 per entry",
        16 * CONSUME_QUEUE_ENTRY_SIZE, I32_MAX - I32_MAX % CONSUME_QUEUE_ENTRY_SIZE,
        check=cq_entries_problem, allowed=f"a multiple of 20 in 320..{I32_MAX - I32_MAX % 20}")
    store_type: StoreType = setting(
        StoreType.DEFAULT,
        "consume queues: default maps their files; compact uses pread/pwrite for small ones "
        "(same files)")
    compact_queue_bytes_max: int = setting(
        4096, "compact: bytes of entries (20 each) a queue holds before its file is mapped",
        CONSUME_QUEUE_ENTRY_SIZE, 64 * MiB)
    compact_queue_fds_max: int = setting(
        256, "compact: most consume queue file descriptors kept open at once", 1, 65_536)
    max_hash_slot_num: int = setting(5_000_000, "hash slots of one index file", 16, 50_000_000)
    max_index_num: int = setting(20_000_000, "entries of one index file", 16, 80_000_000)
    flush_disk_type: FlushDiskType = setting(
        FlushDiskType.ASYNC_FLUSH,
        "SYNC_FLUSH: a send is answered after its fsync; ASYNC_FLUSH: flushed in the background")
    flush_interval_commitlog_ms: int = setting(
        500, "ASYNC_FLUSH: how often the commit log is flushed", 1, HOUR_MS)
    flush_interval_consume_queue_ms: int = setting(
        1000, "how often consume queues and the index are flushed", 1, HOUR_MS)
    sync_flush_timeout_ms: int = setting(
        5000, "how long a send waits for its fsync (SYNC_FLUSH) or its slave (SYNC_MASTER)",
        1, HOUR_MS)
    max_message_size: int = setting(
        4 * MiB, "bytes of the largest message body a broker stores", 1, GiB)
    max_transfer_count_on_message_in_memory: int = setting(
        32, "most messages one pull answer carries", 1, 100_000)
    max_transfer_bytes_on_message_in_memory: int = setting(
        256 * 1024, "most bytes one pull answer carries (at least one message)", 1, GiB)
    bulk_pull_count_max: int = setting(
        8192, "most messages one PULL_MESSAGE_BULK answer carries (OrbitMQ's bulk readers)",
        1, 1_000_000)
    bulk_pull_bytes_max: int = setting(
        4 * MiB, "most bytes one PULL_MESSAGE_BULK answer carries (at least one message)",
        1, 12 * MiB)
    file_reserved_time_hours: float = setting(
        72.0, "hours a commit log segment is kept before retention may delete it", 0.0, 876_000.0)
    disk_max_used_space_ratio: float = setting(
        0.75, "disk use past which expired segments are deleted at any hour", 0.0, 1.0,
        low_open=True)
    clean_resource_interval_ms: int = setting(
        10_000, "how often retention looks for segments to delete", 1, HOUR_MS)
    delete_when: str = setting(
        "04", "hours of the day when expired segments are deleted ('04', '01;02', '*')",
        check=delete_hours_problem, allowed="hours 0-23 separated by ';', or '*'")
    message_index_enable: bool = setting(True, "build the index for lookups by key and id")
    check_crc_on_read: bool = setting(
        False, "a master checks every message it serves (body CRC) too, as slaves and "
        "controller-mode members always do")
    duplication_enable: bool = setting(
        False, "RocketMQ's DLedger duplication: not supported, accepted as false only",
        check=false_only_problem, allowed="false")
    disk_space_clean_forcibly_ratio: float = setting(
        0.85, "disk use past which the oldest segments are deleted even if not expired",
        0.0, 1.0, low_open=True)
    disk_space_warning_level_ratio: float = setting(
        0.90, "disk use past which sends are refused", 0.0, 1.0, low_open=True)
    delete_files_batch_max: int = setting(
        10, "most segments one retention round deletes", 1, 10_000)
    message_delay_level: str = setting(
        "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        "the delay of each delay level, level 1 first", check=delay_levels_problem,
        allowed=f"1 to {DELAY_LEVELS_MAX} delays such as 5s, 10m, 2h, 1d")
    dispatch_round_max: int = setting(
        4096, "most messages one dispatch round turns into queue entries", 1, 1_000_000)
    store_file_mode: str = setting(
        "0600", "mode of the store's files; its directories get x where it has r (0700)",
        check=file_mode_problem, allowed="an octal mode with owner rw, no x bit: 0600, 0640...")
    page_cache_keep_mb: int = setting(
        256, "newest commit log MB kept in the page cache; older ones all groups read are "
        "dropped (0: never)", 0, 1 << 20)

    def __post_init__(self) -> None:
        # A typo (the delay levels included) stops the broker at start, not when it is used.
        validate(self)


# Small segments and short delays so that edge cases (segment rolls, index rolls) come fast.
TEST_MIN_STORE = StoreConfig(
    mapped_file_size_commitlog=256 * 1024,
    mapped_file_size_consume_queue=1000 * 20,
    max_hash_slot_num=1000,
    max_index_num=4000,
    flush_interval_commitlog_ms=10,
    flush_interval_consume_queue_ms=10,
    clean_resource_interval_ms=100,
    # The host's disk is shared with work a test cannot foresee: its use must neither delete a
    # test's segments nor refuse its sends. Tests of those ratios set their own.
    disk_max_used_space_ratio=1.0,
    disk_space_clean_forcibly_ratio=1.0,
    disk_space_warning_level_ratio=1.0,
)
