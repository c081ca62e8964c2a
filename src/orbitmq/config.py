"""Frozen dataclass configs with RocketMQ's defaults, plus a tiny TEST_MIN preset.

Names are RocketMQ's in snake_case; units go last (``flush_interval_ms``). The CLI maps one flag
onto each field and TOML files use the same names.
"""

from __future__ import annotations

import dataclasses
import enum
import tomllib
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "FlushDiskType",
    "StoreConfig",
    "BrokerConfig",
    "NamesrvConfig",
    "TEST_MIN_STORE",
    "load_toml",
    "replace_fields",
    "parse_delay_levels_ms",
]

GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
DELAY_LEVELS_MAX = 64  # a bound on the schedule topic's queues (RocketMQ ships 18 levels)
_DELAY_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels_ms(spec: str) -> tuple[int, ...]:
    """``message_delay_level`` (``"1s 5s 10s 30s 1m ..."``) as the delay of each level in ms,
    level 1 first. Units: s, m, h, d; every delay a positive whole number of its unit.

    Raises:
        ValueError: an empty list, more than DELAY_LEVELS_MAX levels, or an item that is not
            ``<digits><unit>`` (the message names the item).
    """
    items = spec.split()
    if not items:
        raise ValueError("message_delay_level: no delay level given (expected e.g. '1s 5s 10s')")
    if len(items) > DELAY_LEVELS_MAX:
        raise ValueError(f"message_delay_level: {len(items)} levels, at most {DELAY_LEVELS_MAX}")
    levels = []
    for item in items:
        number, unit = item[:-1], item[-1:]
        if unit not in _DELAY_UNIT_MS or not number.isdigit() or int(number) <= 0:
            raise ValueError(f"message_delay_level: {item!r} is not a delay such as 5s, 10m, "
                             "2h or 1d (a positive whole number and a unit s, m, h or d)")
        levels.append(int(number) * _DELAY_UNIT_MS[unit])
    return tuple(levels)


class FlushDiskType(enum.StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Settings of one broker's message store (directory layout in DESIGN.md section 1)."""

    store_path: str = "./data/broker-a"
    mapped_file_size_commitlog: int = GiB
    mapped_file_size_consume_queue: int = 300_000 * 20
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500
    flush_interval_consume_queue_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    max_message_size: int = 4 * MiB
    max_transfer_count_on_message_in_memory: int = 32
    max_transfer_bytes_on_message_in_memory: int = 256 * 1024
    file_reserved_time_hours: float = 72.0
    disk_max_used_space_ratio: float = 0.75
    clean_resource_interval_ms: int = 10_000
    delete_when: str = "04"
    message_index_enable: bool = True
    duplication_enable: bool = False
    disk_space_clean_forcibly_ratio: float = 0.85
    disk_space_warning_level_ratio: float = 0.90
    delete_files_batch_max: int = 10
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    dispatch_round_max: int = 4096

    def __post_init__(self) -> None:
        # A typo in the delay levels must stop the broker at start, not when a delayed message
        # first arrives: parse it once here (raises ValueError naming the field).
        parse_delay_levels_ms(self.message_delay_level)


# Small segments and short delays so that edge cases (segment rolls, index rolls) come fast.
TEST_MIN_STORE = StoreConfig(
    mapped_file_size_commitlog=256 * 1024,
    mapped_file_size_consume_queue=1000 * 20,
    max_hash_slot_num=1000,
    max_index_num=4000,
    flush_interval_commitlog_ms=10,
    flush_interval_consume_queue_ms=10,
    clean_resource_interval_ms=100,
)


@dataclasses.dataclass(frozen=True)
class NamesrvConfig:
    """Settings of a name server."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 9876
    broker_expire_ms: int = 120_000
    scan_not_active_broker_interval_ms: int = 5_000


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Settings of a broker (its store settings live in ``store``)."""

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    broker_id: int = 0
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    broker_ip: str = ""
    namesrv_addr: str = ""
    auto_create_topic: bool = True
    auto_create_subscription_group: bool = True
    default_topic_queue_nums: int = 8
    register_broker_interval_ms: int = 30_000
    client_channel_expire_ms: int = 120_000
    long_polling_enable: bool = True
    short_polling_time_ms: int = 1000
    long_polling_recheck_ms: int = 5000
    max_frame_size: int = 16 * MiB
    max_in_flight_per_connection: int = 256
    broker_permission: int = 6  # PermName bits: READ 4 | WRITE 2
    flush_consumer_offset_interval_ms: int = 5000
    register_broker_timeout_ms: int = 6000
    default_query_max_num: int = 32
    max_msgs_num_batch: int = 64
    notify_consumer_ids_changed_enable: bool = True
    # SQL92 subscriptions (RocketMQ's enablePropertyFilter, off by default there too): they cost
    # the broker a properties parse per scanned message, so the operator opts in.
    enable_property_filter: bool = False
    # Orderly consumption: how long a queue lock lives without renewal (RocketMQ's
    # rebalance.lock.maxLiveTime).
    rebalance_lock_max_live_time_ms: int = 60_000
    # Transactional messages (RocketMQ's transactionTimeOut, transactionCheckMax,
    # transactionCheckInterval, rejectTransactionMessage).
    transaction_timeout_ms: int = 6000
    transaction_check_max: int = 15
    transaction_check_interval_ms: int = 60_000
    reject_transaction_message: bool = False
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)


T = TypeVar("T")


def replace_fields(cfg: T, **changes: Any) -> T:
    """Return a copy of a frozen config with ``changes`` applied, converting strings to field types."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}  # type: ignore[arg-type]
    converted: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in fields:
            raise ValueError(f"unknown config field {name!r} for {type(cfg).__name__}")
        current = getattr(cfg, name)
        converted[name] = _coerce(name, value, current)
    return dataclasses.replace(cfg, **converted)  # type: ignore[type-var]


def _coerce(name: str, value: Any, current: Any) -> Any:
    if dataclasses.is_dataclass(current) and isinstance(value, dict):
        return replace_fields(current, **value)
    if isinstance(current, enum.Enum):
        try:
            return type(current)(value)
        except ValueError:
            allowed = ", ".join(m.value for m in type(current))
            raise ValueError(f"{name}: {value!r} is not one of {allowed}") from None
    if isinstance(current, bool):
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"{name}: {value!r} is not a boolean")
        return bool(value)
    if isinstance(current, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {value!r} is not an integer") from None
    if isinstance(current, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {value!r} is not a number") from None
    return value if isinstance(value, str) else str(value)


def load_toml(path: str | Path, cfg: T) -> T:
    """Apply the fields of a TOML file to ``cfg``; unknown names are an error, not silently ignored."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    return replace_fields(cfg, **data)
