"""The epoch file of a store (controller mode, docs/failover.md): for every epoch whose bytes
this commit log holds, the offset where that epoch's bytes start (RocketMQ 5 keeps the same).

``DIR/epochs.json``: ``{"epochs": [[epoch, start offset], ...]}``, epochs rising, start offsets
never falling. A log with no entry predates controller mode (epoch 0). The file is replaced
whole and atomically (a temporary file, fsync, rename, fsync of the directory): after a crash it
holds either the old list or the new one. A file that breaks these rules is refused loudly: a
wrong epoch list could make a broker keep bytes that no master acknowledged.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import orjson

from orbitmq.errors import StoreError
from orbitmq.files import replace_file
from orbitmq.store.file_mode import file_mode_in

__all__ = ["EpochFile", "EPOCHS_MAX", "check_epochs"]

EPOCHS_MAX = 4096  # entries kept; the oldest go first (their bytes are long replicated)
EPOCH_MAX = 2**31 - 1
OFFSET_MAX = 2**62
FILE_SIZE_MAX = 1024 * 1024


def check_epochs(entries: Sequence[object], what: str) -> list[tuple[int, int]]:
    """The entries as (epoch, start) pairs; StoreError naming ``what`` when they break a rule."""
    out: list[tuple[int, int]] = []
    for item in entries:
        if (not isinstance(item, list | tuple) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in item)):
            raise StoreError(f"{what}: {item!r} is not [epoch, start offset]")
        epoch, start = item
        if not 1 <= epoch <= EPOCH_MAX or not 0 <= start <= OFFSET_MAX:
            raise StoreError(f"{what}: [{epoch}, {start}] is out of range")
        if out and (epoch <= out[-1][0] or start < out[-1][1]):
            raise StoreError(f"{what}: [{epoch}, {start}] does not follow {list(out[-1])}")
        out.append((epoch, start))
    return out


class EpochFile:
    """``DIR/epochs.json`` (see the module docstring); ``entries`` as loaded or last written."""

    def __init__(self, store_path: str) -> None:
        self.path = os.path.join(store_path, "epochs.json")
        self.entries: list[tuple[int, int]] = []

    def load(self) -> list[tuple[int, int]]:
        """Read the file (none: no entry). Raises StoreError when it is unusable."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(FILE_SIZE_MAX + 1)
        except FileNotFoundError:
            self.entries = []
            return []
        except OSError as e:
            raise StoreError(f"cannot read the epoch file {self.path}: {e}") from None
        if len(data) > FILE_SIZE_MAX:
            raise StoreError(f"the epoch file {self.path} is larger than {FILE_SIZE_MAX} bytes")
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise StoreError(f"the epoch file {self.path} is not JSON: {e}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("epochs"), list):
            raise StoreError(f"the epoch file {self.path} has no list 'epochs'")
        self.entries = check_epochs(obj["epochs"], f"the epoch file {self.path}")
        return list(self.entries)

    def replace(self, entries: Sequence[tuple[int, int]]) -> None:
        """Write ``entries`` (checked) durably in place of the file's."""
        checked = check_epochs(list(entries), "new epochs")[-EPOCHS_MAX:]
        data = orjson.dumps({"epochs": [list(e) for e in checked]})
        replace_file(self.path, data, file_mode_in(os.path.dirname(self.path)))
        self.entries = checked

    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0
