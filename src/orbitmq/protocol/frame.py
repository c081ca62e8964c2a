"""FrameDecoder: bytes from a stream in, RemotingCommands out (sans-I/O, like h11).

The transport calls ``feed`` with whatever the socket produced, from one byte to many frames at a
time, and gets back every command completed by it. Bytes accumulate in one bytearray that is
consumed from the front, so a large frame arriving in small pieces costs linear, not quadratic,
copying; each finished command's body is copied out of the buffer exactly once.

A transport that lets the socket read into a buffer (asyncio's BufferedProtocol) uses
``recv_buffer`` and ``received`` instead: the frames are read into a buffer lent for one read at a
time and handled where they lie, so the bytes of a read are not copied before they are handled;
only a frame cut by the end of a read is kept, and put back in front of the next read.

Memory follows what arrived, never what a length word announces: a frame longer than the lent
buffer gets a buffer of its own that starts at BIG_FRAME_START_BYTES (or twice what came) and
doubles, up to the frame's length, each time the peer has filled it: at most twice what arrived.
A peer that announces 16 MiB and sends 9 bytes pins 64 KiB, not 16 MiB; a whole large frame
costs about one more copy of itself than one buffer of its length would. ``held_bytes`` says what a connection holds, for
the server's budget of partial frames.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.command import RemotingCommand, _decode_view

__all__ = ["FrameDecoder", "DEFAULT_MAX_FRAME_SIZE", "MIN_FRAME_SIZE", "BIG_FRAME_START_BYTES"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024  # RocketMQ's default maximum frame
MIN_FRAME_SIZE = 4  # the total length counts at least the header length word
BIG_FRAME_START_BYTES = 64 * 1024  # the first buffer of a frame longer than the lent one
_BIG_GROWTH = 2  # a big frame's buffer grows this many times over once the peer filled it

_I32 = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames and decodes each into a RemotingCommand.

    Invariant: ``self._buffer`` starts at the first byte of a frame not yet decoded.

    After ``feed`` raised RemoteProtocolError the stream is out of sync for good: every later call
    raises again, and the connection must be closed.
    """

    __slots__ = ("max_frame_size", "_buffer", "_failure", "_big", "_big_len", "_big_total")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < MIN_FRAME_SIZE:
            raise ClientError(f"max_frame_size must be at least {MIN_FRAME_SIZE}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failure: str | None = None
        self._big: bytearray | None = None  # a frame longer than the lent buffer, being read
        self._big_len = 0  # bytes of _big read so far
        self._big_total = 0  # the length of the frame _big is for (4 + its length word)

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a decoded command (a partial frame)."""
        return len(self._buffer) + self._big_len

    @property
    def held_bytes(self) -> int:
        """Bytes of memory this decoder holds for a partial frame: what arrived, and the room
        a big frame's buffer has grown to (at most twice what arrived, or 64 KiB)."""
        big = self._big
        return len(self._buffer) + (len(big) if big is not None else 0)

    def discard(self, reason: str) -> None:
        """Drop what is held and fail the stream for good (a connection closed by a limit):
        the memory is given back now, not when the connection object goes."""
        self._failure = reason
        self._buffer = bytearray()
        self._big, self._big_len, self._big_total = None, 0, 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Adds ``data`` and returns the commands it completed, in order.

        Raises:
            RemoteProtocolError: a frame is malformed, or declares a length over
                ``max_frame_size`` (refused as soon as its 4 length bytes are in, before the rest
                arrives).
        """
        self._check_failure()
        buffer = self._buffer
        buffer += data
        commands: list[RemotingCommand] = []
        with memoryview(buffer) as view:
            pos = self._frames(view, None, commands.append)
        if pos:
            del buffer[:pos]  # CPython moves the start of a bytearray instead of copying
        return commands

    def recv_buffer(self, lent: memoryview) -> memoryview:
        """Where the next socket read goes (BufferedProtocol.get_buffer): ``lent``, a buffer lent
        for one read at a time (one per event loop thread; nothing may resize it), after the
        bytes of a frame an earlier read cut; or, for a frame longer than ``lent``, a buffer of
        its own that grows with what arrives (module docstring), never to more than the frame's
        length. A read that brings nothing (EAGAIN) loses nothing: the cut frame stays in
        ``_buffer`` (or ``_big``) until ``received`` has handled what follows it."""
        big = self._big
        if big is not None:
            filled = self._big_len
            if filled == len(big):  # the peer filled it and the frame goes on: grow
                grown = bytearray(min(self._big_total, len(big) * _BIG_GROWTH))
                grown[:filled] = big
                self._big = big = grown
            return memoryview(big)[filled:]
        pending = self._buffer
        cut = len(pending)
        if cut == 0:
            return lent
        # The length word of a cut frame was checked when it came in (see _frames).
        frame = _I32.unpack_from(pending)[0] + 4 if cut >= 4 else 0
        if frame <= len(lent):
            lent[:cut] = pending
            return lent[cut:]
        big = bytearray(min(frame, max(BIG_FRAME_START_BYTES, 2 * cut)))
        big[:cut] = pending
        self._big, self._big_len, self._big_total = big, cut, frame
        pending.clear()
        return memoryview(big)[cut:]

    def received(self, nbytes: int, lent: memoryview,
                 take: Callable[[memoryview, int], int] | None,
                 handle: Callable[[RemotingCommand], None]) -> bool:
        """The socket read ``nbytes`` into what ``recv_buffer`` gave (BufferedProtocol's
        buffer_updated): every whole frame is handled, by ``take`` or decoded and given to
        ``handle`` (see ``_frames``), and a frame cut by the read's end is kept.

        Returns:
            True when the frame kept began with this read (the clock of a frame's read time
            starts), False when nothing is kept or the frame kept began earlier.

        Raises:
            RemoteProtocolError: as ``feed``.
        """
        self._check_failure()
        big = self._big
        if big is not None:
            self._big_len += nbytes
            if self._big_len < self._big_total:
                return False
            self._big, self._big_len, self._big_total = None, 0, 0
            pos = self._frames(memoryview(big), take, handle)
            assert pos == len(big), "a buffer of one frame's length holds that frame"
            return False
        cut = len(self._buffer)
        end = cut + nbytes  # recv_buffer put the cut frame in front of the read
        pos = self._frames(lent[:end], take, handle)
        self._buffer[:] = lent[pos:end]  # a cut frame (usually nothing)
        return end > pos and (pos > 0 or cut == 0)

    def _check_failure(self) -> None:
        if self._failure is not None:
            raise RemoteProtocolError(f"stream already failed: {self._failure}")

    def _frames(self, view: memoryview, take: Callable[[memoryview, int], int] | None,
                handle: Callable[[RemotingCommand], None]) -> int:
        """Handle the whole frames at the start of ``view``; returns where the first one not
        whole starts. With ``take`` (the broker's native fast path), ``take(view, pos)``
        handles whole frames from ``pos`` on and returns where it stopped; the frame there,
        when whole, is decoded here and given to ``handle`` before ``take`` is asked again:
        every frame is handled once and in order, by one of the two. A length word is checked
        as soon as it is in.

        Raises:
            RemoteProtocolError: a length outside [MIN_FRAME_SIZE, max_frame_size], or a frame
                that does not decode; the stream is failed for good.
        """
        pos, end = 0, len(view)
        try:
            while end - pos >= 4:
                if take is not None:
                    pos = take(view, pos)
                    if end - pos < 4:
                        break
                (total,) = _I32.unpack_from(view, pos)
                if total < MIN_FRAME_SIZE or total > self.max_frame_size:
                    raise RemoteProtocolError(
                        f"frame length {total} outside [{MIN_FRAME_SIZE}, {self.max_frame_size}]"
                    )
                if end - pos - 4 < total:
                    break
                start = pos + 4
                cmd = _decode_view(view[start : start + total], copy_body=True)
                pos = start + total
                handle(cmd)
        except RemoteProtocolError as exc:
            self._failure = str(exc)
            self._buffer = bytearray()  # the old one may still be pinned by the traceback
            self._big, self._big_len, self._big_total = None, 0, 0
            raise
        return pos
