"""Fixtures shared by the fault tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orbitmq.testing.lazyfs import LazyFs


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyFs]:
    """The power-loss layer mounted for one test (its modules skip where it cannot mount)."""
    fs = LazyFs(tmp_path / "disk", tmp_path / "mnt")
    try:
        yield fs
    finally:
        fs.close()
