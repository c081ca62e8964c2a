"""``orbitmq transaction list``: transactions whose half message waits for a verdict."""

from __future__ import annotations

from typing import Any

import click

from orbitmq.cli.common import (
    cli_credentials,
    cli_tls,
    echo_json,
    format_option,
    handles_errors,
    namesrv_option,
    table,
)

__all__ = ["transaction_group"]

ADMIN_TIMEOUT_S = 5.0


def _admin(namesrv: str) -> Any:
    from orbitmq.client import Admin

    return Admin(namesrv, timeout=ADMIN_TIMEOUT_S, credentials=cli_credentials(), tls=cli_tls())


def format_age(ms: int) -> str:
    """An age for people: 850ms, 12.3s, 4m05s, 2h07m."""
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


@click.group("transaction")
def transaction_group() -> None:
    """Inspect transactional messages."""


@transaction_group.command("list")
@namesrv_option
@click.option("--limit", type=click.IntRange(1, 100_000), default=1000, show_default=True,
              help="at most this many per broker")
@format_option
@handles_errors
def list_cmd(namesrv: str, limit: int, fmt: str) -> None:
    """Unresolved transactions (half messages neither committed, rolled back nor discarded), oldest
    first, with their age and how many times the broker checked their producer group."""
    with _admin(namesrv) as admin:
        pending = admin.list_transactions(limit)
    if fmt == "json":
        for t in pending.transactions:
            echo_json({"broker": t.broker_name, "topic": t.topic, "queue_id": t.queue_id,
                       "msg_id": t.msg_id, "transaction_id": t.transaction_id,
                       "offset_msg_id": t.offset_msg_id, "producer_group": t.producer_group,
                       "tags": t.tags, "keys": t.keys, "born_timestamp": t.born_timestamp,
                       "age_ms": t.age_ms, "check_times": t.check_times})
        return
    rows = [(t.topic, t.msg_id, t.producer_group, format_age(t.age_ms), str(t.check_times),
             t.broker_name, t.keys or "-") for t in pending.transactions]
    click.echo(table(("TOPIC", "MSG_ID", "PRODUCER_GROUP", "AGE", "CHECKS", "BROKER", "KEYS"), rows))
    more = " (lists cut at --limit: there are more)" if pending.truncated else ""
    click.echo(f"{len(rows)} unresolved transaction(s){more}")
