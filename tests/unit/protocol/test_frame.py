"""FrameDecoder: any split of the stream gives the same commands; bounds are enforced early."""

from __future__ import annotations

import struct

import pytest

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameDecoder,
    RemotingCommand,
    SerializeType,
    encode,
)


def sample_commands() -> list[RemotingCommand]:
    return [
        RemotingCommand(code=105, opaque=1, ext_fields={"topic": "T"}),
        RemotingCommand(code=10, opaque=2, ext_fields={"a": "b"}, body=b"hello",
                        serialize_type=SerializeType.ROCKETMQ),
        RemotingCommand(code=0, opaque=3, flag=1, remark="ok", body=bytes(range(256)) * 40),
    ]


def test_default_bound_is_16_mib() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 16 * 1024 * 1024
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE


def test_whole_stream_in_one_feed() -> None:
    commands = sample_commands()
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(encode(c) for c in commands)) == commands
    assert decoder.buffered_bytes == 0


def test_byte_by_byte() -> None:
    commands = sample_commands()
    stream = b"".join(encode(c) for c in commands)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == commands


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 8, 9, 50])
def test_split_anywhere(cut: int) -> None:
    commands = sample_commands()
    stream = b"".join(encode(c) for c in commands)
    decoder = FrameDecoder()
    first = decoder.feed(stream[:cut])
    assert decoder.feed(b"") == []
    assert first + decoder.feed(bytearray(stream[cut:])) == commands


def test_partial_frame_is_kept_and_counted() -> None:
    frame = encode(RemotingCommand(code=11, body=b"x" * 100))
    decoder = FrameDecoder()
    assert decoder.feed(frame[:-1]) == []
    assert decoder.buffered_bytes == len(frame) - 1
    assert len(decoder.feed(frame[-1:])) == 1
    assert decoder.buffered_bytes == 0


def test_bodies_are_bytes_owned_by_the_command() -> None:
    decoder = FrameDecoder()
    (cmd,) = decoder.feed(encode(RemotingCommand(code=11, body=b"abc")))
    assert type(cmd.body) is bytes
    decoder.feed(encode(RemotingCommand(code=11, body=b"zzz")))  # buffer reused and shifted
    assert cmd.body == b"abc"


def test_oversized_frame_refused_from_its_length_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(RemoteProtocolError, match="frame length 1025"):
        decoder.feed(struct.pack(">i", 1025))


def test_oversized_length_refused_even_when_fed_byte_by_byte() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    length = struct.pack(">i", 2**31 - 1)
    for i in range(3):
        assert decoder.feed(length[i : i + 1]) == []
    with pytest.raises(RemoteProtocolError):
        decoder.feed(length[3:])


@pytest.mark.parametrize("length", [-1, 0, 3, -(2**31)])
def test_too_short_length_refused(length: int) -> None:
    with pytest.raises(RemoteProtocolError, match="outside"):
        FrameDecoder().feed(struct.pack(">i", length))


def test_frame_exactly_at_the_bound_is_accepted() -> None:
    frame = encode(RemotingCommand(code=11, body=b"y" * 500))
    decoder = FrameDecoder(max_frame_size=len(frame) - 4)
    assert len(decoder.feed(frame)) == 1


def test_failure_is_sticky() -> None:
    decoder = FrameDecoder()
    with pytest.raises(RemoteProtocolError):
        decoder.feed(struct.pack(">I", 6) + b"\x00\x00\x00\x09{}")  # header longer than frame
    with pytest.raises(RemoteProtocolError, match="already failed"):
        decoder.feed(encode(RemotingCommand(code=1)))


def test_good_frames_before_a_bad_one_are_lost_with_the_stream() -> None:
    # One feed either returns every command it completed or raises: callers close on error.
    good = encode(RemotingCommand(code=1))
    with pytest.raises(RemoteProtocolError):
        FrameDecoder().feed(good + struct.pack(">i", -5))


def test_large_frame_in_small_chunks() -> None:
    body = bytes(range(256)) * (4 * 1024 * 4)  # 4 MiB
    frame = encode(RemotingCommand(code=11, body=body))
    decoder = FrameDecoder()
    view = memoryview(frame)
    out: list[RemotingCommand] = []
    for i in range(0, len(frame), 4096):
        out += decoder.feed(view[i : i + 4096])
    assert len(out) == 1 and out[0].body == body
    assert decoder.buffered_bytes == 0


def test_bad_bound_is_misuse() -> None:
    with pytest.raises(ClientError):
        FrameDecoder(max_frame_size=3)
