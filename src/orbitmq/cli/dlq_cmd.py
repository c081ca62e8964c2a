"""``orbitmq dlq list|resend``: a consumer group's dead letters.

A message its consumers failed more than the group's ``retry_max_times`` ends in ``%DLQ%{group}``,
which no consumer reads by itself. ``list`` shows what is there (read without consuming) and
whether each was resent; ``resend`` sends dead letters back to the group's own retry topic
``%RETRY%{group}``, as a retry does (RETRY_TOPIC = the topic they were first sent to, reconsume
times 0), with their body, tags, keys and properties: that group's consumers get them again, with
the same message id and under their original topic; no other group of that topic does.

A resent dead letter stays in the DLQ (RocketMQ never deletes a message), and the broker remembers
it was resent (a resend mark per DLQ queue, kept as the offsets of the reserved group
``%RESENT%{group}``; see orbitmq.client.admin.dead_letters): ``resend --all`` sends only what no earlier
resend sent, so running it twice sends nothing twice; ``--force`` sends again on purpose.
"""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    body_text,
    cli_credentials,
    cli_tls,
    echo_json,
    format_ms,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)
from orbitmq.cli.consume_cmd import message_json
from orbitmq.client import original_topic

__all__ = ["dlq_group"]

ADMIN_TIMEOUT_S = 5.0
BODY_PREVIEW_CHARS = 40
LIST_MAX_DEFAULT = 1000


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def _preview(body: bytes) -> str:
    text = body_text(body)
    return text if len(text) <= BODY_PREVIEW_CHARS else text[: BODY_PREVIEW_CHARS - 3] + "..."


@click.group("dlq")
def dlq_group() -> None:
    """List a consumer group's dead letters, send them back to that group."""


@dlq_group.command("list")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--max", "max_num", type=click.IntRange(1, 1_000_000), default=LIST_MAX_DEFAULT,
              show_default=True, help="at most this many messages")
@format_option
@handles_errors
def list_cmd(namesrv: str, group: str, max_num: int, fmt: str) -> None:
    """The messages in %DLQ%GROUP, oldest first: message id, original topic, reconsume times,
    store time, whether a resend sent it back already, and the start of the body."""
    with _admin(namesrv) as admin:
        found = admin.dead_letter_entries(group, max_num)
    if fmt == "json":
        for dead in found:
            echo_json({**message_json(dead.message), "original_topic": original_topic(dead.message),
                       "resent": dead.resent})
        return
    if not found:
        click.echo(f"no dead letters for group {group}")
        return
    rows = [(d.message.msg_id, original_topic(d.message) or "-", str(d.message.reconsume_times),
             format_ms(d.message.store_timestamp), "yes" if d.resent else "no",
             _preview(d.message.body)) for d in found]
    click.echo(table(("MSG_ID", "ORIGINAL_TOPIC", "RECONSUME_TIMES", "STORED", "RESENT", "BODY"),
                     rows))
    resent = sum(d.resent for d in found)
    click.echo(f"total: {len(found)} ({resent} resent)")


@dlq_group.command("resend")
@namesrv_option
@click.option("--group", "-g", required=True)
@click.option("--msg-id", "msg_id", help="the dead letter's message id (as `dlq list` shows it), "
              "offset message id or original message id")
@click.option("--all", "resend_all", is_flag=True,
              help="every dead letter of the group that no earlier resend sent")
@click.option("--force", is_flag=True, help="also send those an earlier resend sent already")
@click.option("--max", "max_num", type=click.IntRange(1, 1_000_000), default=LIST_MAX_DEFAULT,
              show_default=True, help="at most this many messages")
@handles_errors
def resend_cmd(namesrv: str, group: str, msg_id: str | None, resend_all: bool, force: bool,
               max_num: int) -> None:
    """Send dead letters of GROUP back to GROUP only (its retry topic %RETRY%GROUP, never the
    original topic, which other groups read too), each once (--force: again)."""
    if bool(msg_id) == resend_all:
        raise click.UsageError("give exactly one of --msg-id ID and --all")
    with _admin(namesrv) as admin:
        report = admin.resend_report(group, msg_id=msg_id, force=force, max_messages=max_num)
    for item in report.items:
        msg = item.dead_letter.message
        if item.result is None:
            click.echo(f"skipped {msg.msg_id}: {item.skipped}", err=True)
            continue
        click.echo(f"resent {msg.msg_id} to {item.topic} (original topic "
                   f"{original_topic(msg)}): queue {item.result.queue.queue_id} "
                   f"offset {item.result.queue_offset} status {item.result.status.name}")
    counts = _counts(report, max_num)
    if not report.items:
        click.echo(f"no dead letters to resend for group {group}" +
                   (f"; {counts}" if counts else ""))
        return
    click.echo(f"resent {report.sent} of {len(report.items)} dead letter(s) read"
               + (f"; {counts}" if counts else ""), err=True)
    if report.skipped_no_topic:
        raise click.ClickException(f"{report.skipped_no_topic} of {len(report.items)} dead letters "
                                   "have no original topic and cannot be resent")


def _counts(report: Any, max_num: int) -> str:
    """What a resend passed over or did not reach, as one clause ("" when nothing)."""
    parts = []
    if report.skipped_resent_before:
        parts.append(f"skipped {report.skipped_resent_before} resent before (--force sends "
                     "them again)")
    if report.skipped_no_topic:
        parts.append(f"skipped {report.skipped_no_topic} with no original topic")
    if report.left:
        parts.append(f"{report.left} not reached (--max {max_num}): run it again")
    return "; ".join(parts)
