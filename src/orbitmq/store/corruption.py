"""What the store does about a corrupt message in its own commit log (docs/replication.md,
"Corruption").

Where messages are checked (body CRC, layout, PHYSICALOFFSET):

- recovery re-scans the tail of the log from the checkpoint's segment (recovery.py) and cuts it
  at the first message that fails;
- a slave checks every message it takes from its master before storing it
  (replica_append.py): a corrupt frame is never written;
- a slave checks every message before it serves it (queue_reader.py, ``check``), and so does a
  master with ``check_crc_on_read``: a corrupt message is never served; the read answers as if
  the queue ended before it.

When a read meets a corrupt message, ``CorruptionWatch.found`` counts it (once per offset; the
broker exports the counts as ``orbitmq_store_corrupt_messages_total{role}``) and logs one ERROR
line with the store path, the offset and what failed. A slave then repairs itself: its log is
cut at the message (replica_truncate.py) and the listeners are told (the HA client connects
again, reports its new, lower end and its master streams the rest again, checked as it comes).
A master cannot repair its own log: it keeps refusing to serve the message, and says so; in
controller mode its master listener hands the set over to a member with a copy and the old
master then repairs itself as a slave (broker/failover/service.py).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import orjson

from orbitmq.errors import StoreError
from orbitmq.files import replace_file
from orbitmq.store.file_mode import file_mode_in

__all__ = ["CorruptionWatch", "ROLES", "SEEN_MAX"]

log = logging.getLogger(__name__)

ROLES = ("master", "slave")
SEEN_MAX = 4096  # corrupt offsets remembered (each counted and logged once); older ones forgotten
REPAIR_FILE = "repair.json"  # the pending repair, so that a restart does not forget it
REPAIR_FILE_SIZE_MAX = 256
OFFSET_MAX = 2**62


class CorruptionWatch:
    """A store's account of the corrupt messages its reads met: counts by role, the offsets
    already reported, and who to tell when a slave's log was cut for one."""

    def __init__(self, store_path: str) -> None:
        self.store_path = store_path
        self.counts: dict[str, int] = dict.fromkeys(ROLES, 0)
        self._seen: set[int] = set()
        self._lock = threading.Lock()
        self._listeners: list[Callable[[int], object]] = []
        self._master_listeners: list[Callable[[int], object]] = []
        # Where a slave's log ended before its last cut for a corrupt message: until it holds
        # that much again it lacks bytes it had acknowledged, and is not a candidate in an
        # election (controller mode: broker/failover/service.py). 0: no repair pending. Kept in
        # REPAIR_FILE while pending: a slave killed before it is whole again is still repairing.
        self.repair_until = 0
        self._repair_path = os.path.join(store_path, REPAIR_FILE)

    def load(self) -> None:
        """The pending repair as the file holds it (the store's start, under its lock).

        Raises:
            StoreError: the file is unusable (never guessed: a repair forgotten would let a
                member that lacks acknowledged bytes be elected).
        """
        try:
            with open(self._repair_path, "rb") as f:
                data = f.read(REPAIR_FILE_SIZE_MAX + 1)
        except FileNotFoundError:
            return
        except OSError as e:
            raise StoreError(f"cannot read the repair file {self._repair_path}: {e}") from None
        try:
            until = orjson.loads(data)["until"] if len(data) <= REPAIR_FILE_SIZE_MAX else None
        except (orjson.JSONDecodeError, TypeError, KeyError):
            until = None
        if isinstance(until, bool) or not isinstance(until, int) or not 0 < until <= OFFSET_MAX:
            raise StoreError(f"the repair file {self._repair_path} does not hold "
                             f'{{"until": offset}} with an offset from 1 to {OFFSET_MAX}')
        self.repair_until = until
        log.warning("commit log repair still pending path=%s until=%d", self.store_path, until)

    def _save_repair(self) -> None:
        """The file follows ``repair_until``; a failure to write it is logged loudly (the
        repair itself goes on)."""
        try:
            if self.repair_until:
                replace_file(self._repair_path, orjson.dumps({"until": self.repair_until}),
                             file_mode_in(self.store_path))
            else:
                os.unlink(self._repair_path)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.error("cannot save the pending repair path=%s until=%d: %s", self._repair_path,
                      self.repair_until, e)

    def add_listener(self, listener: Callable[[int], object]) -> None:
        """``listener(offset)`` runs (in the reader's thread) after a slave's log was cut at
        ``offset`` for a corrupt message: the HA client connects again from the new end."""
        self._listeners.append(listener)

    def add_master_listener(self, listener: Callable[[int], object]) -> None:
        """``listener(offset)`` runs (in the reader's thread) when a master's checked read
        meets a corrupt message it keeps (controller mode: the master steps down when another
        in-sync member holds a copy, broker/failover/service.py)."""
        self._master_listeners.append(listener)

    def master_found(self, offset: int) -> None:
        """A master's read met the corrupt message at ``offset``: tell the master listeners."""
        for listener in list(self._master_listeners):
            try:
                listener(offset)
            except Exception:  # a listener's failure must not fail the read that found it
                log.exception("corruption listener failed offset=%d", offset)

    def remove_listener(self, listener: Callable[[int], object]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def repair_pending(self, end: int) -> str | None:
        """Why a log ending at ``end`` is still being repaired (it lacks bytes it held before
        a cut for a corrupt message), or None when it is whole again."""
        until = self.repair_until
        if not until:
            return None
        if end >= until:
            self.repair_until = 0
            self._save_repair()
            return None
        return (f"repairing a corrupt commit log: it holds {end} of the {until} bytes it had "
                "before the corrupt message was cut")

    def forget_repair(self) -> None:
        """A new master's log is the truth now (a failover): the old end no longer counts."""
        if self.repair_until:
            self.repair_until = 0
            self._save_repair()

    def found(self, offset: int, problem: str, *, replica: bool, found_by: str) -> bool:
        """Count and log the corrupt message at ``offset`` (once per offset); True the first
        time it is reported. ``found_by``: what met it (``read``, ``recovery``)."""
        role = "slave" if replica else "master"
        with self._lock:
            if offset in self._seen:
                return False
            if len(self._seen) >= SEEN_MAX:
                self._seen.clear()
            self._seen.add(offset)
            self.counts[role] += 1
        action = ("the log is cut there and the rest fetched again from the master" if replica
                  else "it is not served: reads of its queue stop before it")
        log.error("corrupt message in the commit log path=%s offset=%d problem=%s found_by=%s "
                  "role=%s: %s", self.store_path, offset, problem, found_by, role, action)
        return True

    def cut(self, offset: int, old_end: int) -> None:
        """A slave's log ending at ``old_end`` was cut at ``offset`` for a corrupt message:
        offsets from there on hold new bytes later, and the repair lasts until it holds
        ``old_end`` again."""
        with self._lock:
            self._seen = {o for o in self._seen if o < offset}
            self.repair_until = max(self.repair_until, old_end)
            self._save_repair()
        for listener in list(self._listeners):
            try:
                listener(offset)
            except Exception:  # a listener's failure must not fail the read that found it
                log.exception("corruption listener failed offset=%d", offset)
