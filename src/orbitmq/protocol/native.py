"""The optional C speedups, or None.

``orbitmq.protocol._speedups`` is compiled at install time when a C compiler is present (see
hatch_build.py). Every user keeps a Python path, so OrbitMQ behaves the same without it;
``ORBITMQ_PURE_PYTHON=1`` turns it off (tests run both and compare).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["NATIVE"]


def _load() -> ModuleType | None:
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        return None
    try:
        import orbitmq.protocol._speedups as _speedups
    except ImportError:
        return None
    return _speedups


NATIVE: ModuleType | None = _load()
