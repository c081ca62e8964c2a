"""tests/unit mirrors the package (tests/unit/store for orbitmq.store, ...). The store's test
helpers (store/store_fixtures.py) serve the broker's durable-save test too, so their folder is
importable from every unit test."""

from __future__ import annotations

import sys
from pathlib import Path

_STORE_HELPERS = str(Path(__file__).resolve().parent / "store")
if _STORE_HELPERS not in sys.path:
    sys.path.append(_STORE_HELPERS)
