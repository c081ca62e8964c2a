"""``orbitmq dlq list|resend``: a consumer group's dead letters.

A message its consumers failed more than the group's ``retry_max_times`` ends in ``%DLQ%{group}``,
which no consumer reads by itself. ``list`` shows what is there (read without consuming);
``resend`` sends dead letters back to the topic they were first sent to (their RETRY_TOPIC
property), with their body, tags, keys and properties, minus the broker's retry bookkeeping: the
group's consumers get them again as new messages with the same message id. A resent dead letter
stays in the DLQ (RocketMQ never deletes a message): ``--msg-id`` picks which one to resend.
"""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    body_text,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)
from orbitmq.cli.consume_cmd import message_json

__all__ = ["dlq_group"]

ADMIN_TIMEOUT_S = 5.0
RESEND_PRODUCER_GROUP = "orbitmq-dlq-resend"
BODY_PREVIEW_CHARS = 40
LIST_MAX_DEFAULT = 1000


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S)


def _preview(body: bytes) -> str:
    text = body_text(body)
    return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 3] + "..."


def _matches(msg: Any, msg_id: str) -> bool:
    from orbitmq.protocol.message import PropertyKey

    return msg_id in (msg.msg_id, msg.offset_msg_id, msg.properties.get(PropertyKey.ORIGIN_MESSAGE_ID))


@click.group("dlq")
def dlq_group() -> None:
    """List a consumer group's dead letters, send them back to their topic."""


@dlq_group.command("list")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--max", "max_num", type=click.IntRange(1, 1_000_000), default=LIST_MAX_DEFAULT,
              show_default=True, help="at most this many messages")
@format_option
@handles_errors
def list_cmd(namesrv: str, group: str, max_num: int, fmt: str) -> None:
    """The messages in %DLQ%GROUP, oldest first: message id, original topic, reconsume times,
    store time and the start of the body."""
    from orbitmq.client.group_admin import original_topic

    with _admin(namesrv) as admin:
        found = admin.dead_letters(group, max_num)
    if fmt == "json":
        for msg in found:
            echo_json({**message_json(msg), "original_topic": original_topic(msg)})
        return
    if not found:
        click.echo(f"no dead letters for group {group}")
        return
    rows = [(msg.msg_id, original_topic(msg) or "-", str(msg.reconsume_times),
             format_ms(msg.store_timestamp), _preview(msg.body)) for msg in found]
    click.echo(table(("MSG_ID", "ORIGINAL_TOPIC", "RECONSUME_TIMES", "STORED", "BODY"), rows))
    click.echo(f"total: {len(found)}")


@dlq_group.command("resend")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--msg-id", "msg_id", help="the dead letter's message id (as `dlq list` shows it), "
              "offset message id or original message id")
@click.option("--all", "resend_all", is_flag=True, help="every dead letter of the group")
@click.option("--max", "max_num", type=click.IntRange(1, 1_000_000), default=LIST_MAX_DEFAULT,
              show_default=True, help="with --all: at most this many messages")
@handles_errors
def resend_cmd(namesrv: str, group: str, msg_id: str | None, resend_all: bool, max_num: int) -> None:
    """Send dead letters of GROUP back to their original topic."""
    if bool(msg_id) == resend_all:
        raise click.UsageError("give exactly one of --msg-id ID and --all")
    with _admin(namesrv) as admin:
        found = admin.dead_letters(group, max_num)
    chosen = found if resend_all else [m for m in found if _matches(m, msg_id or "")]
    if msg_id and not chosen:
        raise click.ClickException(f"no dead letter {msg_id} for group {group}")
    if not chosen:
        click.echo(f"no dead letters for group {group}")
        return
    _resend(namesrv, chosen)


def _resend(namesrv: str, messages: list[Any]) -> None:
    """Send each message to its original topic; one line per message, failures at the end."""
    from orbitmq import Message, Producer
    from orbitmq.client.group_admin import original_topic, resend_properties

    failures = 0
    with Producer(RESEND_PRODUCER_GROUP, namesrv=namesrv) as producer:
        for msg in messages:
            topic = original_topic(msg)
            if topic is None:
                click.echo(f"skipped {msg.msg_id}: no original topic (RETRY_TOPIC) recorded", err=True)
                failures += 1
                continue
            out = Message(topic, bytes(msg.body), tags=msg.tags, keys=list(msg.keys),
                          flag=msg.flag, properties=resend_properties(msg))
            result = producer.send(out)
            click.echo(f"resent {msg.msg_id} to {topic}: queue {result.queue.queue_id} "
                       f"offset {result.queue_offset} status {result.status.name}")
    if failures:
        raise click.ClickException(f"{failures} of {len(messages)} dead letters not resent")
