"""``orbitmq send``: send messages from the command line, one receipt line per message.

What is sent: BODY (the argument); with ``-`` or ``--file PATH``, the whole of standard input or
of the file as ONE message, byte for byte (binary-safe: a newline byte is part of the body); with
``--lines``, one message per non-blank line of that text instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import click

from orbitmq.cli.common import (
    cli_credentials,
    cli_tls,
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    parse_keys,
    parse_properties,
    value_callback,
)
from orbitmq.protocol.topic_attributes import PRIORITY_MAX

__all__ = ["send_cmd", "read_lines", "read_bodies", "receipt_line"]

DEFAULT_PRODUCER_GROUP = "orbitmq-cli-producer"


def read_lines(stream: Iterable[bytes]) -> Iterator[bytes]:
    """Bodies from ``stream``: one per line, line endings removed, blank lines skipped (the
    broker refuses empty bodies, and a trailing newline is not meant as a message)."""
    for line in stream:
        body = line.rstrip(b"\r\n")
        if body:
            yield body


def read_bodies(body: str | None, file: str | None, lines: bool,
                stdin: IO[bytes]) -> tuple[Iterator[bytes], str]:
    """The bodies to send and where they come from (for the "nothing to send" message).

    Raises:
        click.UsageError: both or neither of BODY and --file.
        click.FileError: the file cannot be read.
    """
    if (body is None) == (file is None):
        raise click.UsageError("give the body as BODY (or '-' for standard input) or --file PATH")
    source = file if file is not None else body
    assert source is not None
    if source == "-":
        stream, where = stdin, "standard input"
    elif file is not None:
        try:
            stream, where = Path(file).open("rb"), file  # noqa: SIM115 - read to the end below
        except OSError as e:
            raise click.FileError(file, e.strerror) from None
    else:
        raw = source.encode("utf-8", errors="surrogateescape")
        return read_lines(raw.splitlines()) if lines else iter([raw]), "BODY"
    if lines:
        return read_lines(stream), where
    data = stream.read()
    if stream is not stdin:
        stream.close()
    return (iter([data]) if data else iter(())), where


def parse_priority_option(text: str) -> int:
    """``--priority``: an integer 0..PRIORITY_MAX (ValueError naming the range otherwise)."""
    value = text.strip()
    if not (value.isascii() and value.isdigit()) or int(value) > PRIORITY_MAX:
        raise ValueError(f"{text!r} is not a priority 0..{PRIORITY_MAX} (higher first)")
    return int(value)


def receipt_line(result: Any) -> str:
    """One line for a SendResult: status, ids, queue, offset."""
    mq = result.queue
    return (
        f"{result.status.value} msg_id={result.msg_id} offset_msg_id={result.offset_msg_id} "
        f"queue={mq.broker_name}:{mq.queue_id} offset={result.queue_offset}"
    ) + (f" recall_handle={result.recall_handle}" if result.recall_handle else "")


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
        **({"recall_handle": result.recall_handle} if result.recall_handle else {}),
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
@click.option("--priority", metavar="N", callback=value_callback(parse_priority_option),
              help=f"the message's priority, 0..{PRIORITY_MAX} (higher first), for a topic of "
                   "message.type PRIORITY")
@click.option("--lite-topic", help="the lite topic of a message to a LITE parent topic "
              "(created by its first message)")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True,
              help="send each body this many times")
@click.option("--group", default=DEFAULT_PRODUCER_GROUP, show_default=True, help="producer group")
@click.option("--namespace", default=None, help="the namespace the topic and group live in "
              "(stored as NAMESPACE%NAME; docs/rocketmq5.md \"Namespaces\")")
@click.option("--send-timeout", type=click.FloatRange(min=0, min_open=True), default=3.0,
              show_default=True, help="seconds for one send, retries included")
@click.option("--file", "file", metavar="PATH", help="send the file's bytes as one message "
              "('-': standard input)")
@click.option("--lines", is_flag=True, help="one message per non-blank line of the text "
              "(of BODY, the file or standard input) instead of one message")
@format_option
@click.argument("body", required=False)
@handles_errors
def send_cmd(
    namesrv: str,
    topic: str,
    tags: str | None,
    keys: str | None,
    properties: dict[str, str] | tuple[()],
    priority: int | None,
    lite_topic: str | None,
    count: int,
    group: str,
    namespace: str | None,
    send_timeout: float,
    file: str | None,
    lines: bool,
    fmt: str,
    body: str | None,
) -> None:
    """Send BODY to a topic as one message; BODY '-' sends all of standard input as one message
    (as --file PATH does a file's bytes), --lines one message per line.

    Prints one line per message: the send status, its message id (what consumers see), the
    broker's offset message id, the queue and the offset in that queue. Property names the
    system reserves (UNIQ_KEY, TAGS, KEYS, DELAY, ...) are refused. --priority N sends priority
    messages (a topic of message.type PRIORITY stores each in its priority's queue; another
    topic refuses them).
    """
    from orbitmq.client import Producer
    from orbitmq.protocol.message import Message

    props = dict(properties)
    key_list = parse_keys(keys)
    bodies, where = read_bodies(body, file, lines, sys.stdin.buffer)
    # Reserved property names are refused before anything connects (Message checks them).
    Message(topic, b"-", tags=tags or None, keys=key_list or None, properties=dict(props),
            priority=priority, lite_topic=lite_topic)
    sent = 0
    with Producer(group, namesrv, send_timeout=send_timeout, namespace=namespace,
                  credentials=cli_credentials(), tls=cli_tls()) as producer:
        for payload in bodies:
            for _ in range(count):
                msg = Message(topic, payload, tags=tags or None, keys=key_list or None,
                              properties=dict(props), priority=priority, lite_topic=lite_topic)
                result = producer.send(msg)
                sent += 1
                if fmt == "json":
                    echo_json(receipt_json(result))
                else:
                    click.echo(receipt_line(result))
    if sent == 0:
        what = "no non-blank line" if lines else "nothing (an empty body cannot be sent)"
        raise click.ClickException(f"nothing to send: {where} had {what}")
