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
           "dir_mode_for", "file_mode_in", "make_dirs", "make_private", "protect_root",
           "QueueDirs"]

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
    """``os.makedirs(path, exist_ok=True)``, each new directory with its parent's mode. A new
    directory whose parent exists costs a stat of the parent and a mkdir (a mapped queue's
    first file is made on the dispatch thread: no look before the leap); the parent's parents
    are walked only when it is missing."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    try:
        mode = os.stat(parent).st_mode
    except FileNotFoundError:
        make_dirs(parent)
        mode = os.stat(parent).st_mode
    try:
        os.mkdir(path, stat.S_IMODE(mode) & 0o777)
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


class QueueDirs:
    """The directories of new consume queues under the store's ``consumequeue`` root, made
    with the fewest system calls: a queue's first message is where the dispatch thread meets
    the file system, once per queue (a million new queues: a million directories). One
    ``mkdir`` for a queue of a topic whose directory exists, ``make_dirs``'s walk only when
    it does not; the root's mode is read once, and every topic's and queue's directory takes
    it (as ``make_dirs`` gives each new directory its parent's), its files ``file_mode``."""

    __slots__ = ("root", "_mode")

    def __init__(self, root: str) -> None:
        self.root = root
        self._mode: int | None = None

    @property
    def dir_mode(self) -> int:
        mode = self._mode
        if mode is None:
            make_dirs(self.root)
            mode = self._mode = stat.S_IMODE(os.stat(self.root).st_mode) & 0o777
        return mode

    @property
    def file_mode(self) -> int:
        """What ``file_mode_in`` gives a file of a queue's directory."""
        return self.dir_mode & _ALLOWED | _OWNER_RW

    def make(self, directory: str) -> None:
        """Make a queue's ``directory`` (root/topic/queue id), and its topic's when missing.

        Raises:
            OSError: a directory cannot be made (ENOSPC...).
        """
        mode = self.dir_mode
        try:
            os.mkdir(directory, mode)
        except FileExistsError:
            pass
        except FileNotFoundError:  # the topic's first queue
            topic_dir = os.path.dirname(directory)
            try:
                os.mkdir(topic_dir, mode)  # in the root, whose mode is this one
            except FileExistsError:
                pass
            except FileNotFoundError:  # the root itself went (a store being deleted)
                make_dirs(topic_dir)
            try:
                os.mkdir(directory, mode)
            except FileExistsError:
                pass


def protect_root(root: str, file_mode: int) -> None:
    """Create the store root if needed and give it the directories' mode for ``file_mode``."""
    mode = dir_mode_for(file_mode)
    os.makedirs(root, mode=mode, exist_ok=True)
    if stat.S_IMODE(os.stat(root).st_mode) != mode:
        os.chmod(root, mode)
