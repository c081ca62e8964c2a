"""The timer's files: a time wheel of slot heads, a log of timer records, a checkpoint.

Under ``STORE/timer/``:

- ``timerwheel``: ``slots`` heads of 8 bytes, one per tick of ``precision_ms`` (slot = tick mod
  slots); a head is 1 + the log position of the newest record of the slot's chain (0: empty).
- ``timerlog``: fixed records of :data:`RECORD_SIZE` bytes, appended only: the previous record
  of the same chain (a position + 1, 0 ends it), the tick it fires at, its delivery time (ms),
  where the message lies in the commit log (offset, size), its timer queue offset, and a CRC32
  of the rest, so a torn tail is recognised.
- ``timercheck.json``: what is durable: how far the timer queue has been enqueued
  (``enqueued``), which tick was fired last (``fired_through``), the log length those cover
  (``log_size``), the chain being fired (``firing``: tick, detached head, records delivered) and
  the wheel's geometry, which a later run must share.

Memory does not grow with the number of timers: records and heads live in the files, read and
written with pread/pwrite; one batch of records at a time is in memory.

Recovery (:meth:`WheelFiles.recover`): records past the checkpoint's ``log_size`` that are whole
(their CRC holds) are linked into their slots again, newest last, which restores each chain even
when the wheel's own writes were lost; the first torn record and what follows are cut off (the
enqueue runs again from there: the timer queue in the commit log is the source of every record).
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from collections.abc import Iterator

import orjson

from orbitmq.broker.config_file import read_json, write_atomic
from orbitmq.errors import StoreError
from orbitmq.store.file_mode import file_mode_in, make_dirs

__all__ = ["WheelFiles", "TimerRecord", "Checkpoint", "RECORD_SIZE"]

_RECORD = struct.Struct("<qqqqqi")  # prev+1, tick, due ms, commit log offset, queue offset, size
RECORD_SIZE = _RECORD.size + 4  # + CRC32
_HEAD = struct.Struct("<q")
READ_CHUNK_RECORDS = 4096  # records read at once during recovery


@dataclasses.dataclass(slots=True)
class TimerRecord:
    """One timer in the log."""

    pos: int  # its own position in the log
    prev: int  # the previous record of its chain (position + 1; 0: none)
    tick: int
    due_ms: int
    phy_offset: int
    queue_offset: int
    size: int


@dataclasses.dataclass(slots=True)
class Checkpoint:
    """What the timer's files are known to hold durably (module docstring)."""

    enqueued: int = 0
    fired_through: int = -1
    log_size: int = 0
    firing: dict[str, int] | None = None  # {"tick", "head", "done"}
    precision_ms: int = 0
    slots: int = 0

    def to_json(self) -> bytes:
        return orjson.dumps(dataclasses.asdict(self))


class WheelFiles:
    """The wheel, the log and the checkpoint of one broker (used from the event loop only).

    Args:
        directory: ``STORE/timer``.
        precision_ms: the length of one tick.
        slots: the number of ticks the wheel holds (the longest delay plus a margin).
    """

    def __init__(self, directory: str, precision_ms: int, slots: int) -> None:
        self.directory = directory
        self.precision_ms = precision_ms
        self.slots = slots
        self.check_path = os.path.join(directory, "timercheck.json")
        self._log_fd = -1
        self._wheel_fd = -1
        self.log_size = 0
        self.checkpoint = Checkpoint(precision_ms=precision_ms, slots=slots)

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self) -> None:
        """Open (creating) the files and load the checkpoint; StoreError when the wheel was made
        with another precision or size (the settings ``timer_precision_ms`` and
        ``timer_max_delay_s`` may not change while timers are pending)."""
        make_dirs(self.directory)
        data = read_json(self.check_path)
        if data is not None:
            try:
                self.checkpoint = Checkpoint(**data)
            except TypeError:
                raise StoreError(f"{self.check_path}: not a timer checkpoint") from None
            cp = self.checkpoint
            if (cp.precision_ms, cp.slots) != (self.precision_ms, self.slots):
                raise StoreError(
                    f"{self.check_path}: the timer wheel was made with precision "
                    f"{cp.precision_ms} ms and {cp.slots} slots, not {self.precision_ms} ms and "
                    f"{self.slots}: keep timer_precision_ms and timer_max_delay_s as they were")
        mode = file_mode_in(self.directory)  # the store's (store/file_mode.py)
        self._log_fd = os.open(os.path.join(self.directory, "timerlog"), os.O_RDWR | os.O_CREAT, mode)
        self._wheel_fd = os.open(os.path.join(self.directory, "timerwheel"), os.O_RDWR | os.O_CREAT, mode)
        if os.fstat(self._wheel_fd).st_size < self.slots * 8:
            os.ftruncate(self._wheel_fd, self.slots * 8)  # a sparse file: heads of 0
        self.log_size = os.fstat(self._log_fd).st_size

    def close(self) -> None:
        for fd in (self._log_fd, self._wheel_fd):
            if fd >= 0:
                os.close(fd)
        self._log_fd = self._wheel_fd = -1

    # -- heads ----------------------------------------------------------------------------------
    def head(self, tick: int) -> int:
        raw = os.pread(self._wheel_fd, 8, (tick % self.slots) * 8)
        return _HEAD.unpack(raw)[0] if len(raw) == 8 else 0

    def set_head(self, tick: int, head: int) -> None:
        os.pwrite(self._wheel_fd, _HEAD.pack(head), (tick % self.slots) * 8)

    # -- records --------------------------------------------------------------------------------
    def append(self, entries: list[tuple[int, int, int, int, int]]) -> None:
        """Append records (tick, due ms, commit log offset, queue offset, size), each linked at
        the head of its tick's chain: one write for the records, one per changed head."""
        heads: dict[int, int] = {}
        out = bytearray()
        pos = self.log_size
        for tick, due_ms, phy, qoffset, size in entries:
            prev = heads[tick] if tick in heads else self.head(tick)
            body = _RECORD.pack(prev, tick, due_ms, phy, qoffset, size)
            out += body
            out += struct.pack("<I", zlib.crc32(body))
            heads[tick] = pos + 1
            pos += RECORD_SIZE
        if out:
            os.pwrite(self._log_fd, out, self.log_size)
            self.log_size = pos
        for tick, head in heads.items():
            self.set_head(tick, head)

    def read(self, head: int) -> TimerRecord | None:
        """The record a head or a ``prev`` names (None: the chain ends, or the record is torn)."""
        if head <= 0:
            return None
        pos = head - 1
        raw = os.pread(self._log_fd, RECORD_SIZE, pos)
        return _decode(pos, raw)

    def chain(self, head: int, skip: int = 0) -> Iterator[TimerRecord]:
        """The records of a chain from ``head``, newest first, the first ``skip`` left out."""
        record = self.read(head)
        index = 0
        while record is not None:
            if index >= skip:
                yield record
            index += 1
            record = self.read(record.prev)

    # -- durability -----------------------------------------------------------------------------
    def sync(self) -> None:
        os.fsync(self._log_fd)
        os.fsync(self._wheel_fd)

    def snapshot(self) -> bytes:
        """The checkpoint as it stands now (taken where the files are changed: the event loop),
        for :meth:`write_checkpoint` (which may run in another thread meanwhile)."""
        self.checkpoint.log_size = self.log_size
        firing = dict(self.checkpoint.firing) if self.checkpoint.firing else None
        return orjson.dumps({**dataclasses.asdict(self.checkpoint), "firing": firing})

    def write_checkpoint(self, snapshot: bytes) -> None:
        """Sync the log and the wheel, then replace the checkpoint with ``snapshot`` (in that
        order: everything written before the snapshot was taken is on disk before the
        checkpoint names it; what was written after is recovered past its log size)."""
        self.sync()
        write_atomic(self.check_path, snapshot)

    def save_checkpoint(self) -> None:
        """Snapshot and write at once (in the caller's thread)."""
        self.write_checkpoint(self.snapshot())

    def recover(self) -> int:
        """Relink the whole records past the checkpoint, cut a torn tail; returns the timer
        queue offset the enqueue goes on from."""
        cp = self.checkpoint
        pos, enqueued = cp.log_size, cp.enqueued
        end = os.fstat(self._log_fd).st_size
        while pos < end:
            raw = os.pread(self._log_fd, min(end - pos, READ_CHUNK_RECORDS * RECORD_SIZE), pos)
            whole = len(raw) - len(raw) % RECORD_SIZE
            for at in range(0, whole, RECORD_SIZE):
                record = _decode(pos + at, raw[at:at + RECORD_SIZE])
                if record is None:
                    end = pos + at
                    break
                self.set_head(record.tick, record.pos + 1)
                enqueued = max(enqueued, record.queue_offset + 1)
            else:
                if whole < len(raw):
                    end = pos + whole
                pos += whole
                continue
            break
        if end < os.fstat(self._log_fd).st_size:
            os.ftruncate(self._log_fd, end)
        self.log_size = min(end, os.fstat(self._log_fd).st_size)
        cp.enqueued = enqueued
        if cp.firing is not None:
            self.set_head(cp.firing["tick"], 0)  # the chain being fired was detached
        return enqueued


def _decode(pos: int, raw: bytes) -> TimerRecord | None:
    if len(raw) != RECORD_SIZE:
        return None
    body, (crc,) = raw[:_RECORD.size], struct.unpack("<I", raw[_RECORD.size:])
    if zlib.crc32(body) != crc:
        return None
    prev, tick, due_ms, phy, qoffset, size = _RECORD.unpack(body)
    return TimerRecord(pos, prev, tick, due_ms, phy, qoffset, size)
