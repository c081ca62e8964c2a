"""``orbitmq console``: the web console alone, for a cluster whose name servers are ``--namesrv``
(``orbitmq standalone`` starts one of its own; see docs/console.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import click

from orbitmq.cli.config_options import (
    ConfigRefused,
    build_config,
    config_options,
    flag_help,
)
from orbitmq.config import ConfigError, ConsoleConfig

__all__ = ["console_cmd", "console_config", "short_flag"]


def short_flag(name: str, short: str) -> Callable[[Any], Any]:
    """The option of ConsoleConfig field ``name`` under its long name and ``short`` (``--port``
    for ``--console-listen-port``), read like every other config flag."""
    field = next(f for f in dataclasses.fields(ConsoleConfig) if f.name == name)
    default = getattr(ConsoleConfig(), name)
    return click.option("--" + name.replace("_", "-"), short, "cfg_" + name, type=click.STRING,
                        default=None, metavar="INTEGER" if isinstance(default, int) else "TEXT",
                        help=flag_help(field, default))


def console_config(params: dict[str, Any], *, toml_path: str | None,
                   base: ConsoleConfig | None = None) -> ConsoleConfig:
    """The console's config from defaults, TOML, ``ORBITMQ_*`` and the ``cfg_console_*`` flags
    (and ``cfg_namesrv_addr``); refused in one line when it would expose the console without a
    token.

    Raises:
        ConfigRefused: a value refused, or a non-loopback address without console_token.
    """
    from orbitmq.console.security import check_exposure

    cfg = build_config(ConsoleConfig, params, toml_path=toml_path, base=base)
    try:
        check_exposure(cfg)
    except ConfigError as e:
        raise ConfigRefused(str(e)) from None
    return cfg


@click.command("console")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False),
              help="TOML file of console settings")
@short_flag("console_listen_port", "--port")
@short_flag("console_listen_host", "--host")
@config_options(ConsoleConfig, skip=("console_listen_host", "console_listen_port"))
def console_cmd(config_path: str | None, **params: Any) -> None:
    """Run the web console of the cluster whose name servers are --namesrv.

    It listens on 127.0.0.1 unless told otherwise; on any other address it refuses to start
    without a token (ORBITMQ_CONSOLE_TOKEN, or --console-token), which it then asks for.
    """
    from orbitmq.cli.serving import run_servers
    from orbitmq.console import ConsoleServer

    run_servers(ConsoleServer(console_config(params, toml_path=config_path)))
