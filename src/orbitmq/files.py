"""Replacing a small file so that a crash at any point leaves the old or the new content whole:
the one atomic writer (the broker's tables, a name server's users file, the store's epoch file,
the POP log's compaction, the client's local offsets). Here, at the top, because every layer
writes such files and each may import this module."""

from __future__ import annotations

import os

__all__ = ["replace_file", "fsync_dir"]


def replace_file(path: str, data: bytes, mode: int | None) -> None:
    """Write ``data`` to a temporary file of ``mode`` beside ``path`` (its directory must
    exist), fsync it, rename it over ``path`` and fsync the directory. ``mode`` None: a new
    file's default (0666 less the umask), a leftover temporary file's kept."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    try:
        if mode is not None:
            os.fchmod(fd, mode)  # a temporary file left by a crash may have had another mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)


def fsync_dir(directory: str) -> None:
    """Make a rename or a creation in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
