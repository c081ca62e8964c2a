"""Operations subcommands of existing command groups (registered in cli/main.py):

- ``orbitmq group connection | config | delete | clone-offset | time-span`` (mqadmin
  consumerConnection, getConsumerConfig, deleteSubGroup, cloneGroupOffset;
  QUERY_CONSUME_TIME_SPAN);
- ``orbitmq topic cluster-list | consumer-groups | queue-entries`` (mqadmin topicClusterList,
  the consumer groups of ``topicList -c``, queryCq);
- ``orbitmq message print`` (mqadmin printMsg / printMsgByQueue) and the ``--offset`` form of
  ``orbitmq message query`` (mqadmin queryMsgByOffset).
"""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    BadValue,
    Position,
    body_text,
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
    timestamp_param,
)

__all__ = ["group_connection_cmd", "group_config_cmd", "group_delete_cmd", "group_clone_offset_cmd",
           "group_time_span_cmd", "topic_cluster_list_cmd", "topic_consumer_groups_cmd",
           "topic_queue_entries_cmd", "message_print_cmd", "PRINT_LIMIT_MAX"]

ADMIN_TIMEOUT_S = 5.0
PRINT_LIMIT_MAX = 10_000
QUEUE_ID = click.IntRange(0, 2**31 - 1)
OFFSET = click.IntRange(0, 2**63 - 1)


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def _line(msg: Any, broker: str) -> str:
    return (f"broker={broker} queue={msg.queue_id} offset={msg.queue_offset} "
            f"msg_id={msg.msg_id} stored={format_ms(msg.store_timestamp)} tags={msg.tags or '-'} "
            f"keys={','.join(msg.keys) or '-'} body={body_text(msg.body)}")


# -- group ------------------------------------------------------------------------------------
@click.command("connection")
@namesrv_option
@click.option("--group", "-g", required=True)
@format_option
@handles_errors
def group_connection_cmd(namesrv: str, group: str, fmt: str) -> None:
    """A consumer group's live clients and subscriptions (mqadmin consumerConnection)."""
    with _admin(namesrv) as admin:
        info = admin.consumer_connections(group)
    if not info.connections:
        raise click.ClickException(f"no client of group {group} is online")
    if fmt == "json":
        echo_json({"group": group, "consume_type": info.consume_type,
                   "message_model": info.message_model,
                   "consume_from_where": info.consume_from_where,
                   "subscriptions": info.subscriptions,
                   "connections": [{"client_id": c.client_id, "client_addr": c.client_addr,
                                    "language": c.language, "version": c.version}
                                   for c in info.connections]})
        return
    click.echo(table(("CLIENT_ID", "CLIENT_ADDR", "LANGUAGE", "VERSION"),
                     [(c.client_id, c.client_addr, c.language, str(c.version))
                      for c in info.connections]))
    for topic, expression in sorted(info.subscriptions.items()):
        click.echo(f"subscription {topic}: {expression}")
    click.echo(f"consume type {info.consume_type or '-'}, model {info.message_model or '-'}, "
               f"from {info.consume_from_where or '-'}")


@click.command("config")
@namesrv_option
@click.option("--group", "-g", required=True)
@format_option
@handles_errors
def group_config_cmd(namesrv: str, group: str, fmt: str) -> None:
    """A consumer group's settings on each broker (mqadmin getConsumerConfig)."""
    with _admin(namesrv) as admin:
        configs = admin.group_config(group)
    if not configs:
        raise click.ClickException(f"no broker has settings for group {group}")
    for broker, config in configs.items():
        if fmt == "json":
            echo_json({"group": group, "broker": broker, "config": config})
            continue
        click.echo(f"# {broker}")
        for key in sorted(config):
            click.echo(f"{key}={json_line(config[key])}")


@click.command("delete")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--cluster", "-c", help="the cluster whose masters lose the group [default: the "
              "only cluster; required when the name servers know several]")
@click.option("--keep-offsets", is_flag=True, help="keep the group's committed offsets")
@format_option
@handles_errors
def group_delete_cmd(namesrv: str, group: str, cluster: str | None, keep_offsets: bool,
                     fmt: str) -> None:
    """Delete a consumer group's settings (and committed offsets) on every master broker
    (mqadmin deleteSubGroup)."""
    with _admin(namesrv) as admin:
        brokers = admin.delete_group(group, remove_offset=not keep_offsets, cluster=cluster)
    if fmt == "json":
        echo_json({"group": group, "brokers": brokers, "offsets_removed": not keep_offsets})
    else:
        click.echo(f"group {group} deleted on {', '.join(brokers)}")


@click.command("clone-offset")
@namesrv_option
@click.option("--src", "-s", "src_group", required=True, help="group whose offsets are copied")
@click.option("--dest", "-d", "dest_group", required=True, help="group that gets them")
@click.option("--topic", "-t", help="only this topic")
@click.option("--offline", is_flag=True, help="also topics the source no longer subscribes to")
@format_option
@handles_errors
def group_clone_offset_cmd(namesrv: str, src_group: str, dest_group: str, topic: str | None,
                           offline: bool, fmt: str) -> None:
    """Start a group where another one is: copy its committed offsets (mqadmin
    cloneGroupOffset). Stop the destination group's consumers first."""
    with _admin(namesrv) as admin:
        brokers = admin.clone_group_offset(src_group, dest_group, topic=topic, offline=offline)
    if fmt == "json":
        echo_json({"src": src_group, "dest": dest_group, "topic": topic, "brokers": brokers})
    else:
        click.echo(f"offsets of {src_group} cloned to {dest_group} on {', '.join(brokers)}")


@click.command("time-span")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--topic", "-t", required=True)
@format_option
@handles_errors
def group_time_span_cmd(namesrv: str, group: str, topic: str, fmt: str) -> None:
    """Per queue: store times of the oldest, newest and last consumed message and how long
    the next one has waited (QUERY_CONSUME_TIME_SPAN)."""
    with _admin(namesrv) as admin:
        spans = admin.consume_time_span(topic, group)
    if fmt == "json":
        for s in spans:
            echo_json({"topic": topic, "group": group, "broker": s.queue.broker_name,
                       "queue_id": s.queue.queue_id, "min_timestamp": s.min_timestamp,
                       "max_timestamp": s.max_timestamp,
                       "consume_timestamp": s.consume_timestamp, "delay_ms": s.delay_ms})
        return
    click.echo(table(("BROKER", "QUEUE", "OLDEST", "NEWEST", "CONSUMED", "DELAY_MS"),
                     [(s.queue.broker_name, str(s.queue.queue_id), format_ms(s.min_timestamp),
                       format_ms(s.max_timestamp), format_ms(s.consume_timestamp),
                       str(s.delay_ms)) for s in spans]))


# -- topic ------------------------------------------------------------------------------------
@click.command("cluster-list")
@namesrv_option
@click.option("--topic", "-t", required=True)
@format_option
@handles_errors
def topic_cluster_list_cmd(namesrv: str, topic: str, fmt: str) -> None:
    """The clusters whose brokers hold the topic (mqadmin topicClusterList)."""
    with _admin(namesrv) as admin:
        route = admin.topic_route(topic)
    clusters = sorted({bd.cluster for bd in route.broker_datas})
    if fmt == "json":
        echo_json({"topic": topic, "clusters": clusters})
        return
    for cluster in clusters:
        click.echo(cluster)


@click.command("consumer-groups")
@namesrv_option
@click.option("--topic", "-t", required=True)
@format_option
@handles_errors
def topic_consumer_groups_cmd(namesrv: str, topic: str, fmt: str) -> None:
    """The consumer groups of a topic: subscribers and groups with offsets on it
    (QUERY_TOPIC_CONSUME_BY_WHO)."""
    with _admin(namesrv) as admin:
        groups = admin.topic_consumer_groups(topic)
    if fmt == "json":
        echo_json({"topic": topic, "groups": groups})
        return
    for group in groups:
        click.echo(group)


@click.command("queue-entries")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--broker", "-b", required=True, metavar="NAME|HOST:PORT")
@click.option("--queue", "-q", "queue_id", type=QUEUE_ID, required=True)
@click.option("--index", "-i", type=OFFSET, default=0, show_default=True, help="first entry")
@click.option("--count", "-c", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--group", "-g", help="also show this group's subscription")
@format_option
@handles_errors
def topic_queue_entries_cmd(namesrv: str, topic: str, broker: str, queue_id: int, index: int,
                            count: int, group: str | None, fmt: str) -> None:
    """Raw entries of one consume queue: commit log offset, size, tag hash (mqadmin queryCq)."""
    with _admin(namesrv) as admin:
        view = admin.query_consume_queue(topic, broker, queue_id, index, count, group=group)
    if fmt == "json":
        echo_json({"topic": topic, "broker": view.queue.broker_name, "queue_id": queue_id,
                   "min_index": view.min_index, "max_index": view.max_index,
                   "subscription": view.subscription, "filter_data": view.filter_data,
                   "entries": [{"index": e.index, "physic_offset": e.physic_offset,
                                "physic_size": e.physic_size, "tags_code": e.tags_code}
                               for e in view.entries]})
        return
    click.echo(f"queue {topic}:{view.queue.broker_name}:{queue_id} holds indexes "
               f"{view.min_index}..{view.max_index - 1}")
    if view.remark:
        click.echo(view.remark)
    click.echo(table(("INDEX", "COMMIT_LOG_OFFSET", "SIZE", "TAGS_CODE"),
                     [(str(e.index), str(e.physic_offset), str(e.physic_size), str(e.tags_code))
                      for e in view.entries]))


def _start(admin: Any, mq: Any, offset: int | None, begin: int | Position | None) -> int:
    if offset is not None:
        return offset
    if begin is None or begin is Position.EARLIEST:
        return 0
    if begin is Position.LATEST:
        return admin.max_offset(mq)
    return admin.queue_offset_at(mq, begin)


@click.command("print")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--broker", "-b", metavar="NAME|HOST:PORT", help="with --queue: one queue")
@click.option("--queue", "-q", "queue_id", type=QUEUE_ID, help="one queue (needs --broker)")
@click.option("--offset", "-o", type=OFFSET, help="first queue offset (needs --queue)")
@click.option("--begin", callback=timestamp_param, metavar="TIME",
              help="first message stored at or after TIME (ms, ISO datetime, 'earliest')")
@click.option("--end", callback=timestamp_param, metavar="TIME",
              help="stop at messages stored after TIME")
@click.option("--limit", type=click.IntRange(1, PRINT_LIMIT_MAX), default=32, show_default=True,
              help="at most this many messages per queue")
@format_option
@handles_errors
def message_print_cmd(namesrv: str, topic: str, broker: str | None, queue_id: int | None,
                      offset: int | None, begin: Any, end: Any, limit: int, fmt: str) -> None:
    """Print a topic's messages, queue by queue, without consuming them (mqadmin printMsg;
    with --queue, printMsgByQueue)."""
    from orbitmq.cli.consume_cmd import message_json
    from orbitmq.protocol.bodies import MessageQueue

    if (queue_id is None) != (broker is None):
        raise BadValue("--queue and --broker go together")
    if offset is not None and queue_id is None:
        raise BadValue("--offset needs --queue")
    end_ms = None if end is None or isinstance(end, Position) else end
    with _admin(namesrv) as admin:
        if queue_id is not None:
            assert broker is not None  # they go together (checked above)
            addr = admin.broker_address(broker)
            name = next((b.broker_name for b in admin.cluster_brokers() if b.addr == addr), broker)
            queues = [MessageQueue(topic, name, queue_id)]
        else:
            queues = [s.queue for s in admin.topic_status(topic)]
        printed = 0
        for mq in queues:
            for msg in admin.queue_messages(mq, _start(admin, mq, offset, begin), limit):
                if end_ms is not None and msg.store_timestamp > end_ms:
                    break
                printed += 1
                click.echo(json_line(message_json(msg, mq.broker_name)) if fmt == "json"
                           else _line(msg, mq.broker_name))
    if not printed:
        raise click.ClickException(f"no message to print in topic {topic}")


def json_line(value: Any) -> str:
    import json

    return json.dumps(value, sort_keys=True, ensure_ascii=False)
