"""The checkpoint file: how far each part of the store is known to be durable.

Offsets rather than RocketMQ's timestamps, because an offset is a message boundary recovery can
start from and does not depend on clocks. Written in place with a CRC: a torn or missing checkpoint
reads as None, and recovery then scans the whole commit log.

Layout (big-endian): magic ``OMQC`` | version i32 | physic offset i64 | logics offset i64 |
index offset i64 | physic ts i64 | logics ts i64 | index ts i64 | crc32 of the preceding bytes i32.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

from orbitmq.store.file_ops import FileOps

__all__ = ["StoreCheckpoint"]

_MAGIC = b"OMQC"
_VERSION = 1
_BODY = struct.Struct(">4siqqqqqq")
_CRC = struct.Struct(">I")


@dataclasses.dataclass
class StoreCheckpoint:
    """Durability marks.

    Attributes:
        physic_offset: commit log bytes below it were synced.
        logics_offset: every message below it has its consume queue entry synced.
        index_offset: every message below it has its index entries synced.
        physic_ts / logics_ts / index_ts: wall time (ms) of those syncs, for operators.
    """

    physic_offset: int = 0
    logics_offset: int = 0
    index_offset: int = 0
    physic_ts: int = 0
    logics_ts: int = 0
    index_ts: int = 0

    def encode(self) -> bytes:
        body = _BODY.pack(
            _MAGIC, _VERSION, self.physic_offset, self.logics_offset, self.index_offset,
            self.physic_ts, self.logics_ts, self.index_ts,
        )
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def decode(cls, data: bytes | None) -> StoreCheckpoint | None:
        """The checkpoint in ``data``; None when missing, short, torn or of another version."""
        if data is None or len(data) < _BODY.size + _CRC.size:
            return None
        body = data[: _BODY.size]
        (crc,) = _CRC.unpack_from(data, _BODY.size)
        if zlib.crc32(body) != crc:
            return None
        magic, version, *values = _BODY.unpack(body)
        if magic != _MAGIC or version != _VERSION or min(values[:3]) < 0:
            return None
        return cls(*values)

    @classmethod
    def load(cls, file_ops: FileOps, path: str) -> StoreCheckpoint | None:
        return cls.decode(file_ops.read_file(path))

    def save(self, file_ops: FileOps, path: str) -> None:
        file_ops.write_file(path, self.encode())
