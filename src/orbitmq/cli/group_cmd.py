"""``orbitmq group list|status|reset-offset|update``: consumer group administration."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    Position,
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    now_ms,
    table,
    timestamp_param,
)

__all__ = ["group_group"]

ADMIN_TIMEOUT_S = 5.0


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


@click.group("group")
def group_group() -> None:
    """List consumer groups, show their progress, move their offsets."""


@group_group.command("list")
@namesrv_option
@click.option("--all", "show_all", is_flag=True,
              help="include the brokers' and tools' own groups (TOOLS_CONSUMER, CID_SYS_*...)")
@format_option
@handles_errors
def list_cmd(namesrv: str, show_all: bool, fmt: str) -> None:
    """List the consumer groups the brokers know (subscription groups and groups with offsets):
    the applications' groups, or with --all the brokers' and tools' own groups too."""
    from orbitmq.client import is_system_group

    with _admin(namesrv) as admin:
        every = admin.list_groups()
    groups = every if show_all else [g for g in every if not is_system_group(g)]
    if fmt == "json":
        echo_json(groups)
        return
    for group in groups:
        click.echo(group)
    if len(groups) < len(every):
        click.echo(f"({len(every) - len(groups)} system group(s) not shown: --all)", err=True)


@group_group.command("status")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--topic", "-t", help="only this topic [default: every topic the group committed on]")
@format_option
@handles_errors
def status_cmd(namesrv: str, group: str, topic: str | None, fmt: str) -> None:
    """Per queue: the broker's offset (one past its last message), the group's committed offset,
    the lag between them and the client holding the queue (as the clients report it; blank when
    unknown), with totals."""
    with _admin(namesrv) as admin:
        status = admin.group_status(group, topic)
        holders = admin.queue_holders(group) if status.queues else {}
    if not status.queues:
        where = f" on topic {topic}" if topic else ""
        raise click.ClickException(f"group {group} has no committed offsets{where}")
    if fmt == "json":
        echo_json({
            "group": group,
            "total_lag": status.total_lag,
            "queues": [{"topic": q.queue.topic, "broker": q.queue.broker_name,
                        "queue_id": q.queue.queue_id, "broker_offset": q.broker_offset,
                        "consumer_offset": q.consumer_offset, "lag": q.lag,
                        "last_timestamp": q.last_timestamp,
                        "client": holders.get(q.queue)} for q in status.queues],
        })
        return
    rows = [(q.queue.topic, q.queue.broker_name, str(q.queue.queue_id), str(q.broker_offset),
             str(q.consumer_offset), str(q.lag), format_ms(q.last_timestamp),
             holders.get(q.queue, "")) for q in status.queues]
    header = ("TOPIC", "BROKER", "QUEUE", "BROKER_OFFSET", "CONSUMER_OFFSET", "LAG", "LAST_CONSUMED",
              "CLIENT")
    click.echo(table(header, rows))
    broker_total = sum(q.broker_offset for q in status.queues)
    consumer_total = sum(max(q.consumer_offset, 0) for q in status.queues)
    click.echo(f"total: broker offset {broker_total}, consumer offset {consumer_total}, "
               f"lag {status.total_lag}")


@group_group.command("reset-offset")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--topic", "-t", required=True)
@click.option("--timestamp", required=True, callback=timestamp_param, metavar="TIME",
              help="ms since the epoch, an ISO datetime (local time without a zone), "
              "'earliest' or 'now'")
@handles_errors
def reset_offset_cmd(namesrv: str, group: str, topic: str, timestamp: int | Position) -> None:
    """Move the group's committed offsets on a topic to the first message stored at or after a
    time. Stop the group's consumers first: a running consumer commits its own offsets over it."""
    if timestamp is Position.EARLIEST:
        ms = 0
    elif timestamp is Position.LATEST:
        ms = now_ms()
    else:
        assert isinstance(timestamp, int)
        ms = timestamp
    with _admin(namesrv) as admin:
        offsets = admin.reset_offset(group, topic, ms)
    rows = [(mq.broker_name, str(mq.queue_id), str(offset)) for mq, offset in sorted(offsets.items())]
    click.echo(table(("BROKER", "QUEUE", "NEW_OFFSET"), rows))
    click.echo(f"group {group} reset on topic {topic} to {format_ms(ms) if ms else 'earliest'}")


@group_group.command("update")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--retry-max-times", type=click.IntRange(0, 10_000),
              help="retries of a failed message before it goes to %DLQ%GROUP")
@click.option("--consume-enable", type=click.BOOL, metavar="true|false",
              help="false: the brokers refuse the group's pulls (NO_PERMISSION)")
@click.option("--consume-broadcast-enable", type=click.BOOL, metavar="true|false",
              help="false: the brokers refuse the group's pulls in broadcasting mode")
@click.option("--retry-queue-nums", type=click.IntRange(0, 1024),
              help="queues of %RETRY%GROUP (0: failed messages are dropped, not retried)")
@click.option("--consume-message-orderly", type=click.BOOL, metavar="true|false",
              help="true: a FIFO group: 5.x clients receive each queue's messages in order")
@click.option("--cluster", "-c", help="the cluster whose masters change [default: the only "
              "cluster; required when the name servers know several]")
@handles_errors
def update_cmd(namesrv: str, group: str, cluster: str | None, **settings: Any) -> None:
    """Change a consumer group's settings on every master of a cluster (creating the group if
    needed); the settings not given keep their values."""
    changes = {name: value for name, value in settings.items() if value is not None}
    if not changes:
        raise click.UsageError("nothing to change: give --retry-max-times, --consume-enable, "
                               "--consume-broadcast-enable, --retry-queue-nums or "
                               "--consume-message-orderly")
    with _admin(namesrv) as admin:
        brokers = admin.update_group(group, cluster=cluster, **changes)
    shown = " ".join(f"{name}={value}" for name, value in sorted(changes.items()))
    click.echo(f"group {group} updated on {', '.join(brokers)}: {shown}")
