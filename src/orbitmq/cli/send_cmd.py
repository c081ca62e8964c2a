"""``orbitmq send``: send messages from the command line, one receipt line per message."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import IO, Any

import click

from orbitmq.cli.common import (
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    parse_keys,
    parse_properties,
    value_callback,
)

__all__ = ["send_cmd", "read_lines", "receipt_line"]

DEFAULT_PRODUCER_GROUP = "orbitmq-cli-producer"


def read_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Bodies from ``stream``: one per line, line endings removed, blank lines skipped (the
    broker refuses empty bodies, and a trailing newline is not meant as a message)."""
    for line in stream:
        body = line.rstrip(b"\r\n")
        if body:
            yield body


def receipt_line(result: Any) -> str:
    """One line for a SendResult: status, ids, queue, offset."""
    mq = result.queue
    return (
        f"{result.status.value} msg_id={result.msg_id} offset_msg_id={result.offset_msg_id} "
        f"queue={mq.broker_name}:{mq.queue_id} offset={result.queue_offset}"
    )


def receipt_json(result: Any) -> dict[str, Any]:
    mq = result.queue
    return {
        "status": result.status.value,
        "msg_id": result.msg_id,
        "offset_msg_id": result.offset_msg_id,
        "topic": mq.topic,
        "broker": mq.broker_name,
        "queue_id": mq.queue_id,
        "queue_offset": result.queue_offset,
    }


@click.command("send")
@namesrv_option
@click.option("--topic", "-t", required=True, help="topic to send to (created on first use when "
              "the broker allows auto-creation)")
@click.option("--tags", help="the message's tag (what consumers filter on)")
@click.option("--keys", help="comma-separated keys, indexed for `orbitmq message query`")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              callback=value_callback(parse_properties),
              help="a user property; repeat for several")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="send each body this many times")
@click.option("--group", default=DEFAULT_PRODUCER_GROUP, show_default=True, help="producer group")
@click.option("--send-timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="seconds for one send, retries included")
@format_option
@click.argument("body")
@handles_errors
def send_cmd(
    namesrv: str,
    topic: str,
    tags: str | None,
    keys: str | None,
    properties: dict[str, str] | tuple[()],
    count: int,
    group: str,
    send_timeout: float,
    fmt: str,
    body: str,
) -> None:
    """Send BODY to a topic, or with BODY '-', one message per line of standard input.

    Prints one line per message: the send status, its message id (what consumers see), the
    broker's offset message id, the queue and the offset in that queue.
    """
    from orbitmq.client import Producer
    from orbitmq.protocol.message import Message

    props = dict(properties)
    key_list = parse_keys(keys)
    if body == "-":
        bodies: Iterator[bytes] = read_lines(sys.stdin.buffer)
    else:
        bodies = iter([body.encode("utf-8", errors="surrogateescape")])
    sent = 0
    with Producer(group, namesrv, send_timeout=send_timeout) as producer:
        for payload in bodies:
            for _ in range(count):
                msg = Message(topic, payload, tags=tags or None, keys=key_list or None,
                              properties=dict(props))
                result = producer.send(msg)
                sent += 1
                if fmt == "json":
                    echo_json(receipt_json(result))
                else:
                    click.echo(receipt_line(result))
    if sent == 0:
        raise click.ClickException("nothing to send: standard input had no non-blank line")
