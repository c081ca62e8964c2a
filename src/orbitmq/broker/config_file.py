"""Atomic JSON files under ``STORE/config/``: the broker's tables that must survive a restart.

A table is written to a temporary file, fsynced, renamed over the old one and the directory fsynced,
so a crash leaves either the old or the new content, never a torn mix. Readers accept what Java's
fastjson writes (bare numeric keys) through ``loads_lenient``.

:class:`TableFile` is how every table is saved: a save that fails (a full disk, a bug that let an
unencodable value in) is logged as an error, leaves the table marked dirty so that the next
periodic round tries again, and never raises, so one table that cannot be saved never keeps the
others from being saved (``save_all`` at stop).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.files import replace_file
from orbitmq.protocol.bodies import loads_lenient
from orbitmq.store.file_mode import file_mode_in, make_dirs

__all__ = ["config_path", "write_atomic", "read_json", "TableFile", "SavedTable", "save_all"]

log = logging.getLogger(__name__)


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


class TableFile:
    """One table persisted as a JSON file: dirty tracking, one writer at a time, failures logged.

    Args:
        path: the file (``STORE/config/<name>``).
        encode: the table's current content as JSON bytes (called on the saving thread).
        what: the table's name in log lines ("consumer offsets", "topics"...).
    """

    def __init__(self, path: str, encode: Callable[[], bytes], what: str) -> None:
        self.path = path
        self.what = what
        self._encode = encode
        self._lock = threading.Lock()  # one writer of the file (periodic thread vs stop)
        self._dirty = False
        self.failures = 0  # saves that failed in a row (0 once one succeeds)

    @property
    def dirty(self) -> bool:
        """True while the file lags behind the table."""
        return self._dirty

    def mark_dirty(self) -> None:
        self._dirty = True

    def save(self, *, force: bool = False) -> bool:
        """Write the table if it changed since the last save (or ``force``).

        Returns True when the file holds the table as it was when this call read it. A failure
        is logged as an error (with the traceback when the content could not be encoded: that
        is a bug) and the table stays dirty for the next round; it never raises.
        """
        with self._lock:
            if not (self._dirty or force):
                return True
            self._dirty = False  # changes made while writing mark it dirty again
            try:
                write_atomic(self.path, self._encode())
            except OSError as e:
                self._failed(f"{e.strerror or e} ({type(e).__name__})", None)
                return False
            except (TypeError, ValueError) as e:  # orjson.JSONEncodeError is a TypeError
                self._failed(f"content cannot be encoded: {e}", e)
                return False
            if self.failures:
                log.warning("table saved again after %d failed attempts table=%s path=%s",
                            self.failures, self.what, self.path)
            self.failures = 0
            return True

    def _failed(self, why: str, exc: BaseException | None) -> None:
        self._dirty = True
        self.failures += 1
        log.error("saving a broker table failed table=%s path=%s attempt=%d: %s; will retry",
                  self.what, self.path, self.failures, why, exc_info=exc)


class SavedTable(Protocol):
    """What the controller saves periodically and at stop: a JSON :class:`TableFile`, or a
    table in the metadata store (tables/metadata_table.py)."""

    what: str
    path: str
    failures: int

    def save(self, *, force: bool = False) -> bool: ...


def save_all(tables: Sequence[SavedTable], *, force: bool = False) -> list[SavedTable]:
    """Save every table (each failure logged by its TableFile); the ones still unsaved."""
    return [table for table in tables if not table.save(force=force)]
