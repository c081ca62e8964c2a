"""A broker table saved change by change in the metadata store (store/metadata_db.py).

A manager keeps its table in memory and marks the keys it changed; :meth:`MetadataTable.save`
writes the rows of the marked keys (their values now, or a delete for a key that is gone) in one
transaction, so a change costs the same whatever the size of the table. The semantics are those
the JSON files had: a save that fails is logged as an error, its keys stay marked for the next
round, and it never raises, so one table that cannot be saved never keeps another from being
saved.

:func:`migrate_json` imports a table's JSON file written by a broker before the metadata store,
once: its rows are written, then the file is renamed ``*.json.migrated`` so that the next start
does not import it again. A crash between the two imports it again at the next start, which
writes the same rows: the import is idempotent.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from orbitmq.broker.config_file import config_path, read_json
from orbitmq.config import BrokerConfig
from orbitmq.config.store_config import FlushDiskType
from orbitmq.errors import StoreError
from orbitmq.files import fsync_dir
from orbitmq.store.metadata_db import METADATA_DB_FILE, MetadataDB, Row

__all__ = ["MetadataTable", "migrate_json", "metadata_db_for", "MIGRATED_SUFFIX"]

log = logging.getLogger(__name__)

MIGRATED_SUFFIX = ".migrated"  # topics.json -> topics.json.migrated once imported

Key = tuple[str, int]  # (key, sub) of a row


def metadata_db_for(config: BrokerConfig) -> MetadataDB:
    """The broker's metadata store (``STORE/config/metadata.db``), not yet opened; its commits
    fsynced under SYNC_FLUSH, as the commit log's (store/metadata_db.py, Durability)."""
    return MetadataDB(config_path(config.store.store_path, METADATA_DB_FILE),
                      sync_full=config.store.flush_disk_type is FlushDiskType.SYNC_FLUSH)


class MetadataTable:
    """The keys of one table changed since they were last saved, and how to save them.

    Args:
        db: the metadata store (opened by the table's ``load``).
        what: the table's name in log lines ("topics", "consumer offsets"...).
        rows: the rows that save the given keys as the table holds them now (a delete for a
            key that is gone), plus any row that goes with them (the table's data version);
            called on the saving thread.
    """

    def __init__(self, db: MetadataDB, what: str,
                 rows: Callable[[list[Key]], list[Row]]) -> None:
        self.db = db
        self.path = db.path
        self.what = what
        self._rows = rows
        self._pending: set[Key] = set()
        self._touched = False  # rows that go with any save (a data version) are due
        self._pending_lock = threading.Lock()  # marks from the loop, takes from savers
        self._save_lock = threading.Lock()  # one save at a time: a later save waits for it
        self.failures = 0  # saves that failed in a row (0 once one succeeds)

    @property
    def dirty(self) -> bool:
        """True while some change is not in the store yet."""
        return bool(self._pending) or self._touched

    def mark(self, key: str, sub: int = 0) -> None:
        """``(key, sub)`` changed (or was removed) in memory."""
        with self._pending_lock:
            self._pending.add((key, sub))

    def mark_many(self, keys: Iterable[Key]) -> None:
        with self._pending_lock:
            self._pending.update(keys)

    def touch(self) -> None:
        """Save the rows that go with every save (the data version) even if no key changed."""
        with self._pending_lock:
            self._touched = True

    def save(self, *, force: bool = False) -> bool:
        """Write the changed rows in one transaction; True when every change made before the
        call is in the store (also when a save running on another thread wrote it: this one
        waits for it). ``force`` is accepted for the controller's calls and changes nothing:
        what is not marked is already stored. A failure is logged and the keys stay marked."""
        del force
        with self._save_lock:
            with self._pending_lock:
                taken, self._pending = self._pending, set()
                touched, self._touched = self._touched, False
            if not (taken or touched):
                return True
            try:
                self.db.write(self._rows(sorted(taken)))
            except (StoreError, TypeError, ValueError) as e:
                with self._pending_lock:
                    self._pending.update(taken)
                    self._touched = self._touched or touched
                self.failures += 1
                log.error("saving a broker table failed table=%s path=%s attempt=%d rows=%d: %s; "
                          "will retry", self.what, self.path, self.failures, len(taken), e,
                          exc_info=e if not isinstance(e, StoreError) else None)
                return False
            if self.failures:
                log.warning("table saved again after %d failed attempts table=%s path=%s",
                            self.failures, self.what, self.path)
            self.failures = 0
            return True


def migrate_json(path: str, table: MetadataTable, apply: Callable[[Any], None]) -> bool:
    """Import the JSON file ``path`` (a broker's table before the metadata store) once.

    ``apply`` parses the file's content into the manager's memory and marks every key it holds
    (raising StoreError when it cannot). The rows are saved, then the file is renamed aside.
    Returns True when a file was imported.

    Raises:
        StoreError: the file is not JSON, its content is refused, or the rows could not be
            saved: the broker does not start (starting without them would lose topics or
            offsets), and the file stays where it is for the next attempt.
    """
    data = read_json(path)  # StoreError naming the file when it is not JSON
    if data is None and not os.path.exists(path):
        return False
    if data is not None:
        apply(data)
        if not table.save():
            raise StoreError(f"{path}: its rows could not be written to the metadata store "
                             f"{table.path} (logged above); the file is kept")
    os.replace(path, path + MIGRATED_SUFFIX)
    fsync_dir(os.path.dirname(path) or ".")
    log.info("broker table imported into the metadata store table=%s from=%s renamed=%s",
             table.what, path, path + MIGRATED_SUFFIX)
    return True
