"""The broker's C fast path (``broker/_native/``), or None.

``FastPath``: plain sends read from a connection's bytes, stored and answered in C (with the
check of signed sends), driven by broker/fast_path.py; as ``orbitmq._native._speedups.broker``.
Types in native.pyi. None without the C extension or with ``ORBITMQ_PURE_PYTHON=1`` (see
orbitmq._native).
"""

from __future__ import annotations

from types import ModuleType

from orbitmq._native import room

__all__ = ["NATIVE"]

NATIVE: ModuleType | None = room("broker")
