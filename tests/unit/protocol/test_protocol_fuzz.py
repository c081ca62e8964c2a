"""Property tests of the whole codec: round trips of every command shape and every header, and
garbage of every kind, which must decode or raise RemoteProtocolError and nothing else."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import (
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode_batch,
    decode_command,
    encode,
    encode_batch,
)
from orbitmq.protocol import bodies as b
from orbitmq.protocol import headers as h
from orbitmq.protocol._header_codec import _spec
from orbitmq.protocol._lenient import OneOf

FAST = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLOW = settings(max_examples=40, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

I16 = st.integers(-(2**15), 2**15 - 1)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
SMALL_BODIES = st.one_of(st.just(b""), st.binary(max_size=300))
# Large bodies built by repetition: cheap to generate, up to ~256 KiB.
LARGE_BODIES = st.builds(lambda unit, n: unit * n, st.binary(min_size=1, max_size=128),
                         st.integers(1, 2048))
EXT_FIELDS = st.dictionaries(st.text(max_size=16), st.text(max_size=48), max_size=8)

HEADER_CLASSES = [obj for obj in (getattr(h, name) for name in h.__all__)
                  if isinstance(obj, type) and issubclass(obj, h.Header) and obj is not h.Header]
BODY_CLASSES = [obj for obj in (getattr(b, name) for name in b.__all__)
                if isinstance(obj, type) and issubclass(obj, b.JsonBody) and obj is not b.JsonBody]


@st.composite
def commands(draw: st.DrawFn, bodies: st.SearchStrategy[bytes] = SMALL_BODIES
             ) -> RemotingCommand:
    """Any command our encoder accepts, in either serialize type."""
    serialize_type = draw(st.sampled_from(SerializeType))
    binary = serialize_type is SerializeType.ROCKETMQ
    remark = draw(st.none() | st.text(min_size=1 if binary else 0, max_size=60))
    return RemotingCommand(
        code=draw(I16 if binary else I32),
        opaque=draw(I32),
        flag=draw(I32),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(I16 if binary else I32),
        remark=remark,
        ext_fields=draw(EXT_FIELDS),
        body=draw(bodies),
        serialize_type=serialize_type,
    )


def feed_in_chunks(decoder: FrameDecoder, stream: bytes, sizes: list[int]) -> list[RemotingCommand]:
    out: list[RemotingCommand] = []
    pos, i = 0, 0
    while pos < len(stream):
        size = sizes[i % len(sizes)] if sizes else len(stream)
        out += decoder.feed(stream[pos : pos + size])
        pos, i = pos + size, i + 1
    return out


# ----------------------------------------------------------------------------- command round trips
@FAST
@given(commands())
def test_decode_command_inverts_encode(cmd: RemotingCommand) -> None:
    assert decode_command(encode(cmd)[4:]) == cmd


@SLOW
@given(commands(LARGE_BODIES))
def test_large_bodies_whole_and_chunked(cmd: RemotingCommand) -> None:
    frame = encode(cmd)
    assert FrameDecoder().feed(frame) == [cmd]
    assert feed_in_chunks(FrameDecoder(), frame, [1000, 7, 65536]) == [cmd]


@SLOW
@given(commands())
def test_byte_by_byte(cmd: RemotingCommand) -> None:
    frame = encode(cmd)
    decoder = FrameDecoder()
    out: list[RemotingCommand] = []
    for i in range(len(frame)):
        out += decoder.feed(frame[i : i + 1])
    assert out == [cmd]
    assert decoder.buffered_bytes == 0


@FAST
@given(st.lists(commands(), min_size=1, max_size=6),
       st.lists(st.integers(1, 300), max_size=10))
def test_stream_of_commands_in_random_chunks(cmds: list[RemotingCommand], sizes: list[int]) -> None:
    stream = b"".join(encode(cmd) for cmd in cmds)
    decoder = FrameDecoder()
    assert feed_in_chunks(decoder, stream, sizes) == cmds
    assert decoder.buffered_bytes == 0


@FAST
@given(commands(), st.sampled_from([0, 1, 2, 3]), st.integers(0, 10_000))
def test_responses_echo_the_request(cmd: RemotingCommand, code: int, opaque: int) -> None:
    cmd.opaque = opaque
    response = cmd.response(code, "r", {"k": "v"}, b"body")
    back = decode_command(encode(response)[4:])
    assert back.is_response and back.opaque == opaque
    assert back.serialize_type == cmd.serialize_type


# ----------------------------------------------------------------------------- header round trips
def _value_strategy(spec: Any, optional: bool) -> st.SearchStrategy[Any]:
    """Values a header field accepts: any text, a boolean, or an integer within its range."""
    if spec.kind is str:  # an optional string given as "" reads back as absent (None)
        if isinstance(spec.check, OneOf):
            base: st.SearchStrategy[Any] = st.sampled_from(spec.check.choices)
        else:
            return st.none() | st.text(min_size=1, max_size=30) if optional else st.text(max_size=30)
    elif spec.kind is bool:
        base = st.booleans()
    elif spec.check.choices is not None:  # a Java enum sent as its number (a verdict)
        base = st.sampled_from(sorted(spec.check.choices))
    elif spec.check.mask is not None:
        base = st.integers(0, spec.check.mask).map(spec.check.mask.__and__)
    else:
        base = st.integers(spec.check.low, spec.check.high)
    return st.none() | base if optional else base


def headers_of(cls: type[h.Header]) -> st.SearchStrategy[h.Header]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{spec.name: _value_strategy(spec, type(None) in typing.get_args(
        hints[spec.name])) for spec in _spec(cls)})


ANY_HEADER = st.sampled_from(HEADER_CLASSES).flatmap(headers_of)


@FAST
@given(ANY_HEADER)
def test_every_header_round_trips(header: h.Header) -> None:
    fields = header.to_ext_fields()
    assert all(type(v) is str for v in fields.values())
    assert type(header).from_ext_fields(fields) == header


@FAST
@given(headers_of(h.SendMessageRequestHeader))
def test_send_header_v2_round_trips(header: h.SendMessageRequestHeader) -> None:
    fields = header.to_v2_ext_fields()
    assert set(fields) <= set("abcdefghijklmn")
    assert h.SendMessageRequestHeader.from_v2_ext_fields(fields) == header
    assert h.SendMessageRequestHeader.from_any_ext_fields(fields) == header


@FAST
@given(ANY_HEADER, st.sampled_from(SerializeType))
def test_headers_survive_a_trip_through_a_frame(header: h.Header, stype: SerializeType) -> None:
    cmd = RemotingCommand(code=1, ext_fields=header.to_ext_fields(), serialize_type=stype)
    (back,) = FrameDecoder().feed(encode(cmd))
    assert type(header).from_ext_fields(back.ext_fields) == header


# ----------------------------------------------------------------------------- garbage
def only_protocol_errors(action: Callable[[], object]) -> None:
    try:
        action()
    except RemoteProtocolError:
        pass


@FAST
@given(st.binary(max_size=400), st.integers(1, 64))
def test_random_bytes_into_the_decoder(data: bytes, chunk: int) -> None:
    only_protocol_errors(lambda: FrameDecoder(max_frame_size=4096).feed(data))
    decoder = FrameDecoder(max_frame_size=4096)
    only_protocol_errors(lambda: [decoder.feed(data[i : i + chunk])
                                  for i in range(0, len(data), chunk)])
    only_protocol_errors(lambda: decode_command(data))
    only_protocol_errors(lambda: decode_command(memoryview(data)))


@FAST
@given(commands(), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                            min_size=1, max_size=6))
def test_mutated_frames(cmd: RemotingCommand, edits: list[tuple[int, int]]) -> None:
    frame = bytearray(encode(cmd))
    for position, value in edits:
        frame[position % len(frame)] = value
    only_protocol_errors(lambda: FrameDecoder().feed(bytes(frame)))
    only_protocol_errors(lambda: decode_command(bytes(frame[4:])))


@FAST
@given(commands(), st.data())
def test_mutated_headers_keep_the_frame_length_consistent(cmd: RemotingCommand,
                                                          data: st.DataObject) -> None:
    frame = bytearray(encode(cmd))
    header_end = 8 + (int.from_bytes(frame[4:8], "big") & 0xFFFFFF)
    position = data.draw(st.integers(4, max(4, header_end - 1)))
    frame[position] = data.draw(st.integers(0, 255))
    only_protocol_errors(lambda: decode_command(bytes(frame[4:])))


@FAST
@given(commands(), st.data())
def test_truncated_frames(cmd: RemotingCommand, data: st.DataObject) -> None:
    frame = encode(cmd)
    cut = data.draw(st.integers(0, len(frame) - 1))
    decoder = FrameDecoder()
    assert decoder.feed(frame[:cut]) == []  # incomplete: nothing yet, no error
    assert decoder.buffered_bytes == cut
    only_protocol_errors(lambda: decode_command(frame[4:cut]))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20,
)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "language", "version", "remark",
                               "extFields", "x"])


@FAST
@given(st.dictionaries(HEADER_KEYS, JSON_VALUES, max_size=8) | JSON_VALUES)
def test_random_json_headers(header: Any) -> None:
    try:
        raw = orjson.dumps(header)
    except TypeError:  # integers beyond 64 bits
        return
    frame = len(raw).to_bytes(4, "big") + raw
    only_protocol_errors(lambda: decode_command(frame))


@FAST
@given(st.sampled_from(HEADER_CLASSES),
       st.dictionaries(st.text(max_size=24) | st.sampled_from(["topic", "queueId", "clientID",
                                                              "a", "e", "consumerGroup"]),
                       JSON_VALUES, max_size=10))
def test_random_ext_fields_into_headers(cls: type[h.Header], fields: dict[str, Any]) -> None:
    only_protocol_errors(lambda: cls.from_ext_fields(fields))
    if cls is h.SendMessageRequestHeader:
        only_protocol_errors(lambda: h.SendMessageRequestHeader.from_v2_ext_fields(fields))


@FAST
@given(st.sampled_from(BODY_CLASSES), JSON_VALUES)
def test_random_json_into_bodies(cls: type[b.JsonBody], value: Any) -> None:
    only_protocol_errors(lambda: cls.from_dict(value))
    try:
        raw = orjson.dumps(value)
    except TypeError:
        return
    only_protocol_errors(lambda: cls.from_json(raw))


@FAST
@given(st.sampled_from(BODY_CLASSES), st.binary(max_size=200))
def test_random_bytes_into_bodies(cls: type[b.JsonBody], raw: bytes) -> None:
    only_protocol_errors(lambda: cls.from_json(raw))
    only_protocol_errors(lambda: b.loads_lenient(raw))


@FAST
@given(st.dictionaries(st.integers(-1000, 1000), st.text(max_size=10), max_size=6))
def test_bare_numeric_keys_parse_like_quoted_ones(table: dict[int, str]) -> None:
    quoted = orjson.dumps({str(k): v for k, v in table.items()})
    bare = ("{" + ",".join(f"{k}:{orjson.dumps(v).decode()}" for k, v in table.items())
            + "}").encode()
    assert b.loads_lenient(bare) == orjson.loads(quoted)


# ----------------------------------------------------------------------------- batches
PROPERTY_CHARS = st.characters(codec="utf-8", exclude_characters="\x00\x01\x02")
BATCH_MESSAGES = st.lists(
    st.tuples(I32, st.binary(max_size=200),
              st.dictionaries(st.text(PROPERTY_CHARS, min_size=1,
                                      max_size=12),
                              st.text(PROPERTY_CHARS,
                                      max_size=30),
                              max_size=5)),
    max_size=8,
)


@FAST
@given(BATCH_MESSAGES)
def test_batches_round_trip(messages: list[tuple[int, bytes, dict[str, str]]]) -> None:
    assert [tuple(entry) for entry in decode_batch(encode_batch(messages))] == messages


@FAST
@given(st.binary(max_size=300))
def test_random_bytes_into_batches(raw: bytes) -> None:
    only_protocol_errors(lambda: decode_batch(raw))


@FAST
@given(BATCH_MESSAGES.filter(bool), st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 255)),
                                              min_size=1, max_size=4))
def test_mutated_batches(messages: list[tuple[int, bytes, dict[str, str]]],
                         edits: list[tuple[int, int]]) -> None:
    raw = bytearray(encode_batch(messages))
    for position, value in edits:
        raw[position % len(raw)] = value
    only_protocol_errors(lambda: decode_batch(bytes(raw)))
    only_protocol_errors(lambda: decode_batch(bytes(raw[: len(raw) // 2])))


# -------------------------------------------------------- reading into a lent buffer (BufferedProtocol)
def read_in_chunks(decoder: FrameDecoder, lent: memoryview, stream: bytes, sizes: list[int],
                   take: Callable[[memoryview, int], int] | None = None,
                   out: list[Any] | None = None) -> list[Any]:
    """What a socket does with ``recv_buffer`` and ``received``: reads of ``sizes`` bytes (at most
    what the buffer offers); a size of 0 is a read that found nothing (EAGAIN), and another
    decoder reads into ``lent`` in between, as another connection of the same thread would."""
    out = [] if out is None else out
    sizes = sizes if any(sizes) else [*sizes, len(stream)]
    pos, i = 0, 0
    while pos < len(stream):
        size = sizes[i % len(sizes)]
        i += 1
        room = decoder.recv_buffer(lent)
        if size == 0:
            other = FrameDecoder()
            noise = other.recv_buffer(lent)
            noise[:8] = b"\x00\x00\x00\x0a\x00\x00\x00\x02"  # half a frame of the other connection
            other.received(8, lent, None, out.append)
            continue
        n = min(size, len(room), len(stream) - pos)
        room[:n] = stream[pos : pos + n]
        decoder.received(n, lent, take, out.append)
        pos += n
    return out


@FAST
@given(st.lists(commands(), min_size=1, max_size=6),
       st.lists(st.integers(0, 700), max_size=10), st.sampled_from([64, 512, 1 << 16]))
def test_reading_into_a_lent_buffer_gives_the_commands_in_order(
        cmds: list[RemotingCommand], sizes: list[int], lent_size: int) -> None:
    """Frames cut by a read's end, frames longer than the lent buffer (read into their own),
    reads that bring nothing, and the buffer used by another connection between two reads."""
    stream = b"".join(encode(cmd) for cmd in cmds)
    decoder = FrameDecoder()
    assert read_in_chunks(decoder, memoryview(bytearray(lent_size)), stream, sizes) == cmds
    assert decoder.buffered_bytes == 0


@FAST
@given(st.lists(commands(), min_size=1, max_size=8), st.lists(st.integers(1, 700), max_size=10),
       st.sets(st.integers(0, 7)))
def test_a_fast_reader_and_the_decoder_share_a_read_in_order(
        cmds: list[RemotingCommand], sizes: list[int], taken: set[int]) -> None:
    """``take`` handles the frames it wants (here: those at the indexes ``taken``) and stops at
    the first it does not; that one is decoded, then ``take`` is asked again."""
    frames = [encode(cmd) for cmd in cmds]
    starts, at = [], 0
    for frame in frames:
        starts.append(at)
        at += len(frame)
    out: list[Any] = []
    consumed = 0  # stream offset of the lent view's first byte, tracked by the test

    def take(view: memoryview, pos: int) -> int:
        while len(view) - pos >= 4:
            total = int.from_bytes(view[pos : pos + 4], "big") + 4
            index = starts.index(consumed + pos) if consumed + pos in starts else -1
            if index not in taken or len(view) - pos < total:
                break
            assert bytes(view[pos : pos + total]) == frames[index]
            out.append(("taken", index))
            pos += total
        return pos

    stream = b"".join(frames)
    decoder, lent = FrameDecoder(), memoryview(bytearray(1 << 16))
    pos, i = 0, 0
    while pos < len(stream):
        room = decoder.recv_buffer(lent)
        consumed = pos - decoder.buffered_bytes  # the view ``take`` gets starts at a frame's start
        n = min(sizes[i % len(sizes)] if sizes else len(stream), len(room), len(stream) - pos)
        i += 1
        room[:n] = stream[pos : pos + n]
        decoder.received(n, lent, take, out.append)
        pos += n
    want = [("taken", k) if k in taken else cmd for k, cmd in enumerate(cmds)]
    assert out == want


@FAST
@given(st.binary(max_size=400), st.lists(st.integers(0, 64), max_size=6))
def test_random_bytes_read_into_a_lent_buffer(data: bytes, sizes: list[int]) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    only_protocol_errors(lambda: read_in_chunks(decoder, memoryview(bytearray(128)), data, sizes))


@FAST
@given(st.lists(commands(LARGE_BODIES | SMALL_BODIES), min_size=1, max_size=5),
       st.lists(commands(), min_size=1, max_size=5),
       st.lists(st.tuples(st.booleans(), st.integers(1, 70_000)), min_size=1, max_size=40))
def test_connections_of_one_thread_take_turns_in_the_lent_buffer(
        first: list[RemotingCommand], second: list[RemotingCommand],
        turns: list[tuple[bool, int]]) -> None:
    """Two connections read into one buffer in any order, each keeping the frame its last read
    cut and putting it back in front of its next read."""
    lent = memoryview(bytearray(1 << 17))
    streams = [b"".join(encode(c) for c in first), b"".join(encode(c) for c in second)]
    decoders, got = [FrameDecoder(), FrameDecoder()], [[], []]  # type: ignore[var-annotated]
    positions, i = [0, 0], 0
    while positions[0] < len(streams[0]) or positions[1] < len(streams[1]):
        which, size = turns[i % len(turns)]
        i += 1
        k = int(which) if positions[int(which)] < len(streams[int(which)]) else 1 - int(which)
        room = decoders[k].recv_buffer(lent)
        n = min(size, len(room), len(streams[k]) - positions[k])
        room[:n] = streams[k][positions[k] : positions[k] + n]
        decoders[k].received(n, lent, None, got[k].append)
        positions[k] += n
    assert got == [first, second]
    assert decoders[0].buffered_bytes == decoders[1].buffered_bytes == 0
