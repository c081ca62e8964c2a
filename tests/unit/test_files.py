"""orbitmq.files.replace_file: the one atomic writer of small files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orbitmq.files import replace_file


def test_the_new_content_replaces_the_old_and_no_temporary_file_stays(tmp_path: Path) -> None:
    path = tmp_path / "table.json"
    path.write_bytes(b"old")
    replace_file(str(path), b"new content", 0o600)
    assert path.read_bytes() == b"new content"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json"]


def test_a_leftover_temporary_file_gets_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    leftover = tmp_path / "users.json.tmp"
    leftover.write_bytes(b"half written")
    leftover.chmod(0o644)
    replace_file(str(path), b"{}", 0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not leftover.exists()


def test_without_a_mode_the_file_gets_the_default_less_the_umask(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        replace_file(str(tmp_path / "offsets.json"), b"[]", None)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "offsets.json").stat().st_mode) == 0o644
