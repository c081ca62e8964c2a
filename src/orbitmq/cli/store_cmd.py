"""``orbitmq store info | truncate | export-metadata``: a broker's store, offline (docs/replication.md,
docs/store.md).

``export-metadata`` prints the metadata store's tables (topics, subscription groups, consumer
offsets: store/metadata_db.py) as JSON; it reads the database without writing, so it also runs
beside a running broker (SQLite's WAL lets a reader see the last committed state).

``truncate`` is the documented way out for a slave whose commit log holds bytes its master does
not have (promoted by hand, then demoted): the slave refuses to replicate, naming the command,
until its log is cut back to where the two logs agree. Nothing ever truncates a store on its
own. Both commands take the broker's settings (``--config broker.toml`` and the same flags as
``orbitmq broker``): the store's segment sizes must be the ones it was written with.
"""

from __future__ import annotations

import os
from typing import Any

import click

from orbitmq.cli.common import echo_json, format_option
from orbitmq.cli.config_options import build_config, config_options
from orbitmq.config import BrokerConfig
from orbitmq.errors import OrbitMQError

__all__ = ["store_group"]


@click.group("store")
def store_group() -> None:
    """A broker's store: what it holds, its metadata as JSON, and cutting its commit log back."""


def _config(config_path: str | None, params: dict[str, Any]) -> BrokerConfig:
    return build_config(BrokerConfig, params, toml_path=config_path)


@store_group.command("info")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@format_option
@config_options(BrokerConfig)
def store_info_cmd(config_path: str | None, fmt: str, **params: Any) -> None:
    """Where the commit log begins and ends and where its last message starts (the store is
    opened and closed: recovery runs if the broker did not stop cleanly)."""
    from orbitmq.store.message_store import MessageStore

    cfg = _config(config_path, params)
    store = MessageStore(cfg.store, run_threads=False)
    try:
        store.start()
    except (OrbitMQError, OSError) as e:
        raise click.ClickException(f"cannot open the store: {e}") from None
    try:
        tail = store.replica_tail()
        info = {"store": cfg.store.store_path, "min_offset": store.min_physical_offset(),
                "max_offset": store.max_physical_offset(),
                "last_message_offset": tail.offset if tail is not None else None,
                "queues": store.queue_count()}
    finally:
        store.shutdown()
    if fmt == "json":
        echo_json(info)
        return
    for key, value in info.items():
        click.echo(f"{key}: {value}")


@store_group.command("truncate")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@click.option("--offset", "offset", required=True, type=click.IntRange(min=0),
              help="the first commit log byte to drop (cut at the start of the entry holding "
                   "it); 0 empties the log")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@format_option
@config_options(BrokerConfig)
def store_truncate_cmd(config_path: str | None, offset: int, yes: bool, fmt: str,
                       **params: Any) -> None:
    """Cut the commit log of a stopped broker's store back to OFFSET, with its consume queues
    and index: for a slave whose log holds bytes its master does not have (see
    docs/replication.md). Messages past the cut are gone from this store."""
    from orbitmq.store.truncate import truncate_store

    cfg = _config(config_path, params)
    if not yes:
        click.confirm(f"Drop every message at or past offset {offset} of the store "
                      f"{cfg.store.store_path}?", abort=True)
    try:
        report = truncate_store(cfg.store, offset)
    except (OrbitMQError, OSError) as e:
        raise click.ClickException(f"cannot truncate: {e}") from None
    if fmt == "json":
        echo_json({"store": cfg.store.store_path, "asked": report.asked, "cut": report.cut,
                   "old_end": report.old_end, "new_end": report.new_end,
                   "messages_dropped": report.messages_dropped})
        return
    if report.cut >= report.old_end:
        click.echo(f"nothing to cut: the commit log ends at {report.old_end}")
        return
    click.echo(f"commit log cut at {report.cut} (asked {report.asked}): it ended at "
               f"{report.old_end}, ends at {report.new_end} now; {report.messages_dropped} "
               "messages dropped")


@store_group.command("export-metadata")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), help="TOML file")
@click.option("--table", "tables", multiple=True,
              type=click.Choice(["topics", "subscriptionGroups", "consumerOffsets", "delayOffsets"]),
              help="a table to print (repeatable); every table when none is given")
@click.option("--indent", type=click.IntRange(min=0, max=8), default=None,
              help="indent the JSON by this many spaces")
@config_options(BrokerConfig)
def store_export_metadata_cmd(config_path: str | None, tables: tuple[str, ...],
                              indent: int | None, **params: Any) -> None:
    """Print the broker's metadata store (STORE/config/metadata.db) as JSON: each table in the
    shape of the JSON file it replaced (topics.json, subscriptionGroup.json,
    consumerOffset.json, delayOffset.json), as RocketMQ's EXPORT_ROCKSDB_CONFIG_TO_JSON.
    Safe while the broker runs: the database is only read."""
    from orbitmq.store.metadata_db import METADATA_DB_FILE, MetadataDB, export_tables

    cfg = _config(config_path, params)
    path = os.path.join(cfg.store.store_path, "config", METADATA_DB_FILE)
    if not os.path.exists(path):
        raise click.ClickException(
            f"no metadata store at {path}: a broker creates it at its first start (and imports "
            "the JSON tables of an older broker then)")
    try:
        with MetadataDB(path, read_only=True) as db:
            exported = export_tables(db, tables or None)
    except OrbitMQError as e:
        raise click.ClickException(f"cannot read the metadata store: {e}") from None
    echo_json(exported, indent=indent)
