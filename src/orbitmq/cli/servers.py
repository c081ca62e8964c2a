"""``orbitmq namesrv | broker | standalone``: run servers in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import click

from orbitmq.cli.config_options import ConfigRefused, build_config, config_as_toml, config_options
from orbitmq.cli.serving import run_servers
from orbitmq.config import BrokerConfig, ConfigError, ConsoleConfig, NamesrvConfig, replace_fields
from orbitmq.errors import ClientError, StoreError
from orbitmq.security.tls import TlsServerMode

log = logging.getLogger("orbitmq.cli")

# Standalone's three servers share the broker's TLS flags.
TLS_FIELDS = tuple(f.name for f in dataclasses.fields(BrokerConfig) if f.name.startswith("tls_"))
# The console's port under `orbitmq standalone` (and `make run`): the port RocketMQ's dashboard
# uses by default, so an operator finds it where they would look.
STANDALONE_CONSOLE_PORT = 8080


def _port(value: str, flag: str) -> int:
    """A port given to a flag that is not a config field (standalone's two ports), checked by
    the same rule as ``listen_port``."""
    try:
        return replace_fields(NamesrvConfig(), listen_port=value).listen_port
    except ConfigError as e:
        raise ConfigRefused(str(e).replace("listen_port", flag, 1)) from None


@click.command("namesrv")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@click.option("--print-config", is_flag=True, help="print the effective configuration and exit")
@config_options(NamesrvConfig)
def namesrv_cmd(config_path: str | None, print_config: bool, **params: Any) -> None:
    """Run a name server (broker registry and topic routes)."""
    from orbitmq.namesrv import NameServer

    cfg = build_config(NamesrvConfig, params, toml_path=config_path)
    if print_config:
        click.echo(config_as_toml(cfg))
        return
    run_servers(NameServer(cfg))


@click.command("broker")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@click.option("--print-config", is_flag=True, help="print the effective configuration and exit")
@config_options(BrokerConfig)
def broker_cmd(config_path: str | None, print_config: bool, **params: Any) -> None:
    """Run a broker that registers with the name servers given by --namesrv."""
    cfg = build_config(BrokerConfig, params, toml_path=config_path)
    if print_config:
        click.echo(config_as_toml(cfg))
        return
    from orbitmq.assembly import build_broker

    if not cfg.namesrv_addr:
        raise click.UsageError("--namesrv HOST:PORT is required (several: separated by ';')")
    run_servers(build_broker(cfg))


@click.command("standalone")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@click.option("--print-config", is_flag=True, help="print the effective configuration and exit")
@click.option("--namesrv-port", default="9876", metavar="INTEGER",
              help="port of the name server (0: a free one). Allowed: 0..65535. [default: 9876]")
@click.option("--broker-port", default="10911", metavar="INTEGER",
              help="port of the broker (0: a free one). Allowed: 0..65535. [default: 10911]")
@click.option("--console-port", default=str(STANDALONE_CONSOLE_PORT), metavar="INTEGER",
              help="port of the web console on --console-listen-host (0: no console). "
                   f"Allowed: 0..65535. [default: {STANDALONE_CONSOLE_PORT}]")
@config_options(ConsoleConfig, skip=("namesrv_addr", "console_listen_port", *TLS_FIELDS))
@config_options(BrokerConfig, skip=("listen_port", "namesrv_addr"))
def standalone_cmd(
    config_path: str | None, print_config: bool, namesrv_port: str, broker_port: str,
    console_port: str, **params: Any
) -> None:
    """Run a name server, one broker and the web console in one process (what `make run`
    starts)."""
    from orbitmq.cli.console_cmd import console_config

    console_params = {k: params.pop(k) for k in list(params) if k.startswith("cfg_console_")}
    cfg = build_config(BrokerConfig, params, toml_path=config_path)
    ns_port, b_port = _port(namesrv_port, "--namesrv-port"), _port(broker_port, "--broker-port")
    c_port = _port(console_port, "--console-port")
    console_cfg = console_config(console_params, toml_path=None) if c_port else None
    if console_cfg is not None:  # one set of TLS settings: the broker's flags
        console_cfg = dataclasses.replace(console_cfg, **_tls_fields(cfg, ConsoleConfig))
    _check_standalone_tls(cfg)
    if print_config:
        click.echo(config_as_toml(dataclasses.replace(cfg, listen_port=b_port)))
        return
    from orbitmq.assembly import build_broker
    from orbitmq.broker.controller import BrokerController
    from orbitmq.namesrv import NameServer
    from orbitmq.store.store_lock import check_store_free

    try:  # before the name server starts: a store in use ends the command with its one line
        check_store_free(cfg.store.store_path)
    except StoreError as e:
        raise click.ClickException(f"cannot start: {e}") from None
    # One set of users and ACLs for both servers, kept in the broker's metadata store (read
    # here: an auth.json of an earlier broker is imported now).
    auth = BrokerController.auth_registry_for(cfg)
    try:
        auth.load()
    except StoreError as e:
        raise click.ClickException(f"cannot start: {e}") from None
    ns = NameServer(NamesrvConfig(listen_host=cfg.listen_host, listen_port=ns_port,
                                  **_access_fields(cfg), **_tls_fields(cfg, NamesrvConfig)),
                    auth_registry=auth)

    class _Broker:
        """Starts the broker once the name server's port is known (it may be 0)."""

        def __init__(self) -> None:
            self.controller: BrokerController | None = None

        async def start(self) -> None:
            self.controller = build_broker(
                dataclasses.replace(cfg, listen_port=b_port, namesrv_addr=ns.address),
                auth_registry=auth)
            await self.controller.start()
            if self.controller.observability.exporter is not None:  # one endpoint for both
                ns.observability.export_through(self.controller.observability,
                                                cfg.metrics_rpc_latency_sample_every)

        async def stop(self) -> None:
            if self.controller is not None:
                await self.controller.stop()

    broker = _Broker()
    if console_cfg is None:
        run_servers(ns, broker, ready_line=None)
    else:
        run_servers(ns, broker, _StandaloneConsole(console_cfg, ns, c_port), ready_line=None)


def _tls_fields(cfg: BrokerConfig, cls: type) -> dict[str, Any]:
    """The TLS settings (``tls_*``) of ``cls`` that standalone's servers take from its broker's."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls) if f.name in TLS_FIELDS}


def _check_standalone_tls(cfg: BrokerConfig) -> None:
    """Standalone's broker and console connect to its own name server: enforcing needs them to
    speak TLS (ConfigRefused naming the flag otherwise)."""
    if cfg.tls_server_mode is TlsServerMode.ENFORCING and not cfg.tls_enable:
        raise ConfigRefused("tls_server_mode = enforcing: standalone's broker and console connect "
                            "to its name server, so set --tls-enable too (with "
                            "--tls-client-trust-cert-path, and --tls-client-cert-path and "
                            "--tls-client-key-path when client certificates are required)")


def _access_fields(cfg: BrokerConfig) -> dict[str, Any]:
    """The access-control settings standalone's name server takes from its broker's."""
    names = {f.name for f in dataclasses.fields(NamesrvConfig)}
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if f.name in names and (f.name.startswith(("authentication_", "authorization_",
                                                       "inner_client_", "init_authentication",
                                                       "stateful_authentication_"))
                                    or f.name in ("audit_allowed", "allow_anonymous"))}


class _StandaloneConsole:
    """Starts the console once the name server's address is known. With authentication on, the
    console signs as the servers' inner credentials (else the init user) unless it was given
    credentials of its own, and people log in as users of the cluster."""

    def __init__(self, cfg: ConsoleConfig, ns: Any, port: int) -> None:
        self.cfg, self.ns, self.port = cfg, ns, port
        self.server: Any = None

    async def start(self) -> None:
        from orbitmq.console import ConsoleServer

        cfg = dataclasses.replace(self.cfg, namesrv_addr=self.ns.address,
                                  console_listen_port=self.port)
        inner = self.ns.access.inner
        if self.ns.config.authentication_enabled and inner is not None \
                and not cfg.console_access_key:
            cfg = dataclasses.replace(cfg, console_access_key=inner.access_key,
                                      console_secret_key=inner.secret_key)
        self.server = ConsoleServer(cfg)
        try:
            await self.server.start()
        except OSError as e:
            raise ClientError(f"console port {self.port}: {e.strerror or e} (--console-port 0 "
                              "runs standalone without the console)") from None

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
