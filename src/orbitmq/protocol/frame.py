"""FrameDecoder: bytes from a stream in, RemotingCommands out (sans-I/O, like h11).

The transport calls ``feed`` with whatever the socket produced, from one byte to many frames at a
time, and gets back every command completed by it. Bytes accumulate in one bytearray that is
consumed from the front, so a large frame arriving in small pieces costs linear, not quadratic,
copying; each finished command's body is copied out of the buffer exactly once.

A reader that can receive into memory it is given (asyncio's BufferedProtocol) asks
``get_buffer`` where the next bytes go and tells ``buffer_updated`` how many came. Then a frame
of ``direct_frame_min_bytes`` or more, once its length is known, is received straight into a
buffer of its own and its body is a view of that buffer: the megabytes of a bulk pull's answer
are not copied at all on their way from the socket to the command.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.command import RemotingCommand, _decode_view

__all__ = ["FrameDecoder", "DEFAULT_MAX_FRAME_SIZE", "MIN_FRAME_SIZE", "RECV_AREA_BYTES"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024  # RocketMQ's default maximum frame
MIN_FRAME_SIZE = 4  # the total length counts at least the header length word
RECV_AREA_BYTES = 256 * 1024  # what ``get_buffer`` offers outside a direct frame

_I32 = struct.Struct(">i")


class FrameDecoder:
    """Splits a byte stream into frames and decodes each into a RemotingCommand.

    Invariant: ``self._buffer`` starts at the first byte of a frame not yet decoded, unless a
    direct frame is being received (``self._direct``), when ``self._buffer`` is empty.

    After ``feed`` raised RemoteProtocolError the stream is out of sync for good: every later call
    raises again, and the connection must be closed.

    Args:
        max_frame_size: a frame declaring more is refused.
        direct_frame_min_bytes: frames of at least this many bytes (the length word excluded)
            are received into a buffer of their own by ``get_buffer`` / ``buffer_updated``;
            0 (the default) never. ``feed`` alone never does it.
    """

    __slots__ = ("max_frame_size", "direct_frame_min_bytes", "_buffer", "_failure", "_direct",
                 "_direct_filled", "_area")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 direct_frame_min_bytes: int = 0) -> None:
        if max_frame_size < MIN_FRAME_SIZE:
            raise ClientError(f"max_frame_size must be at least {MIN_FRAME_SIZE}")
        if direct_frame_min_bytes < 0:
            raise ClientError("direct_frame_min_bytes must be 0 (off) or positive")
        self.max_frame_size = max_frame_size
        self.direct_frame_min_bytes = direct_frame_min_bytes
        self._buffer = bytearray()
        self._failure: str | None = None
        self._direct: bytearray | None = None  # the frame (length word excluded) coming in whole
        self._direct_filled = 0
        self._area: bytearray | None = None  # get_buffer's receive area, made on first use

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a decoded command (a partial frame)."""
        return len(self._buffer) + self._direct_filled

    def get_buffer(self) -> memoryview:
        """Where the next bytes of the stream are to be received (never empty): the rest of a
        direct frame, else a receive area whose bytes ``buffer_updated`` adds."""
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled:]
        if self._area is None:
            self._area = bytearray(RECV_AREA_BYTES)
        return memoryview(self._area)

    def buffer_updated(self, nbytes: int) -> list[RemotingCommand]:
        """``nbytes`` were received into the last ``get_buffer``; the commands they completed.

        Raises:
            RemoteProtocolError: as ``feed``.
        """
        if self._failure is not None:
            raise RemoteProtocolError(f"stream already failed: {self._failure}")
        direct = self._direct
        if direct is None:
            assert self._area is not None and 0 < nbytes <= len(self._area)
            with memoryview(self._area) as area:
                return self._feed(area[:nbytes], direct_ok=True)
        self._direct_filled += nbytes
        assert nbytes > 0 and self._direct_filled <= len(direct)
        if self._direct_filled < len(direct):
            return []
        self._direct, self._direct_filled = None, 0
        try:
            return [_decode_view(memoryview(direct), copy_body=False)]
        except RemoteProtocolError as exc:
            self._failure = str(exc)
            raise

    def _go_direct(self, buffer: bytearray, pos: int, total: int) -> None:
        """The frame at ``pos`` (``total`` bytes after its length word, not all in yet) is
        received into its own buffer from now on."""
        direct = bytearray(total)
        have = len(buffer) - pos - 4
        with memoryview(buffer) as view:
            direct[:have] = view[pos + 4:]
        del buffer[:]
        self._direct, self._direct_filled = direct, have

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Adds ``data`` and returns the commands it completed, in order.

        Raises:
            RemoteProtocolError: a frame is malformed, or declares a length over
                ``max_frame_size`` (refused as soon as its 4 length bytes are in, before the rest
                arrives).
        """
        return self._feed(data, direct_ok=False)

    def _feed(self, data: bytes | bytearray | memoryview, *, direct_ok: bool) -> list[RemotingCommand]:
        assert self._direct is None, "feed while a direct frame is being received"
        if self._failure is not None:
            raise RemoteProtocolError(f"stream already failed: {self._failure}")
        buffer = self._buffer
        buffer += data
        commands: list[RemotingCommand] = []
        pos, end = 0, len(buffer)
        try:
            with memoryview(buffer) as view:
                while end - pos >= 4:
                    (total,) = _I32.unpack_from(view, pos)
                    if total < MIN_FRAME_SIZE or total > self.max_frame_size:
                        raise RemoteProtocolError(
                            f"frame length {total} outside [{MIN_FRAME_SIZE}, {self.max_frame_size}]"
                        )
                    if end - pos - 4 < total:
                        break
                    start = pos + 4
                    commands.append(_decode_view(view[start : start + total], copy_body=True))
                    pos = start + total
        except RemoteProtocolError as exc:
            self._failure = str(exc)
            self._buffer = bytearray()  # the old one may still be pinned by the traceback
            raise
        if direct_ok and self.direct_frame_min_bytes and end - pos >= 4:
            (total,) = _I32.unpack_from(buffer, pos)
            if total >= self.direct_frame_min_bytes:
                self._go_direct(buffer, pos, total)
                return commands
        if pos:
            del buffer[:pos]  # CPython moves the start of a bytearray instead of copying
        return commands

    def feed_taking(self, data: bytes | bytearray | memoryview,
                    take: Callable[[bytearray, int], int],
                    handle: Callable[[RemotingCommand], None]) -> None:
        """``feed`` for a reader that handles some frames itself (the broker's native fast
        path): ``take(buffer, pos)`` handles whole frames from ``pos`` on and returns where it
        stopped; the frame there, when complete, is decoded here and given to ``handle`` before
        ``take`` is asked again. Every frame is thus handled once and in order, by one of the two.

        Raises:
            RemoteProtocolError: as ``feed``, for the frames decoded here.
        """
        if self._failure is not None:
            raise RemoteProtocolError(f"stream already failed: {self._failure}")
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        try:
            while end - pos >= 4:
                pos = take(buffer, pos)
                if end - pos < 4:
                    break
                (total,) = _I32.unpack_from(buffer, pos)
                if total < MIN_FRAME_SIZE or total > self.max_frame_size:
                    raise RemoteProtocolError(
                        f"frame length {total} outside [{MIN_FRAME_SIZE}, {self.max_frame_size}]"
                    )
                if end - pos - 4 < total:
                    break
                start = pos + 4
                with memoryview(buffer) as view:  # released before ``handle``: no export kept
                    cmd = _decode_view(view[start : start + total], copy_body=True)
                pos = start + total
                handle(cmd)
        except RemoteProtocolError as exc:
            self._failure = str(exc)
            self._buffer = bytearray()
            raise
        if pos:
            del buffer[:pos]
