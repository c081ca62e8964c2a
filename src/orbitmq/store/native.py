"""The store's C work (``store/_native/``), or None.

Dispatch's plan of a round (``dispatch_plan``: store/dispatch.py), IndexFile.put_hash over planned
entries and the index's key hash (``index_put``, ``index_key_hash``: store/index_file.py), and the
unfiltered read of a queue as runs of the commit log (``queue_runs``: store/queue_reader.py), as
``orbitmq._native._speedups.store``. Types in native.pyi. None without the C extension or with
``ORBITMQ_PURE_PYTHON=1`` (see orbitmq._native).
"""

from __future__ import annotations

from types import ModuleType

from orbitmq._native import room

__all__ = ["NATIVE"]

NATIVE: ModuleType | None = room("store")
