"""Applying settings from text: TOML files, environment variables and flags (strings turned
into each field's type), unknown names refused with the nearest ones."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from orbitmq.config.fields import (
    ConfigError,
)

__all__ = ["replace_fields", "load_toml", "check_toml_keys"]


T = TypeVar("T")


def replace_fields(cfg: T, **changes: Any) -> T:
    """Return a copy of a frozen config with ``changes`` applied, converting strings to field
    types (ConfigError, a ValueError, for a value of the wrong type or out of range)."""
    fields = {f.name: f for f in dataclasses.fields(cfg)}  # type: ignore[arg-type]
    converted: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in fields:
            raise ConfigError(name, f"unknown config field {name!r} for {type(cfg).__name__}")
        current = getattr(cfg, name)
        converted[name] = _coerce(name, value, current)
    return dataclasses.replace(cfg, **converted)  # type: ignore[type-var]


def _coerce(name: str, value: Any, current: Any) -> Any:
    """``value`` (from TOML, the environment or a flag) as the type of ``current``; nothing is
    converted silently into something else (1.5 is not an integer, 5 not a boolean)."""
    if dataclasses.is_dataclass(current):
        if not isinstance(value, dict):
            raise ConfigError(name, f"{name} = {value!r} is refused (expected a table [{name}])")
        return replace_fields(current, **value)
    if isinstance(current, enum.Enum):
        if isinstance(value, str):  # any case: ASYNC_FLUSH, async_flush; compact, COMPACT
            for member in type(current):
                if str(member.value).upper() == value.upper():
                    return member
        try:
            return type(current)(value)
        except ValueError:
            allowed = ", ".join(m.value for m in type(current))
            raise ConfigError(name, f"{name} = {value!r} is refused; allowed: {allowed}") from None
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
            return value.strip().lower() in _TRUE_WORDS
        raise ConfigError(name, f"{name} = {value!r} is not a boolean (true or false)")
    if isinstance(current, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if type(value) is int:
            return value
        try:
            if isinstance(value, str):
                return int(value.strip())
        except ValueError:
            pass
        raise ConfigError(name, f"{name} = {value!r} is not an integer")
    if isinstance(current, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        try:
            if isinstance(value, str):
                return float(value.strip())
        except ValueError:
            pass
        raise ConfigError(name, f"{name} = {value!r} is not a number")
    if isinstance(value, str):
        return value
    if type(value) is int:
        return str(value)
    raise ConfigError(name, f"{name} = {value!r} is not text")


_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
_FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def load_toml(path: str | Path, cfg: T) -> T:
    """Apply the fields of a TOML file to ``cfg``; unknown names are an error, not silently
    ignored (ConfigError, or OSError for a file that cannot be read)."""
    with open(path, "rb") as f:
        try:
            data = tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("", f"{path} is not TOML: {e}") from None
    check_toml_keys(data, cfg)
    return replace_fields(cfg, **data)


def check_toml_keys(data: dict[str, Any], cfg: Any, table: str = "") -> None:
    """Refuse a key ``cfg`` has no setting for with the nearest names, since a mistyped key
    would otherwise leave its setting at the default without a word (ConfigError)."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for key, value in data.items():
        if key not in values:
            where = f"[{table}] " if table else ""
            raise ConfigError(key, f"unknown setting {where}{key!r}{_nearest(key, values)}")
        if isinstance(value, dict) and dataclasses.is_dataclass(values[key]):
            check_toml_keys(value, values[key], f"{table}.{key}" if table else key)


def _nearest(key: str, values: dict[str, Any]) -> str:
    """``; did you mean a or b?`` from this table's names and those of the tables around it."""
    names = {n: n for n in values}
    for name, value in values.items():  # a key written outside its table: say which table
        if dataclasses.is_dataclass(value):
            names.update({f.name: f"[{name}] {f.name}" for f in dataclasses.fields(value)})
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(names[c] for c in close)}?" if close else ""
