"""FrameDecoder: bytes from a stream in, RemotingCommands out (sans-I/O, like h11).

The transport calls ``feed`` with whatever the socket produced, from one byte to many frames at a
time, and gets back every command completed by it. Bytes accumulate in one bytearray that is
consumed from the front, so a large frame arriving in small pieces costs linear, not quadratic,
copying; each finished command's body is copied out of the buffer exactly once.
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

    __slots__ = ("max_frame_size", "_buffer", "_failure")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < MIN_FRAME_SIZE:
            raise ClientError(f"max_frame_size must be at least {MIN_FRAME_SIZE}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failure: str | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet part of a decoded command (a partial frame)."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Adds ``data`` and returns the commands it completed, in order.

        Raises:
            RemoteProtocolError: a frame is malformed, or declares a length over
                ``max_frame_size`` (refused as soon as its 4 length bytes are in, before the rest
                arrives).
        """
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
