"""The protocol's C twins (``protocol/_native/``), or None.

The stored codec's hot functions (``protocol/stored``), the column encoder
(``protocol/column_batch.py``), Java's String.hashCode (``protocol/java_hash.py``), zlib's CRC-32
and HMAC-SHA1, as ``orbitmq._native._speedups.protocol``: same arguments, same results and the
same refusals as their Python twins. Types in native.pyi. None without the C extension or with
``ORBITMQ_PURE_PYTHON=1`` (see orbitmq._native).
"""

from __future__ import annotations

from types import ModuleType

from orbitmq._native import room

__all__ = ["NATIVE"]

NATIVE: ModuleType | None = room("protocol")
