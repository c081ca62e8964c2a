"""Who may read a broker's files: the store root's mode, and what its files inherit from it.

Messages are a broker's most private data: by default the store's directories are 0700 and its
files 0600, whatever the process umask (which may take more away, never add). ``store_file_mode``
(e.g. ``"0640"`` for a backup group) says otherwise; directories get the execute bit wherever the
file mode has read.

One rule, so that no writer needs the config: :func:`protect_root` gives the store root its
directory mode when the store starts (an older store's 0755 root too, which then shields the
0644 files it already holds), every directory made under it takes its parent's mode
(:func:`make_dirs`), and every file its directory's mode less the execute bits
(:func:`file_mode_in`): commit log segments, consume queues, index files, the checkpoint, the
lock, config/*.json and the broker's other tables alike.

One exception, whatever ``store_file_mode`` says: the metadata store (config/metadata.db and its
-wal and -shm, which SQLite creates with the database file's mode) holds the users' secret keys,
so it is owner-only (:func:`make_private`), 0600 in a 0700 ``config`` directory, as the users
file of a name server is.
"""

from __future__ import annotations

import os
import stat

from orbitmq.config import file_mode_problem

__all__ = ["DEFAULT_FILE_MODE", "PRIVATE_FILE_MODE", "PRIVATE_DIR_MODE", "parse_file_mode",
           "dir_mode_for", "file_mode_in", "make_dirs", "make_private", "protect_root"]

DEFAULT_FILE_MODE = 0o600
PRIVATE_FILE_MODE = 0o600  # a file that holds secrets: the owner's alone, whatever the config
PRIVATE_DIR_MODE = 0o700
_OWNER_RW = 0o600
_ALLOWED = 0o666  # no execute, setuid, setgid or sticky bit on a data file (config/checks.py checks)


def parse_file_mode(text: str) -> int:
    """``"0640"`` -> 0o640 (ValueError naming the problem)."""
    problem = file_mode_problem(text)
    if problem is not None:
        raise ValueError(f"store_file_mode {text!r}: {problem}")
    return int(text.strip(), 8)


def dir_mode_for(file_mode: int) -> int:
    """The directories' mode for files of ``file_mode``: execute wherever there is read."""
    return file_mode | ((file_mode & 0o444) >> 2)


def file_mode_in(directory: str) -> int:
    """The mode a new file in ``directory`` is created with: the directory's, less execute."""
    try:
        return stat.S_IMODE(os.stat(directory or ".").st_mode) & _ALLOWED | _OWNER_RW
    except OSError:
        return DEFAULT_FILE_MODE


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, each new directory with its parent's mode."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    make_dirs(parent)
    try:
        os.mkdir(path, stat.S_IMODE(os.stat(parent).st_mode) & 0o777)
    except FileExistsError:
        pass


def make_private(directory: str, files: tuple[str, ...] = ()) -> None:
    """Make ``directory`` (created if needed, its parents as :func:`make_dirs` makes them)
    owner-only (0700), and each of ``files`` in it that exists 0600: a file that holds secrets
    and was made group-readable by an older broker or an earlier ``store_file_mode`` is closed
    too. OSError when a mode cannot be set."""
    make_dirs(directory)
    if stat.S_IMODE(os.stat(directory).st_mode) != PRIVATE_DIR_MODE:
        os.chmod(directory, PRIVATE_DIR_MODE)
    for name in files:
        path = os.path.join(directory, name)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            continue
        if mode != PRIVATE_FILE_MODE:
            os.chmod(path, PRIVATE_FILE_MODE)


def protect_root(root: str, file_mode: int) -> None:
    """Create the store root if needed and give it the directories' mode for ``file_mode``."""
    mode = dir_mode_for(file_mode)
    os.makedirs(root, mode=mode, exist_ok=True)
    if stat.S_IMODE(os.stat(root).st_mode) != mode:
        os.chmod(root, mode)
