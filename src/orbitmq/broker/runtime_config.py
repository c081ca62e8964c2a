"""A broker's settings under RocketMQ's names, and the ones that change while it runs.

GET_BROKER_CONFIG shows every setting as Java properties under RocketMQ's camelCase names
(``brokerName``, ``flushDiskType``, ``fileReservedTime``...; :data:`JAVA_NAMES` lists those that
are not simply the camelCase of OrbitMQ's name) in RocketMQ's units: the three disk ratios are
percentages there (``diskMaxUsedSpaceRatio=75``), as RocketMQ's tools send and show them.

UPDATE_BROKER_CONFIG may change the settings of :data:`RUNTIME_FIELDS`: each is read where it is
used, so a change takes effect on the next request or round. Names are RocketMQ's or OrbitMQ's
(``brokerPermission`` or ``broker_permission``). Every value is checked by the config's own
ranges; a change is all or nothing. Changes persist in ``STORE/config/broker_runtime.toml``
(:data:`OVERLAY_FILE`), which the broker applies over its configured settings (file,
environment, flags) when it starts, logging each value it overrides: delete a line to go back
to the configured value.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import tomllib
from collections.abc import Mapping
from typing import Any

from orbitmq.broker.config_file import config_path, write_atomic
from orbitmq.config import BrokerConfig, ConfigError, StoreConfig, replace_fields

__all__ = [
    "JAVA_NAMES",
    "RUNTIME_FIELDS",
    "OVERLAY_FILE",
    "java_properties",
    "resolve_name",
    "changes_from_properties",
    "apply_live",
    "load_overlay",
    "save_overlay",
    "overlay_path",
]

log = logging.getLogger(__name__)

OVERLAY_FILE = "broker_runtime.toml"
# OrbitMQ field (``store.`` for store fields) -> RocketMQ's name, where it is not the camelCase.
JAVA_NAMES: dict[str, str] = {
    "listen_host": "bindAddress", "broker_ip": "brokerIP1",
    "auto_create_topic": "autoCreateTopicEnable",
    "register_broker_interval_ms": "registerNameServerPeriod",
    "client_channel_expire_ms": "channelExpiredTimeout",
    "short_polling_time_ms": "shortPollingTimeMills",
    "flush_consumer_offset_interval_ms": "flushConsumerOffsetInterval",
    "register_broker_timeout_ms": "registerBrokerTimeoutMills",
    "transaction_timeout_ms": "transactionTimeOut",
    "transaction_check_interval_ms": "transactionCheckInterval",
    "ha_send_heartbeat_interval_ms": "haSendHeartbeatInterval",
    "ha_housekeeping_interval_ms": "haHousekeepingInterval",
    "store.store_path": "storePathRootDir",
    "store.mapped_file_size_commitlog": "mappedFileSizeCommitLog",
    "store.flush_interval_commitlog_ms": "flushIntervalCommitLog",
    "store.flush_interval_consume_queue_ms": "flushIntervalConsumeQueue",
    "store.sync_flush_timeout_ms": "syncFlushTimeout",
    "store.file_reserved_time_hours": "fileReservedTime",
    "store.clean_resource_interval_ms": "cleanResourceInterval",
    "store.delete_files_batch_max": "deleteFileBatchMax",
}
PERCENT_FIELDS = frozenset({"store.disk_max_used_space_ratio",
                            "store.disk_space_clean_forcibly_ratio",
                            "store.disk_space_warning_level_ratio"})
RUNTIME_FIELDS = frozenset({
    "broker_permission", "auto_create_subscription_group", "enable_property_filter",
    "client_channel_expire_ms", "reject_transaction_message", "transaction_timeout_ms",
    "transaction_check_max", "default_query_max_num", "max_msgs_num_batch",
    "store.file_reserved_time_hours", "store.delete_when", "store.delete_files_batch_max",
    "slave_read_enable", "access_message_in_memory_max_ratio", "recall_message_enable",
    *PERCENT_FIELDS,
})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _fields() -> list[str]:
    """Every settable field, dotted (``store.x`` for store fields)."""
    out = [f.name for f in dataclasses.fields(BrokerConfig) if f.name != "store"]
    out += [f"store.{f.name}" for f in dataclasses.fields(StoreConfig)]
    return out


def java_name(path: str) -> str:
    return JAVA_NAMES.get(path) or _camel(path.removeprefix("store."))


_BY_NAME: dict[str, str] = {}
for _path in _fields():
    _BY_NAME[java_name(_path)] = _path
    _BY_NAME[_path] = _path
    _BY_NAME.setdefault(_path.removeprefix("store."), _path)


def resolve_name(name: str) -> str | None:
    """The dotted field of a RocketMQ or OrbitMQ setting name; None when there is none."""
    return _BY_NAME.get(name.strip())


def _get(config: BrokerConfig, path: str) -> Any:
    return getattr(config.store, path[6:]) if path.startswith("store.") else getattr(config, path)


def _java_value(path: str, value: Any) -> str:
    if path in PERCENT_FIELDS:
        return str(round(value * 100))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def java_properties(config: BrokerConfig) -> dict[str, str]:
    """Every setting under RocketMQ's name and in its units, sorted by name."""
    return dict(sorted((java_name(p), _java_value(p, _get(config, p))) for p in _fields()))


def _from_java(path: str, text: str) -> Any:
    """A properties value as the field's input (percentages -> ratios)."""
    if path in PERCENT_FIELDS:
        try:
            return float(text.strip()) / 100.0
        except ValueError:
            raise ConfigError(path, f"{java_name(path)} = {text!r} is not a percentage") from None
    return text


def changes_from_properties(config: BrokerConfig, entries: Mapping[str, str]) -> BrokerConfig:
    """``config`` with ``entries`` (name -> text) applied, every one checked.

    Raises:
        ConfigError: an unknown name, a setting that cannot change while the broker runs, or a
            value the setting refuses (the message names it).
    """
    top: dict[str, Any] = {}
    store: dict[str, Any] = {}
    for name, text in entries.items():
        path = resolve_name(name)
        if path is None:
            raise ConfigError(name, f"unknown setting {name!r}")
        if path not in RUNTIME_FIELDS:
            raise ConfigError(path, (
                f"{name} cannot change while the broker runs; set {path.removeprefix('store.')} "
                "in the config file, environment or flags and restart"))
        value = _from_java(path, text)
        if path.startswith("store."):
            store[path[6:]] = value
        else:
            top[path] = value
    if store:
        top["store"] = store
    return replace_fields(config, **top)


def apply_live(live: BrokerConfig, new: BrokerConfig) -> list[str]:
    """Copy the runtime fields that differ from ``new`` onto the running broker's config
    objects (every part of the broker holds these same objects); the dotted names changed.

    The config classes are frozen so that nothing changes them by accident; this is the one
    place that changes a running broker's settings, after ``new`` passed every check."""
    changed = []
    for path in sorted(RUNTIME_FIELDS):
        value = _get(new, path)
        if _get(live, path) == value:
            continue
        target = live.store if path.startswith("store.") else live
        object.__setattr__(target, path.removeprefix("store."), value)
        changed.append(path)
    return changed


def overlay_path(config: BrokerConfig) -> str:
    return config_path(config.store.store_path, OVERLAY_FILE)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value.value if isinstance(value, enum.Enum) else value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def save_overlay(config: BrokerConfig, changed: set[str]) -> None:
    """Write the runtime fields in ``changed`` (and those already in the overlay) with their
    values in ``config`` to the overlay file, atomically (OSError when it cannot be written)."""
    paths = sorted(changed | set(_overlay_paths(config)))
    top = [p for p in paths if not p.startswith("store.")]
    lines = ["# Settings changed while the broker ran (UPDATE_BROKER_CONFIG); applied over the",
             "# configured ones at start. Delete a line to go back to the configured value."]
    lines += [f"{p} = {_toml_value(_get(config, p))}" for p in top]
    store = [p for p in paths if p.startswith("store.")]
    if store:
        lines += ["", "[store]"] + [f"{p[6:]} = {_toml_value(_get(config, p))}" for p in store]
    write_atomic(overlay_path(config), ("\n".join(lines) + "\n").encode())


def _read_overlay(config: BrokerConfig) -> dict[str, Any]:
    try:
        with open(overlay_path(config), "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("", f"{overlay_path(config)} is not TOML: {e}") from None


def _overlay_paths(config: BrokerConfig) -> list[str]:
    data = _read_overlay(config)
    store = data.get("store", {})
    return [k for k in data if k != "store"] + [f"store.{k}" for k in store]


def load_overlay(config: BrokerConfig) -> BrokerConfig:
    """``config`` with the overlay file's settings applied (each override logged).

    Raises:
        ConfigError: the overlay is not TOML, names a setting that may not change at runtime,
            or holds a value out of range (one line naming the file).
    """
    data = _read_overlay(config)
    if not data:
        return config
    path = overlay_path(config)
    for name in [k for k in data if k != "store"] + [f"store.{k}" for k in data.get("store", {})]:
        if name not in RUNTIME_FIELDS:
            raise ConfigError(name, f"{path}: {name} may not be set there (not a runtime setting)")
    try:
        merged = replace_fields(config, **data)
    except ConfigError as e:
        raise ConfigError(e.field, f"{path}: {e}") from None
    for name in sorted(RUNTIME_FIELDS):
        before, after = _get(config, name), _get(merged, name)
        if before != after:
            log.warning("runtime setting %s = %r from %s overrides the configured %r",
                        name, after, path, before)
    return merged
