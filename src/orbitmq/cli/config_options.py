"""Maps config dataclasses onto click options, one ``--flag-name`` per field.

Precedence, lowest first: the dataclass defaults, a TOML file (``--config``), ``ORBITMQ_*``
environment variables, then flags. Only flags actually given override, so a TOML value is never
clobbered by a flag's default.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from orbitmq.config import load_toml, replace_fields

__all__ = ["config_options", "build_config", "config_as_toml"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# Short names the docs use for the most common fields.
ALIASES: dict[str, tuple[str, ...]] = {
    "listen_port": ("--port",),
    "listen_host": ("--host",),
    "store_path": ("--store",),
    "namesrv_addr": ("--namesrv",),
}


def _flat_fields(cls: type, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, default) for every leaf field; nested config dataclasses are flattened."""
    out: list[tuple[str, Any]] = []
    defaults = cls()
    for f in dataclasses.fields(cls):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            out.extend(_flat_fields(type(value), f"{prefix}{f.name}."))
        else:
            out.append((f"{prefix}{f.name}", value))
    return out


def _click_type(default: Any) -> Any:
    if isinstance(default, enum.Enum):
        return click.Choice([m.value for m in type(default)], case_sensitive=False)
    if isinstance(default, bool):
        return click.BOOL
    if isinstance(default, int):
        return click.INT
    if isinstance(default, float):
        return click.FLOAT
    return click.STRING


def config_options(cls: type, *, skip: tuple[str, ...] = (), prefix: str = "") -> Callable[[F], F]:
    """Decorator adding one option per (flattened) field of ``cls``; values land in ``cfg_<path>``."""

    def decorate(func: F) -> F:
        for path, default in reversed(_flat_fields(cls)):
            name = path.rsplit(".", 1)[-1]
            if name in skip:
                continue
            flag = "--" + prefix + name.replace("_", "-")
            decls = [flag, *(() if prefix else ALIASES.get(name, ())), "cfg_" + prefix.replace("-", "_") + path.replace(".", "__")]
            shown = default.value if isinstance(default, enum.Enum) else default
            func = click.option(
                *decls,
                type=_click_type(default),
                default=None,
                show_default=False,
                help=f"[default: {shown}]",
            )(func)
        return func

    return decorate


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        parts = path.split("__")
        d = nested
        for p in parts[:-1]:
            d = d.setdefault(p, {})
        d[parts[-1]] = value
    return nested


def build_config(cls: type[T], params: Mapping[str, Any], *, toml_path: str | None, prefix: str = "",
                 base: T | None = None) -> T:
    """Defaults <- TOML <- ORBITMQ_* environment <- given flags."""
    cfg: Any = base if base is not None else cls()
    try:
        if toml_path:
            cfg = load_toml(toml_path, cfg)
        env: dict[str, Any] = {}
        for path, _default in _flat_fields(cls):
            var = "ORBITMQ_" + path.replace(".", "_").upper()
            if var in os.environ:
                env[path.replace(".", "__")] = os.environ[var]
        if env:
            cfg = replace_fields(cfg, **_nest(env))
        key = "cfg_" + prefix.replace("-", "_")
        given = {k[len(key):]: v for k, v in params.items() if k.startswith(key) and v is not None}
        if given:
            cfg = replace_fields(cfg, **_nest(given))
    except (ValueError, OSError) as e:
        raise click.UsageError(str(e)) from None
    return cfg


def config_as_toml(cfg: Any) -> str:
    """The effective config in TOML, for ``--print-config``."""
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            tables.append((f.name, value))
        else:
            lines.append(f"{f.name} = {_toml_value(value)}")
    for name, value in tables:
        lines.append("")
        lines.append(f"[{name}]")
        lines.extend(config_as_toml(value).splitlines())
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
