"""``orbitmq broker status | config get | config set | consume-stats``: mqadmin's brokerStatus,
getBrokerConfig, updateBrokerConfig and brokerConsumeStats.

``orbitmq broker`` itself runs a broker; :func:`with_admin_subcommands` turns that command into a
group whose callback still runs the server when no subcommand is given, so ``orbitmq broker
--namesrv ...`` works as before. A server flag given on the command line together with a
subcommand is refused (it would be ignored otherwise).

Commands that act on brokers take ``--broker NAME|HOST:PORT`` or ``--cluster NAME``; without
either the ones that only read act on every master broker the name servers know, while ``config
set`` refuses to run (as mqadmin's updateBrokerConfig needs -b or -c): one setting such as
``brokerPermission`` on every broker can stop a whole cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from orbitmq.cli.common import (
    BadValue,
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)

__all__ = ["with_admin_subcommands", "broker_targets", "ADMIN_TIMEOUT_S"]

ADMIN_TIMEOUT_S = 5.0


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def broker_targets(admin: Any, broker: str | None, cluster: str | None, *,
                   required: bool = False) -> list[tuple[str, str]]:
    """(broker name, address) of the brokers a command acts on (masters unless an address is
    given): ``--broker`` alone, the masters of ``--cluster``, or every master (refused when
    ``required``: a command that changes brokers names them)."""
    if broker is not None and cluster is not None:
        raise BadValue("give --broker or --cluster, not both")
    if required and broker is None and cluster is None:
        raise BadValue("give --broker NAME (one broker) or --cluster NAME (its masters): "
                       "this changes brokers, and there is no default of every broker")
    if broker is not None:
        addr = admin.broker_address(broker)
        name = next((b.broker_name for b in admin.cluster_brokers() if b.addr == addr), broker)
        return [(name, addr)]
    brokers = [(b.broker_name, b.addr) for b in admin.cluster_brokers(cluster) if b.broker_id == 0]
    if not brokers:
        raise click.ClickException("no master broker known to the name servers")
    return brokers


def _target_options(func: Any) -> Any:
    func = click.option("--cluster", "-c", help="every master broker of this cluster")(func)
    return click.option("--broker", "-b", metavar="NAME|HOST:PORT",
                        help="one broker: a name (its master) or an address")(func)


def with_admin_subcommands(server_cmd: click.Command) -> click.Group:
    """``server_cmd`` as a group that runs the server when no subcommand is given."""

    @click.pass_context
    def callback(ctx: click.Context, **params: Any) -> Any:
        if ctx.invoked_subcommand is None:
            return ctx.invoke(server_cmd.callback, **params)  # type: ignore[arg-type]
        given = [p.opts[0] for p in server_cmd.params if isinstance(p, click.Option)
                 and ctx.get_parameter_source(p.name or "") is click.core.ParameterSource.COMMANDLINE]
        if given:
            raise BadValue(f"{', '.join(given)} belong to the broker server, not to "
                                   f"'broker {ctx.invoked_subcommand}'")
        return None

    group = click.Group(server_cmd.name, params=list(server_cmd.params), callback=callback,
                        invoke_without_command=True, help=(server_cmd.help or "") +
                        "\n\nWith a subcommand: look at or change running brokers.",
                        short_help=server_cmd.short_help, context_settings=server_cmd.context_settings)
    for command in (status_cmd, config_group, consume_stats_cmd):
        group.add_command(command)
    return group


@click.command("status")
@namesrv_option
@_target_options
@format_option
@handles_errors
def status_cmd(namesrv: str, broker: str | None, cluster: str | None, fmt: str) -> None:
    """Show brokers' runtime figures (mqadmin brokerStatus): rates, totals, offsets, disk."""
    with _admin(namesrv) as admin:
        for name, addr in broker_targets(admin, broker, cluster):
            info = admin.broker_runtime_info(addr)
            if fmt == "json":
                echo_json({"broker": name, "addr": addr, "status": info})
                continue
            click.echo(f"# {name} {addr}")
            width = max(map(len, info))
            for key in sorted(info):
                click.echo(f"{key.ljust(width)} : {info[key]}")


@click.group("config")
def config_group() -> None:
    """Read or change a running broker's settings (RocketMQ's names)."""


@config_group.command("get")
@namesrv_option
@_target_options
@click.option("--key", "-k", "keys", multiple=True, help="only this setting (repeatable)")
@format_option
@handles_errors
def config_get_cmd(namesrv: str, broker: str | None, cluster: str | None, keys: tuple[str, ...],
                   fmt: str) -> None:
    """Show brokers' settings under RocketMQ's names (mqadmin getBrokerConfig)."""
    with _admin(namesrv) as admin:
        for name, addr in broker_targets(admin, broker, cluster):
            config = admin.broker_config(addr)
            missing = [k for k in keys if k not in config]
            if missing:
                raise click.ClickException(f"{name} has no setting {missing[0]!r}")
            shown = {k: config[k] for k in keys} if keys else config
            if fmt == "json":
                echo_json({"broker": name, "addr": addr, "config": shown})
                continue
            click.echo(f"# {name} {addr}")
            for key, value in shown.items():
                click.echo(f"{key}={value}")


@config_group.command("set")
@namesrv_option
@_target_options
@click.option("--key", "-k", required=True, help="setting name, RocketMQ's or OrbitMQ's "
              "(brokerPermission or broker_permission)")
@click.option("--value", "-v", required=True, help="new value (RocketMQ's units: the disk "
              "ratios are percentages)")
@format_option
@handles_errors
def config_set_cmd(namesrv: str, broker: str | None, cluster: str | None, key: str, value: str,
                   fmt: str) -> None:
    """Change a runtime setting on one broker (--broker) or on every master of a cluster
    (--cluster); one of them is required (mqadmin updateBrokerConfig -b / -c). The brokers keep
    it across restarts. Settings that need a restart are refused, naming the setting."""
    with _admin(namesrv) as admin:
        for name, addr in broker_targets(admin, broker, cluster, required=True):
            admin.update_broker_config(addr, {key: value})
            if fmt == "json":
                echo_json({"broker": name, "addr": addr, "changed": {key: value}})
            else:
                click.echo(f"{name} {addr}: {key}={value}")


def _consume_rows(stats: Any) -> Iterator[tuple[Any, Any]]:
    for entry in stats.stats:
        for q in entry.queues:
            yield entry, q


@click.command("consume-stats")
@namesrv_option
@_target_options
@click.option("--order-only", is_flag=True, help="orderly topics only")
@format_option
@handles_errors
def consume_stats_cmd(namesrv: str, broker: str | None, cluster: str | None, order_only: bool,
                      fmt: str) -> None:
    """Every group's progress on every topic of brokers (mqadmin brokerConsumeStats)."""
    with _admin(namesrv) as admin:
        for name, addr in broker_targets(admin, broker, cluster):
            stats = admin.broker_consume_stats(addr, order_only=order_only)
            if fmt == "json":
                echo_json({"broker": name, "addr": addr, "total_diff": stats.total_diff,
                           "total_inflight_diff": stats.total_inflight_diff,
                           "queues": [{"group": e.group, "topic": q.queue.topic,
                                       "queue_id": q.queue.queue_id,
                                       "broker_offset": q.broker_offset,
                                       "consumer_offset": q.consumer_offset, "diff": q.lag,
                                       "last_timestamp": q.last_timestamp}
                                      for e, q in _consume_rows(stats)]})
                continue
            rows = [(q.queue.topic, e.group, name, str(q.queue.queue_id), str(q.broker_offset),
                     str(q.consumer_offset), str(q.lag), format_ms(q.last_timestamp))
                    for e, q in _consume_rows(stats)]
            click.echo(table(("TOPIC", "GROUP", "BROKER", "QUEUE", "BROKER_OFFSET",
                              "CONSUMER_OFFSET", "DIFF", "LAST_CONSUMED"), rows))
            click.echo(f"{name}: total diff {stats.total_diff}, in flight "
                       f"{stats.total_inflight_diff}")
