"""``orbitmq outbox init|status|retry|relay``: look after a transactional outbox table.

``relay`` is the relay as a process of its own (run several: they never send a row twice at
once); ``status`` shows what waits and why; ``retry`` makes rows due now (also rows that gave up
after ``--max-attempts``).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
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
    preview,
    table,
)

__all__ = ["outbox_group", "db_option", "DB_ENV", "require_table"]

DB_ENV = "ORBITMQ_DB"
ERROR_PREVIEW_CHARS = 60


def db_option(func: Any) -> Any:
    """``--db URL`` (sqlite:///path or postgresql://...), from ORBITMQ_DB when not given."""
    return click.option("--db", "db_url", required=True, envvar=DB_ENV, show_envvar=True,
                        metavar="URL", help="the database: sqlite:///PATH or postgresql://...")(func)


def require_table(db_url: str, table_name: str, hint: str) -> None:
    """Refuse, in one line, a SQLite database file or table that does not exist, before
    anything opens it: opening would create an empty file (a typo in --db must not leave one
    behind). PostgreSQL databases are not created by connecting; their errors pass through.

    Raises:
        click.ClickException: no such file, or no such table in it.
    """
    import sqlite3

    from orbitmq.reliable.db import Dialect, parse_url

    dialect, target = parse_url(db_url)
    if dialect is not Dialect.SQLITE:
        return
    path = Path(target)
    if not path.is_file():
        raise click.ClickException(f"no database file {target}: check --db ({hint})")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            found = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                 (table_name,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        raise click.ClickException(f"cannot read database {target}: {e}") from None
    if found is None:
        raise click.ClickException(f"no table {table_name} in {target} ({hint})")


def table_option(default: str) -> Any:
    return click.option("--table", "table_name", default=default, show_default=True, help="the table's name")


@click.group("outbox")
def outbox_group() -> None:
    """The transactional outbox: create, inspect, retry, relay."""


@outbox_group.command("init")
@db_option
@table_option("orbitmq_outbox")
@handles_errors
def init_cmd(db_url: str, table_name: str) -> None:
    """Create the outbox table if it does not exist."""
    from orbitmq.reliable import Database, Outbox

    with Database(db_url) as db, db.transaction() as handle:
        Outbox(table_name).create_table(handle)
    click.echo(f"outbox table {table_name} ready")


@outbox_group.command("status")
@db_option
@table_option("orbitmq_outbox")
@click.option("--limit", type=click.IntRange(0, 100_000), default=20, show_default=True,
              help="show at most this many unsent rows")
@format_option
@handles_errors
def status_cmd(db_url: str, table_name: str, limit: int, fmt: str) -> None:
    """Rows per status, then the oldest unsent rows with their attempts and last error."""
    from orbitmq.reliable import Database, Outbox

    require_table(db_url, table_name, "`orbitmq outbox init` creates it")
    outbox = Outbox(table_name)
    with Database(db_url) as db:
        counts = outbox.counts(db.handle())
        unsent = outbox.unsent(db.handle(), limit) if limit else []
    if fmt == "json":
        echo_json({"counts": {s.name.lower(): n for s, n in counts.items()},
                   "unsent": [{"id": r.id, "topic": r.topic, "keys": r.keys, "status": r.status.name,
                               "attempts": r.attempts, "next_attempt_at": r.next_attempt_at,
                               "last_error": r.last_error} for r in unsent]})
        return
    click.echo("  ".join(f"{s.name.lower()}: {n}" for s, n in counts.items()))
    if unsent:
        rows = [(str(r.id), r.topic, r.keys or "-", r.status.name, str(r.attempts),
                 format_ms(r.next_attempt_at), preview(r.last_error, ERROR_PREVIEW_CHARS)) for r in unsent]
        click.echo(table(("ID", "TOPIC", "KEYS", "STATUS", "ATTEMPTS", "NEXT_ATTEMPT", "LAST_ERROR"),
                         rows))


@outbox_group.command("retry")
@db_option
@table_option("orbitmq_outbox")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "retry_all", is_flag=True, help="every unsent row")
@handles_errors
def retry_cmd(db_url: str, table_name: str, ids: tuple[int, ...], retry_all: bool) -> None:
    """Make unsent rows (IDS, or --all) due now, with a fresh attempt count."""
    from orbitmq.reliable import Database, Outbox

    if bool(ids) == retry_all:
        raise click.UsageError("give row ids or --all")
    require_table(db_url, table_name, "`orbitmq outbox init` creates it")
    with Database(db_url) as db, db.transaction() as handle:
        changed = Outbox(table_name).retry(handle, None if retry_all else list(ids))
    click.echo(f"{changed} row(s) due now")


@outbox_group.command("relay")
@db_option
@table_option("orbitmq_outbox")
@namesrv_option
@click.option("--group", default="orbitmq-outbox-relay", show_default=True,
              help="the producer group")
@click.option("--transactional", is_flag=True,
              help="send as transactional messages (no duplicate after a relay crash)")
@click.option("--batch-size", type=click.IntRange(1, 10_000), default=100, show_default=True)
@click.option("--poll-interval", type=click.FloatRange(0.01), default=0.5, show_default=True,
              help="seconds between looks at an idle table")
@click.option("--lease", type=click.FloatRange(1), default=30.0, show_default=True,
              help="seconds a claim on a row holds")
@click.option("--max-attempts", type=click.IntRange(1), default=None,
              help="give a row up (FAILED) after this many failed sends [default: never]")
@click.option("--backoff-base", type=click.FloatRange(0.001), default=1.0, show_default=True)
@click.option("--backoff-max", type=click.FloatRange(0.001), default=60.0, show_default=True)
@handles_errors
def relay_cmd(db_url: str, table_name: str, namesrv: str, group: str, transactional: bool,
              batch_size: int, poll_interval: float, lease: float, max_attempts: int | None,
              backoff_base: float, backoff_max: float) -> None:
    """Send the outbox's rows until interrupted (Ctrl-C or SIGTERM)."""
    from orbitmq.reliable import Outbox, OutboxRelay, RelayConfig

    config = RelayConfig(batch_size_max=batch_size, poll_interval=poll_interval, lease=lease,
                         max_attempts=max_attempts, backoff_base=backoff_base,
                         backoff_max=max(backoff_max, backoff_base), send_timeout=lease / 3)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    relay = OutboxRelay(db_url, namesrv=namesrv, group=group, transactional=transactional,
                        outbox=Outbox(table_name), config=config, credentials=cli_credentials(), tls=cli_tls())
    relay.start()
    click.echo(f"orbitmq outbox relay started owner={relay.owner} table={table_name}", err=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        relay.stop()
        click.echo(f"orbitmq outbox relay stopped sent={relay.sent_total} "
                   f"failed={relay.failed_total}", err=True)
