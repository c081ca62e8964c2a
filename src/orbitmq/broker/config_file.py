"""Atomic JSON files under ``STORE/config/``, and the protocol of the broker's saved tables.

A JSON file is written to a temporary file, fsynced, renamed over the old one and the directory
fsynced, so a crash leaves either the old or the new content, never a torn mix (the settings
changed at runtime, the timer's checkpoint). Readers accept what Java's fastjson writes (bare
numeric keys) through ``loads_lenient``; the tables a broker before the metadata store kept here
(topics.json, consumerOffset.json...) are read once, to be imported (tables/metadata_table.py).

The broker's tables (topics, groups, consumer and delay offsets) are saved in the metadata store
(store/metadata_db.py) through tables/metadata_table.MetadataTable: a save that fails is logged
as an error, leaves the changes marked for the next periodic round, and never raises, so one
table that cannot be saved never keeps the others from being saved (``save_all`` at stop).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.files import replace_file
from orbitmq.protocol.bodies import loads_lenient
from orbitmq.store.file_mode import file_mode_in, make_dirs

__all__ = ["config_path", "write_atomic", "read_json", "SavedTable", "save_all"]

def config_path(store_path: str, name: str) -> str:
    """``STORE/config/<name>``, the place RocketMQ keeps its broker tables."""
    return os.path.join(store_path, "config", name)


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash at any point leaves a whole file."""
    directory = os.path.dirname(path) or "."
    make_dirs(directory)  # the store's modes (store/file_mode.py): 0700 and 0600 by default
    replace_file(path, data, file_mode_in(directory))


def read_json(path: str) -> Any | None:
    """The parsed content of ``path``; None when the file does not exist.

    Raises:
        StoreError: the file exists but is not JSON. Starting with an empty table instead would
            silently lose offsets or topics, so the broker refuses to start and says which file.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    try:
        return loads_lenient(raw)
    except RemoteProtocolError as e:
        raise StoreError(f"broker table {path} is not valid JSON: {e}") from None


class SavedTable(Protocol):
    """What the controller saves periodically and at stop (tables/metadata_table.MetadataTable)."""

    what: str
    path: str
    failures: int

    def save(self, *, force: bool = False) -> bool: ...


def save_all(tables: Sequence[SavedTable], *, force: bool = False) -> list[SavedTable]:
    """Save every table (each failure logged by its TableFile); the ones still unsaved."""
    return [table for table in tables if not table.save(force=force)]
