"""Maps config dataclasses onto click options, one ``--flag-name`` per field.

Precedence, lowest first: the dataclass defaults, a TOML file (``--config``), ``ORBITMQ_*``
environment variables, then flags. Only flags actually given override, so a TOML value is never
clobbered by a flag's default.

One name per setting everywhere: the flag ``--flush-disk-type``, the TOML key ``flush_disk_type``
(under ``[store]`` for store settings) and the environment variable ``ORBITMQ_FLUSH_DISK_TYPE``
(``ORBITMQ_`` + the flag's name), so the name server list is ``ORBITMQ_NAMESRV_ADDR`` for servers,
the SDK and the CLI alike (RocketMQ's ``NAMESRV_ADDR`` is read when it is not set).
``ORBITMQ_STORE_<NAME>``, which an earlier release read for store settings, still works for this
release with a deprecation warning. Each flag's help is the field's
documentation from ``orbitmq.config`` with its allowed values, default and environment variable.

A value the config refuses (out of range, wrong type) ends the command with exit code 2 and one
line naming the field, the value and what is allowed, without a traceback.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from orbitmq.config import ConfigError, field_allowed, field_doc, load_toml, replace_fields

__all__ = ["config_options", "build_config", "config_as_toml", "env_var", "ConfigRefused"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

ENV_PREFIX = "ORBITMQ_"
DEPRECATED_STORE_PREFIX = "ORBITMQ_STORE_"  # until the next release
# RocketMQ's own names, read when the ORBITMQ_ one is not set (the SDK reads the same).
ROCKETMQ_ENV = {"namesrv_addr": "NAMESRV_ADDR"}

# Short names the docs use for the most common fields.
ALIASES: dict[str, tuple[str, ...]] = {
    "listen_port": ("--port",),
    "listen_host": ("--host",),
    "store_path": ("--store",),
    "namesrv_addr": ("--namesrv", "-n"),
    "grpc_listen_port": ("--grpc-port",),
}


class ConfigRefused(click.ClickException):
    """A config value was refused: ``Error: <one line>`` on stderr and exit code 2 (a usage
    error, like click's own), without the usage text around it."""

    exit_code = 2


def env_var(name: str) -> str:
    """The environment variable of a config field: ``ORBITMQ_`` + its name in capitals."""
    return ENV_PREFIX + name.upper()


def _flat_fields(cls: type, prefix: str = "") -> list[tuple[str, Any, dataclasses.Field[Any]]]:
    """(dotted path, default, field) for every leaf field; nested configs are flattened."""
    out: list[tuple[str, Any, dataclasses.Field[Any]]] = []
    defaults = cls()
    for f in dataclasses.fields(cls):
        value = getattr(defaults, f.name)
        if dataclasses.is_dataclass(value):
            out.extend(_flat_fields(type(value), f"{prefix}{f.name}."))
        else:
            out.append((f"{prefix}{f.name}", value, f))
    return out


def _metavar(default: Any) -> str:
    """How a flag's value is shown in ``--help``. Every flag is read as text and converted by the
    config itself, so that a bad value gets the same one-line refusal from a flag, a TOML file or
    the environment."""
    if isinstance(default, enum.Enum):
        return "[" + "|".join(m.value for m in type(default)) + "]"
    if isinstance(default, bool):
        return "BOOLEAN"
    if isinstance(default, int):
        return "INTEGER"
    if isinstance(default, float):
        return "NUMBER"
    return "TEXT"


def flag_help(f: dataclasses.Field[Any], default: Any) -> str:
    """A flag's help: the field's doc, what it accepts, its default and environment variable."""
    shown = default.value if isinstance(default, enum.Enum) else default
    if isinstance(shown, bool):
        shown = str(shown).lower()
    doc = field_doc(f) or "(undocumented)"
    parts = [doc if doc.endswith((".", ")")) else doc + "."]
    allowed = field_allowed(f)
    if allowed:
        parts.append(f"Allowed: {allowed}.")
    parts.append(f"[default: {shown!r}; env: {env_var(f.name)}]" if isinstance(shown, str) and not shown
                 else f"[default: {shown}; env: {env_var(f.name)}]")
    return " ".join(parts)


def config_options(cls: type, *, skip: tuple[str, ...] = (), prefix: str = "") -> Callable[[F], F]:
    """Decorator adding one option per (flattened) field of ``cls``; values land in ``cfg_<path>``."""

    def decorate(func: F) -> F:
        for path, default, f in reversed(_flat_fields(cls)):
            name = path.rsplit(".", 1)[-1]
            if name in skip:
                continue
            flag = "--" + prefix + name.replace("_", "-")
            decls = [flag, *(() if prefix else ALIASES.get(name, ())),
                     "cfg_" + prefix.replace("-", "_") + path.replace(".", "__")]
            func = click.option(
                *decls,
                type=click.STRING,
                metavar=_metavar(default),
                default=None,
                show_default=False,
                help=flag_help(f, default),
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


def _from_environment(cls: type) -> dict[str, Any]:
    """``path__with__dunders`` -> value for every field whose environment variable is set."""
    env: dict[str, Any] = {}
    for path, _default, f in _flat_fields(cls):
        key = path.replace(".", "__")
        var = env_var(f.name)
        old = DEPRECATED_STORE_PREFIX + f.name.upper() if path.startswith("store.") else None
        rocketmq = ROCKETMQ_ENV.get(f.name)
        if var in os.environ:
            env[key] = os.environ[var]
        elif rocketmq is not None and os.environ.get(rocketmq):
            env[key] = os.environ[rocketmq]
        elif old is not None and old in os.environ:
            click.echo(f"Warning: {old} is deprecated, use {var} (one name per setting, "
                       "like the flag)", err=True)
            env[key] = os.environ[old]
    return env


def build_config(cls: type[T], params: Mapping[str, Any], *, toml_path: str | None, prefix: str = "",
                 base: T | None = None) -> T:
    """Defaults <- TOML <- ORBITMQ_* environment <- given flags.

    Raises:
        ConfigRefused: a value (from any of them) the config refuses; the line names it.
    """
    cfg: Any = base if base is not None else cls()
    source = "default"
    try:
        if toml_path:
            source = f"{toml_path}"
            cfg = load_toml(toml_path, cfg)
        env = _from_environment(cls)
        if env:
            source = "the environment"
            cfg = replace_fields(cfg, **_nest(env))
        key = "cfg_" + prefix.replace("-", "_")
        given = {k[len(key):]: v for k, v in params.items() if k.startswith(key) and v is not None}
        if given:
            source = "the command line"
            cfg = replace_fields(cfg, **_nest(given))
        check_whole = getattr(cfg, "check_whole", None)
        if check_whole is not None:  # fields that must agree, once every layer is applied
            check_whole()
    except ConfigError as e:
        raise ConfigRefused(f"{e} (from {source})") from None
    except OSError as e:
        raise ConfigRefused(f"cannot read {toml_path}: {e.strerror or e}") from None
    return cfg


def config_as_toml(cfg: Any) -> str:
    """The effective config in TOML, for ``--print-config``."""
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            tables.append((f.name, value))
        elif f.metadata.get("secret") and value:
            lines.append(f"# {f.name} = (set; hidden)")  # a secret is never printed
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
