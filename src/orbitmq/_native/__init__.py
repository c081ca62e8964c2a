"""OrbitMQ's C extension, ``orbitmq._native._speedups``, one room of it at a time, or None.

The extension is built at install time when a C compiler is present: hatch_build.py compiles
this package's ``_speedups.c`` (the module) with the C sources of ``protocol/_native``,
``store/_native`` and ``broker/_native`` into one module, so that the store's and the broker's C
call the protocol's encoder directly. Each room's functions sit in a submodule of their own
(``orbitmq._native._speedups.protocol``, ``.store``, ``.broker``), which only that room's loader,
``orbitmq.<room>.native``, hands out as its ``NATIVE``. Every user keeps a Python path, so
OrbitMQ behaves the same without it; ``ORBITMQ_PURE_PYTHON=1`` turns it off (tests run both and
compare).
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "room"]

PURE_PYTHON_ENV = "ORBITMQ_PURE_PYTHON"


def room(name: str) -> ModuleType | None:
    """The extension's submodule ``name`` (protocol, store or broker); None when the extension
    is not built or ``ORBITMQ_PURE_PYTHON=1``."""
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        from orbitmq._native import _speedups
    except ImportError:
        return None
    part: ModuleType = getattr(_speedups, name)
    return part
