"""FrameDecoder: bytes from a stream in, RemotingCommands out (sans-I/O, like h11).

The transport calls ``feed`` with whatever the socket produced, from one byte to many frames at a
time, and gets back every command completed by it. Bytes accumulate in one bytearray that is
consumed from the front, so a large frame arriving in small pieces costs linear, not quadratic,
copying; each finished command's body is copied out of the buffer exactly once.

A transport that lets the socket read into a buffer (asyncio's BufferedProtocol) uses
``recv_buffer`` and ``received`` instead: the frames are read into a buffer lent for one read at a
time and handled where they lie, so the bytes of a read are not copied before they are handled;
only a frame cut by the end of a read is kept, and put back in front of the next read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.command import RemotingCommand, _decode_view

__all__ = ["FrameDecoder", "DEFAULT_MAX_FRAME_SIZE", "MIN_FRAME_SIZE"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024  # RocketMQ's default maximum frame
MIN_FRAME_SIZE = 4  # the total length counts at least the header length word

_I32 = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames and decodes each into a RemotingCommand.

    Invariant: ``self._buffer`` starts at the first byte of a frame not yet decoded.

    After ``feed`` raised RemoteProtocolError the stream is out of sync for good: every later call
    raises again, and the connection must be closed.
    """

    __slots__ = ("max_frame_size", "_buffer", "_failure", "_big", "_big_len")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < MIN_FRAME_SIZE:
            raise ClientError(f"max_frame_size must be at least {MIN_FRAME_SIZE}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failure: str | None = None
        self._big: bytearray | None = None  # a frame longer than the lent buffer, being read
        self._big_len = 0  # bytes of _big read so far

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a decoded command (a partial frame)."""
        return len(self._buffer) + self._big_len

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
        that frame's length. A read that brings nothing (EAGAIN) loses nothing: the cut frame
        stays in ``_buffer`` until ``received`` has handled what follows it."""
        if self._big is not None:
            return memoryview(self._big)[self._big_len :]
        pending = self._buffer
        cut = len(pending)
        if cut == 0:
            return lent
        # The length word of a cut frame was checked when it came in (see _frames).
        frame = _I32.unpack_from(pending)[0] + 4 if cut >= 4 else 0
        if frame <= len(lent):
            lent[:cut] = pending
            return lent[cut:]
        self._big, self._big_len = bytearray(frame), cut
        self._big[:cut] = pending
        pending.clear()
        return memoryview(self._big)[cut:]

    def received(self, nbytes: int, lent: memoryview,
                 take: Callable[[memoryview, int], int] | None,
                 handle: Callable[[RemotingCommand], None]) -> None:
        """The socket read ``nbytes`` into what ``recv_buffer`` gave (BufferedProtocol's
        buffer_updated): every whole frame is handled, by ``take`` or decoded and given to
        ``handle`` (see ``_frames``), and a frame cut by the read's end is kept.

        Raises:
            RemoteProtocolError: as ``feed``.
        """
        self._check_failure()
        big = self._big
        if big is not None:
            self._big_len += nbytes
            if self._big_len < len(big):
                return
            self._big, self._big_len = None, 0
            pos = self._frames(memoryview(big), take, handle)
            assert pos == len(big), "a buffer of one frame's length holds that frame"
            return
        end = len(self._buffer) + nbytes  # recv_buffer put the cut frame in front of the read
        pos = self._frames(lent[:end], take, handle)
        self._buffer[:] = lent[pos:end]  # a cut frame (usually nothing)

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
            self._big, self._big_len = None, 0
            raise
        return pos
