"""The lock of a store directory: one process opens a store at a time.

``DIR/lock`` is locked (FileOps.lock_exclusive: ``flock`` on the real disk) by the process that has
the store open, and holds its pid for the message of whoever is refused. MessageStore takes it
before it reads or writes anything else of the store and releases it last.
"""

from __future__ import annotations

import os

from orbitmq.store.file_ops import FileLock, FileOps, OsFileOps, StoreLockedError

__all__ = ["lock_store", "check_store_free", "LOCK_FILE"]

LOCK_FILE = "lock"


def check_store_free(store_path: str, file_ops: FileOps | None = None) -> None:
    """Raise StoreLockedError when another process has the store open: a check for commands
    that start other servers first (``start`` takes the lock for real). A store directory that
    does not exist yet is free.

    Raises:
        StoreLockedError: the message names the directory and the holder's pid.
    """
    fo = file_ops if file_ops is not None else OsFileOps()
    if fo.exists(store_path):
        lock_store(fo, store_path).release()


def lock_store(file_ops: FileOps, store_path: str) -> FileLock:
    """The exclusive lock of a store directory (its ``lock`` file), held until released.

    Raises:
        StoreLockedError: another process holds it; the message names the directory and pid.
        StoreError: the lock file cannot be created or locked.
    """
    try:
        return file_ops.lock_exclusive(os.path.join(store_path, LOCK_FILE))
    except StoreLockedError as e:
        who = f"process {e.holder_pid}" if e.holder_pid is not None else "another process"
        raise StoreLockedError(
            e.path, e.holder_pid,
            f"store directory {os.path.abspath(store_path)} is in use by {who}: only one "
            "process may open a store (stop it, or use another store directory)",
        ) from None
