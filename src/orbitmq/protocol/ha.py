"""The HA (replication) stream between a master and its slaves: RocketMQ 4.x's framing, sans-I/O.

Two one-way streams share one TCP connection to the master's HA port:

- slave -> master: reports, 8 bytes each, a big-endian signed offset: how far the slave's commit
  log reaches (its first report says where the master should stream from);
- master -> slave: transfer frames, ``[offset: i64][size: i32][size bytes]``: commit log bytes
  from ``offset`` on, exactly as the master stores them. A size-0 frame is a heartbeat that says
  where the master streams from next.

OrbitMQ's master sends only whole stored entries in a frame, never more than one segment's
worth, and sends a segment's blank end entry as its 8-byte header alone (the rest of a segment
after it holds nothing): a frame at ``offset`` holding a blank entry of TOTALSIZE ``n`` moves the
stream to ``offset + n``, the next segment. See broker/replication/ for the rest of the rules
(what a plausible report is, how a slave checks what it is sent).

Controller mode (docs/failover.md) adds one exchange at the start of a connection, so that a
master knows which member each connection is and both sides know each other's epoch: the slave
first sends a *hello*, two 8-byte values, :data:`HELLO_MARK` (negative: never an offset) and
``epoch << 32 | member``; the master answers with an *epoch frame*, a transfer header at offset
:data:`HELLO_MARK` of size 8 whose body is its own ``epoch << 32 | member``. A SYNC_MASTER then
sends *confirm frames*, transfer headers at offset :data:`CONFIRM_MARK` of size 8 whose body is
its confirm offset (what every in-sync member holds), at once and whenever it rises: a slave
serves consumers only below it. Without controller mode none of these is sent and the stream is
RocketMQ 4.x's.

Both readers take bytes in and give values out, and buffer at most one report or one frame:
their memory is bounded by ``frame_size_max``. A frame header with a negative offset or a size
outside ``0..frame_size_max`` raises :class:`~orbitmq.errors.RemoteProtocolError`.
"""

from __future__ import annotations

import dataclasses
import struct

from orbitmq.errors import RemoteProtocolError

__all__ = [
    "REPORT_SIZE",
    "TRANSFER_HEADER_SIZE",
    "encode_report",
    "encode_transfer_header",
    "ReportReader",
    "TransferFrame",
    "TransferReader",
    "HELLO_MARK",
    "encode_hello",
    "encode_epoch_frame",
    "unpack_identity",
    "CONFIRM_MARK",
    "encode_confirm_frame",
]

REPORT_SIZE = 8
TRANSFER_HEADER_SIZE = 8 + 4
_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
OFFSET_MAX = 2**63 - 1
HELLO_MARK = -0x4F524249544D51  # "ORBITMQ": a hello's first value, an epoch frame's offset
CONFIRM_MARK = HELLO_MARK - 1  # a confirm frame's offset
IDENTITY_SIZE = 8  # the body of each marked frame: an epoch frame's and a confirm frame's
_ID_MAX = 2**31 - 1


def pack_identity(epoch: int, member: int) -> int:
    if not 0 <= epoch <= _ID_MAX or not 0 <= member <= _ID_MAX:
        raise ValueError(f"epoch {epoch} / member {member} out of range 0..{_ID_MAX}")
    return epoch << 32 | member


def unpack_identity(value: int) -> tuple[int, int]:
    """(epoch, member) of a hello's second value or an epoch frame's body value.

    Raises:
        RemoteProtocolError: a value no peer could have packed (negative, or parts too large).
    """
    epoch, member = value >> 32, value & 0xFFFFFFFF
    if value < 0 or epoch > _ID_MAX or member > _ID_MAX:
        raise RemoteProtocolError(f"HA identity value {value} is not epoch << 32 | member")
    return epoch, member


def encode_hello(epoch: int, member: int) -> bytes:
    """A slave's hello: it follows the master of ``epoch`` and is member ``member``."""
    return _REPORT.pack(HELLO_MARK) + _REPORT.pack(pack_identity(epoch, member))


def encode_epoch_frame(epoch: int, member: int) -> bytes:
    """A master's answer to a hello: it is member ``member``, master of ``epoch``."""
    return _HEADER.pack(HELLO_MARK, IDENTITY_SIZE) + _REPORT.pack(pack_identity(epoch, member))


def encode_confirm_frame(offset: int) -> bytes:
    """A SYNC_MASTER's confirm offset (0..2**63-1): every in-sync member holds the log below it."""
    if not 0 <= offset <= OFFSET_MAX:
        raise ValueError(f"confirm offset {offset} out of range")
    return _HEADER.pack(CONFIRM_MARK, IDENTITY_SIZE) + _REPORT.pack(offset)


def encode_report(offset: int) -> bytes:
    """A slave's report: its commit log reaches ``offset`` (0..2**63-1)."""
    if not 0 <= offset <= OFFSET_MAX:
        raise ValueError(f"report offset {offset} out of range")
    return _REPORT.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """The header of a transfer frame of ``size`` bytes from commit log ``offset``."""
    if not 0 <= offset <= OFFSET_MAX or not 0 <= size <= 2**31 - 1:
        raise ValueError(f"transfer header offset={offset} size={size} out of range")
    return _HEADER.pack(offset, size)


class ReportReader:
    """The master's side: bytes from a slave in, the offsets it reported out (any 8 bytes are
    an offset; whether it is plausible is the master's call, not the codec's)."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """The reports completed by ``data``, in order (a partial one waits for the rest)."""
        buf = self._pending + bytes(data) if self._pending else bytes(data)
        whole = len(buf) - len(buf) % REPORT_SIZE
        self._pending = buf[whole:]
        return [value for (value,) in _REPORT.iter_unpack(buf[:whole])] if whole else []

    @property
    def buffered(self) -> int:
        """Bytes of a report not complete yet (under REPORT_SIZE)."""
        return len(self._pending)


@dataclasses.dataclass(frozen=True, slots=True)
class TransferFrame:
    """One frame from the master: ``data`` are the commit log bytes at ``offset`` (empty for a
    heartbeat)."""

    offset: int
    data: bytes


class TransferReader:
    """The slave's side: bytes from the master in, whole frames out.

    Args:
        frame_size_max: the largest frame body accepted (a bound on the buffer: a peer cannot
            make the slave hold more than one frame of this size).
    """

    __slots__ = ("frame_size_max", "_buf", "_need")

    def __init__(self, frame_size_max: int) -> None:
        self.frame_size_max = frame_size_max
        self._buf = bytearray()
        self._need: tuple[int, int] | None = None  # (offset, size) of the frame being read

    def feed(self, data: bytes | bytearray | memoryview) -> list[TransferFrame]:
        """The frames completed by ``data``, in order.

        Raises:
            RemoteProtocolError: a header with a negative offset or an impossible size (the
                stream cannot be trusted past it: close the connection).
        """
        buf = self._buf
        buf += data
        frames: list[TransferFrame] = []
        at = 0
        with memoryview(buf) as view:  # released before the buffer is cut below
            while True:
                if self._need is None:
                    if len(buf) - at < TRANSFER_HEADER_SIZE:
                        break
                    offset, size = _HEADER.unpack_from(view, at)
                    marked = offset in (HELLO_MARK, CONFIRM_MARK) and size == IDENTITY_SIZE
                    if not marked and (offset < 0 or not 0 <= size <= self.frame_size_max):
                        raise RemoteProtocolError(
                            f"HA frame header offset={offset} size={size}: not a frame (sizes "
                            f"0..{self.frame_size_max}, offsets from 0)")
                    at += TRANSFER_HEADER_SIZE
                    self._need = (offset, size)
                offset, size = self._need
                if len(buf) - at < size:
                    break
                frames.append(TransferFrame(offset, bytes(view[at:at + size])))
                at += size
                self._need = None
        if at:
            del buf[:at]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not complete yet (at most a header and frame_size_max)."""
        return len(self._buf)
