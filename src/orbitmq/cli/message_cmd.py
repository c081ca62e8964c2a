"""``orbitmq message get|query|trace|recall``: look messages up by id or by key, follow one's
trace, or recall a timer message."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    BadValue,
    body_text,
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
)
from orbitmq.cli.consume_cmd import message_json
from orbitmq.cli.send_cmd import DEFAULT_PRODUCER_GROUP
from orbitmq.cli.trace_cmd import trace_cmd

__all__ = ["message_group", "describe_message", "query_by_offset"]

ADMIN_TIMEOUT_S = 5.0
INTERNAL_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY", "WAIT", "CLUSTER", "MIN_OFFSET",
                                 "MAX_OFFSET"})


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def _host(host: tuple[str, int]) -> str:
    return f"{host[0]}:{host[1]}"


def describe_message(msg: Any) -> str:
    """Every field of a message, one per line, for a person to read."""
    user = {k: v for k, v in sorted(msg.properties.items()) if k not in INTERNAL_PROPERTIES}
    lines = [
        ("topic", msg.topic),
        ("queue", f"{msg.queue_id} (offset {msg.queue_offset})"),
        ("msg id", msg.msg_id or "-"),
        ("offset msg id", msg.offset_msg_id or "-"),
        ("tags", msg.tags or "-"),
        ("keys", ",".join(msg.keys) or "-"),
        ("born", f"{format_ms(msg.born_timestamp)} from {_host(msg.born_host)}"),
        ("stored", f"{format_ms(msg.store_timestamp)} at {_host(msg.store_host)}"),
        ("reconsume times", str(msg.reconsume_times)),
        ("properties", " ".join(f"{k}={v}" for k, v in user.items()) or "-"),
        (f"body ({len(msg.body)} bytes)", body_text(msg.body)),
    ]
    width = max(len(name) for name, _ in lines) + 1
    return "\n".join(f"{(name + ':').ljust(width)} {value}" for name, value in lines)


def query_by_offset(namesrv: str, topic: str, broker: str | None, queue_id: int | None,
                    offset: int, fmt: str) -> None:
    """``orbitmq message query --offset``: one message by queue and offset."""
    from orbitmq.protocol.bodies import MessageQueue

    if broker is None or queue_id is None:
        raise BadValue("--offset needs --broker and --queue")
    with _admin(namesrv) as admin:
        addr = admin.broker_address(broker)
        name = next((b.broker_name for b in admin.cluster_brokers() if b.addr == addr), broker)
        msg = admin.message_at(MessageQueue(topic, name, queue_id), offset)
    if fmt == "json":
        echo_json(message_json(msg, name))
    else:
        click.echo(describe_message(msg))


@click.group("message")
def message_group() -> None:
    """Look messages up by message id or by key; recall a timer message."""


@message_group.command("get")
@namesrv_option
@click.option("--topic", "-t", help="needed for a producer's message id (UNIQ_KEY); a broker's "
              "offset message id is enough on its own")
@format_option
@click.argument("msg_id")
@handles_errors
def get_cmd(namesrv: str, topic: str | None, fmt: str, msg_id: str) -> None:
    """Show one message by MSG_ID: the offset message id `orbitmq send` prints, or the message
    id consumers see (then with --topic)."""
    with _admin(namesrv) as admin:
        msg = admin.view_message(msg_id.strip(), topic)
    if fmt == "json":
        echo_json(message_json(msg))
    else:
        click.echo(describe_message(msg))


@message_group.command("query")
@namesrv_option
@click.option("--topic", "-t", required=True)
@click.option("--key", "-k", help="a key given at send time (--keys), or a message id")
@click.option("--max", "max_num", type=click.IntRange(1, 64 * 1024), default=64,
              show_default=True, help="at most this many messages per broker")
@click.option("--offset", "-o", type=click.IntRange(0, 2**63 - 1),
              help="instead of --key: the message at this offset of --broker/--queue")
@click.option("--broker", "-b", metavar="NAME|HOST:PORT", help="with --offset")
@click.option("--queue", "-q", "queue_id", type=click.IntRange(0, 2**31 - 1), help="with --offset")
@format_option
@handles_errors
def query_cmd(namesrv: str, topic: str, key: str | None, max_num: int, offset: int | None,
              broker: str | None, queue_id: int | None, fmt: str) -> None:
    """List a topic's messages carrying a key, oldest first, one line each; or show the message
    at one queue offset (--offset with --broker and --queue)."""
    if (key is None) == (offset is None):
        raise BadValue("give --key or --offset (with --broker and --queue)")
    if offset is not None:
        query_by_offset(namesrv, topic, broker, queue_id, offset, fmt)
        return
    assert key is not None
    with _admin(namesrv) as admin:
        found = admin.query_messages(topic, key, max_num)
    for msg in found:
        if fmt == "json":
            echo_json(message_json(msg))
        else:
            click.echo(
                f"queue={msg.queue_id} offset={msg.queue_offset} msg_id={msg.msg_id} "
                f"offset_msg_id={msg.offset_msg_id} stored={format_ms(msg.store_timestamp)} "
                f"tags={msg.tags or '-'} keys={','.join(msg.keys) or '-'} body={body_text(msg.body)}"
            )
    if not found:
        raise click.ClickException(f"no message with key {key!r} in topic {topic}")


message_group.add_command(trace_cmd)


@message_group.command("recall")
@namesrv_option
@click.option("--topic", "-t", required=True, help="the topic the timer message was sent to")
@click.option("--handle", "recall_handle", required=True,
              help="the recall handle its send printed (recall_handle=...)")
@click.option("--group", default=DEFAULT_PRODUCER_GROUP, show_default=True,
              help="producer group named in the request")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=5.0,
              show_default=True, help="seconds to wait for the broker")
@format_option
@handles_errors
def recall_cmd(namesrv: str, topic: str, recall_handle: str, group: str, timeout: float,
               fmt: str) -> None:
    """Cancel a timer message that has not been delivered yet (the broker needs
    recall_message_enable). A message whose time has come is refused (exit 1)."""
    from orbitmq.client import Producer

    with Producer(group, namesrv, send_timeout=timeout, credentials=cli_credentials(),
                  tls=cli_tls()) as producer:
        msg_id = producer.recall_message(topic, recall_handle.strip(), timeout=timeout)
    if fmt == "json":
        echo_json({"status": "RECALLED", "topic": topic, "msg_id": msg_id})
    else:
        click.echo(f"RECALLED msg_id={msg_id} topic={topic}")
