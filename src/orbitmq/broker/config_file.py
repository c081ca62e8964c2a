"""Atomic JSON files under ``STORE/config/``: the broker's tables that must survive a restart.

A table is written to a temporary file, fsynced, renamed over the old one and the directory fsynced,
so a crash leaves either the old or the new content, never a torn mix. Readers accept what Java's
fastjson writes (bare numeric keys) through ``loads_lenient``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.protocol.bodies import loads_lenient

__all__ = ["config_path", "write_atomic", "read_json"]

log = logging.getLogger(__name__)


def config_path(store_path: str, name: str) -> str:
    """``STORE/config/<name>``, the place RocketMQ keeps its broker tables."""
    return os.path.join(store_path, "config", name)


def write_atomic(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash at any point leaves a whole file."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
