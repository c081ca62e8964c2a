"""``orbitmq consumelog list|retry``: the consume log of idempotent consumers.

``list --status parked`` shows the messages consumers gave up on after their maximum attempts
(acknowledged to the broker, kept for a person); ``retry ID`` makes such a row new again and,
unless ``--no-resend``, sends its message to the group's retry topic (``%RETRY%{group}``), so that
that group, and only it, consumes it once more.
"""

from __future__ import annotations

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
    preview,
    table,
)
from orbitmq.cli.outbox_cmd import db_option, require_table, table_option

__all__ = ["consumelog_group"]

STATUSES = ["new", "processing", "failed", "done", "parked"]
PREVIEW_CHARS = 50
RESEND_PRODUCER_GROUP = "orbitmq-consumelog-retry"


@click.group("consumelog")
def consumelog_group() -> None:
    """The consume log of idempotent consumers: list rows, retry parked ones."""


@consumelog_group.command("list")
@db_option
@table_option("orbitmq_consume_log")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="only rows in this state")
@click.option("--group", "-g", default=None, help="only this consumer group")
@click.option("--limit", type=click.IntRange(1, 1_000_000), default=100, show_default=True)
@format_option
@handles_errors
def list_cmd(db_url: str, table_name: str, status: str | None, group: str | None, limit: int,
             fmt: str) -> None:
    """Rows of the consume log, oldest first."""
    from orbitmq.reliable import ConsumeLog, ConsumeStatus

    require_table(db_url, table_name, "an idempotent consumer creates it on first use")
    store = ConsumeLog(db_url, table=table_name)
    try:
        wanted = ConsumeStatus[status.upper()] if status else None
        records = store.records(wanted, limit, group)
    finally:
        store.close()
    if fmt == "json":
        for r in records:
            echo_json({"id": r.id, "group": r.consumer_group, "topic": r.topic, "tags": r.tags,
                       "keys": r.keys, "status": r.status.name.lower(),
                       "consume_times": r.consume_times, "version": r.version,
                       "last_error": r.last_error, "msg_id": r.msg_id, "updated_at": r.updated_at})
        return
    if not records:
        click.echo("no rows")
        return
    rows = [(str(r.id), r.consumer_group, r.topic, r.tags or "-", r.keys, r.status.name.lower(),
             str(r.consume_times), format_ms(r.updated_at), preview(r.last_error, PREVIEW_CHARS))
            for r in records]
    click.echo(table(("ID", "GROUP", "TOPIC", "TAGS", "KEYS", "STATUS", "TIMES", "UPDATED",
                      "LAST_ERROR"), rows))


@consumelog_group.command("retry")
@click.argument("row_id", metavar="ID", type=int)
@db_option
@table_option("orbitmq_consume_log")
@namesrv_option
@click.option("--no-resend", is_flag=True,
              help="only make the row new; do not send the message again")
@handles_errors
def retry_cmd(row_id: int, db_url: str, table_name: str, namesrv: str, no_resend: bool) -> None:
    """Make failed or parked row ID new again and send its message to the group once more."""
    from orbitmq import Producer
    from orbitmq.reliable import ConsumeLog

    require_table(db_url, table_name, "an idempotent consumer creates it on first use")
    store = ConsumeLog(db_url, table=table_name)
    try:
        record = store.get(row_id)
        if record is None:
            raise click.ClickException(f"no consume log row {row_id}")
        message = None if no_resend else record.resend_message()  # check before changing it
        if store.reset(row_id) is None:
            raise click.ClickException(f"row {row_id} is {record.status.name.lower()}, "
                                       "not failed or parked")
    finally:
        store.close()
    click.echo(f"row {row_id} ({record.topic} {record.keys}) is new again")
    if message is None:
        return
    with Producer(RESEND_PRODUCER_GROUP, namesrv=namesrv,
                  credentials=cli_credentials(), tls=cli_tls()) as producer:
        result = producer.send(message)
    click.echo(f"resent to {message.topic} for {record.topic}: queue {result.queue.queue_id} "
               f"offset {result.queue_offset} body {body_text(record.body or b'')[:PREVIEW_CHARS]}")
