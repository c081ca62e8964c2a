"""``orbitmq topic create|update|delete|list|status|route``: topic administration."""

from __future__ import annotations

import json
from typing import Any

import click

from orbitmq.cli.common import (
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
    value_callback,
)
from orbitmq.protocol.bodies import Perm

__all__ = ["topic_group", "parse_perm"]

ADMIN_TIMEOUT_S = 5.0
QUEUE_NUMS = click.IntRange(1, 1024)


def parse_perm(text: str) -> int:
    """A topic permission from RocketMQ's number (2 write, 4 read, 6 both) or letters (r, w, rw).

    Raises:
        ValueError: anything else.
    """
    raw = text.strip().lower()
    if raw.isdigit() and int(raw) in (2, 4, 6):
        return int(raw)
    if raw and set(raw) <= {"r", "w"}:
        return (4 if "r" in raw else 0) | (2 if "w" in raw else 0)
    raise ValueError(f"{text!r}: use 6 or rw (read and write), 4 or r, 2 or w")


_perm_param = value_callback(parse_perm)


def _perm_text(perm: int) -> str:
    return ("r" if perm & Perm.READ else "-") + ("w" if perm & Perm.WRITE else "-")


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


@click.group("topic")
def topic_group() -> None:
    """Create, change, delete and inspect topics."""


def _target_options(func: Any) -> Any:
    func = click.option("--broker-addr", "broker_addrs", multiple=True, metavar="HOST:PORT",
                        help="a broker to act on (repeatable) instead of a cluster")(func)
    func = click.option("--cluster", "-c", help="act on every master broker of this cluster "
                        "[default: the only cluster; required when the name servers know "
                        "several]")(func)
    return func


def _attributes_option(func: Any) -> Any:
    return click.option(
        "--attributes", "-a", metavar="+NAME=VALUE[,-NAME]",
        help="RocketMQ 5 topic attributes, as mqadmin's -a: +message.type=NORMAL|FIFO|DELAY|"
             "TRANSACTION|PRIORITY|MIXED sets the type, -message.type removes it")(func)


@topic_group.command("create")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--read-queue-nums", type=QUEUE_NUMS, default=8, show_default=True)
@click.option("--write-queue-nums", type=QUEUE_NUMS, default=8, show_default=True)
@click.option("--perm", default="6", show_default=True, callback=_perm_param,
              help="6/rw read and write, 4/r read only, 2/w write only")
@click.option("--order/--no-order", default=False, show_default=True,
              help="an ordered topic (consumers lock queues)")
@_attributes_option
@_target_options
@handles_errors
def create_cmd(namesrv: str, topic: str, read_queue_nums: int, write_queue_nums: int, perm: int,
               order: bool, attributes: str | None, cluster: str | None,
               broker_addrs: tuple[str, ...]) -> None:
    """Create a new topic on brokers; a topic that exists is refused (use topic update)."""
    from orbitmq.errors import TopicExistsError

    if cluster and broker_addrs:
        raise click.UsageError("give --cluster or --broker-addr, not both")
    settings: dict[str, Any] = {"read_queue_nums": read_queue_nums,
                                "write_queue_nums": write_queue_nums, "perm": perm,
                                "order": order, "attributes": attributes}
    try:
        with _admin(namesrv) as admin:
            if broker_addrs:
                where = ", ".join(admin.create_topic_on_brokers(broker_addrs, topic, **settings))
            else:
                where = ", ".join(admin.create_topic(topic, cluster=cluster, **settings))
    except TopicExistsError as e:
        raise click.ClickException(
            f"topic {topic} exists (on {', '.join(e.brokers)}); change it with "
            f"'orbitmq topic update -t {topic}'") from None
    click.echo(f"topic {topic} ({_settings_text(settings)}) created on {where}")


def _settings_text(settings: dict[str, Any]) -> str:
    parts = []
    if settings.get("read_queue_nums") is not None:
        parts.append(f"{settings['read_queue_nums']} read")
    if settings.get("write_queue_nums") is not None:
        parts.append(f"{settings['write_queue_nums']} write")
    text = " / ".join(parts) + " queues" if parts else ""
    if settings.get("perm") is not None:
        text += f"{', ' if text else ''}perm {_perm_text(settings['perm'])}"
    if settings.get("order") is not None:
        text += f"{', ' if text else ''}{'ordered' if settings['order'] else 'not ordered'}"
    if settings.get("attributes"):
        text += f"{', ' if text else ''}attributes {settings['attributes']}"
    return text


@topic_group.command("update")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--read-queue-nums", type=QUEUE_NUMS, help="[default: unchanged]")
@click.option("--write-queue-nums", type=QUEUE_NUMS, help="[default: unchanged]")
@click.option("--perm", callback=_perm_param, help="6/rw, 4/r or 2/w [default: unchanged]")
@click.option("--order/--no-order", default=None, help="[default: unchanged]")
@_attributes_option
@click.option("--cluster", "-c", help="act on every master broker of this cluster "
              "[default: the brokers that have the topic]")
@click.option("--broker-addr", "broker_addrs", multiple=True, metavar="HOST:PORT",
              help="a broker to act on (repeatable)")
@click.option("--force", is_flag=True,
              help="lower the read queues even below queues that hold unconsumed messages "
                   "(they are hidden from consumers until the count goes up again)")
@handles_errors
def update_cmd(namesrv: str, topic: str, read_queue_nums: int | None,
               write_queue_nums: int | None, perm: int | None, order: bool | None,
               attributes: str | None, cluster: str | None,
               broker_addrs: tuple[str, ...], force: bool) -> None:
    """Change settings of an existing topic; what is not given keeps its current value.

    Lowering --read-queue-nums is refused while a queue it would hide holds messages the slowest
    consumer group has not consumed, or below the write queue count: lower --write-queue-nums
    first, wait until the extra queues are drained (topic status, group status), then lower
    --read-queue-nums. --force skips that check.
    """
    if cluster and broker_addrs:
        raise click.UsageError("give --cluster or --broker-addr, not both")
    settings: dict[str, Any] = {"read_queue_nums": read_queue_nums,
                                "write_queue_nums": write_queue_nums, "perm": perm,
                                "order": order, "attributes": attributes}
    if all(v is None for v in settings.values()):
        raise click.UsageError("nothing to change: give --read-queue-nums, --write-queue-nums, "
                               "--perm, --order/--no-order or --attributes")
    with _admin(namesrv) as admin:
        where = admin.update_topic(topic, cluster=cluster, broker_addrs=broker_addrs or None,
                                   force=force, **settings)
    click.echo(f"topic {topic} updated ({_settings_text(settings)}) on {', '.join(where)}")


@topic_group.command("delete")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--cluster", "-c", help="delete from this cluster's masters [default: the brokers "
              "of the topic's route]")
@handles_errors
def delete_cmd(namesrv: str, topic: str, cluster: str | None) -> None:
    """Delete a topic from its brokers (config, queues, consumer offsets) and the name servers."""
    with _admin(namesrv) as admin:
        if cluster is None:
            admin.topic_route(topic)  # a typo should say "not found", not delete nothing
        brokers = admin.delete_topic(topic, cluster=cluster)
    click.echo(f"topic {topic} deleted from {', '.join(brokers) or 'no broker'} and the name servers")


@topic_group.command("list")
@namesrv_option
@click.option("--all", "show_all", is_flag=True,
              help="include system, retry (%RETRY%...) and dead letter (%DLQ%...) topics")
@format_option
@handles_errors
def list_cmd(namesrv: str, show_all: bool, fmt: str) -> None:
    """List the topics the name server has a route for: the applications' topics, or every
    topic with --all (RocketMQ's system topics such as TBW102 and RMQ_SYS_*, and each group's
    retry and dead letter topics)."""
    from orbitmq.client import is_system_topic

    with _admin(namesrv) as admin:
        topics = admin.list_topics()
        if not show_all:
            info = admin.cluster_info()  # brokers register their cluster's and own names too
            reserved = set(info.cluster_addr_table) | set(info.broker_addr_table)
            shown = [t for t in topics if not is_system_topic(t, reserved)]
    hidden = 0 if show_all else len(topics) - len(shown)
    topics = topics if show_all else shown
    if fmt == "json":
        echo_json(topics)
        return
    for topic in topics:
        click.echo(topic)
    if hidden:
        click.echo(f"({hidden} system, retry and dead letter topic(s) not shown: --all)", err=True)


@topic_group.command("status")
@namesrv_option
@click.option("--topic", "-t", required=True)
@format_option
@handles_errors
def status_cmd(namesrv: str, topic: str, fmt: str) -> None:
    """Per queue: the offsets of the first and one past the last message, and the store time of
    the last message."""
    with _admin(namesrv) as admin:
        queues = admin.topic_status(topic)
    if fmt == "json":
        echo_json([{"broker": s.queue.broker_name, "queue_id": s.queue.queue_id,
                    "min_offset": s.min_offset, "max_offset": s.max_offset,
                    "last_update_timestamp": s.last_update_timestamp} for s in queues])
        return
    rows = [(s.queue.broker_name, str(s.queue.queue_id), str(s.min_offset), str(s.max_offset),
             format_ms(s.last_update_timestamp)) for s in queues]
    click.echo(table(("BROKER", "QUEUE", "MIN_OFFSET", "MAX_OFFSET", "LAST_UPDATE"), rows))
    total = sum(s.max_offset - s.min_offset for s in queues)
    click.echo(f"{len(queues)} queue(s), {total} message(s) stored")


@topic_group.command("route")
@namesrv_option
@click.option("--topic", "-t", required=True)
@handles_errors
def route_cmd(namesrv: str, topic: str) -> None:
    """Print the topic's route (brokers, addresses, queues, permissions) as JSON."""
    with _admin(namesrv) as admin:
        route = admin.topic_route(topic)
    echo_json(json.loads(route.to_json()), indent=2)

