"""The stored codec's bulk decode, ``stored_columns``: the C twin against the Python twin (the same
buffers byte for byte, the same refusals), and the Python twin against the row decoder
(``iter_stored_messages``: the columns hold what the messages hold)."""

from __future__ import annotations

import struct
import zlib
from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.message import MessageSysFlag
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.stored import (
    COLUMN_BODY,
    COLUMN_KEYS,
    COLUMN_MSG_ID,
    COLUMN_TAGS,
    encode_stored_message,
    iter_stored_messages,
    stored_columns_py,
)

needs_native = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")
ALL = COLUMN_BODY | COLUMN_TAGS | COLUMN_MSG_ID | COLUMN_KEYS
_text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                max_size=12)


@st.composite
def _message(draw: st.DrawFn, offset: int) -> bytes:
    body = draw(st.binary(max_size=60))
    props: dict[str, str] = {}
    if draw(st.booleans()):
        props["TAGS"] = draw(_text)
    if draw(st.booleans()):
        props["KEYS"] = draw(st.lists(_text.filter(lambda k: " " not in k), max_size=3).map(" ".join))
    if draw(st.booleans()):
        props["UNIQ_KEY"] = draw(_text)
    props.update(draw(st.dictionaries(_text.filter(bool), _text, max_size=2)))
    sys_flag = 0
    if draw(st.booleans()):
        body, sys_flag = zlib.compress(body), int(MessageSysFlag.COMPRESSED)
    if draw(st.booleans()):
        sys_flag |= int(MessageSysFlag.STOREHOST_V6 | MessageSysFlag.BORNHOST_V6)
    six = sys_flag & int(MessageSysFlag.STOREHOST_V6)
    return encode_stored_message(
        topic="Orders", body=body, queue_id=draw(st.integers(0, 7)), flag=3, queue_offset=offset,
        physical_offset=draw(st.integers(0, 2**40)), sys_flag=sys_flag,
        born_timestamp=draw(st.integers(0, 2**43)), born_host=("::1" if six else "10.0.0.2", 9),
        store_timestamp=draw(st.integers(0, 2**43)),
        store_host=("::2" if six else "127.0.0.1", 10911), reconsume_times=draw(st.integers(0, 16)),
        properties=props)


@st.composite
def _body(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(0, 8))
    return b"".join(draw(_message(offset=100 + i)) for i in range(count))


def outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        got = fn(*args)
    except (RemoteProtocolError, OverflowError, ValueError) as e:
        return ("raised", type(e), str(e))
    return ("ok", tuple(bytes(c) if isinstance(c, bytearray) else c for c in got))


def native(buf: Any, end: int, want: int) -> tuple[Any, ...]:
    assert NATIVE is not None
    return NATIVE.stored_columns(buf, end, want)


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_body(), st.integers(95, 110), st.integers(0, 15))
def test_twins_agree_on_good_bodies(buf: bytes, end: int, want: int) -> None:
    assert outcome(native, buf, end, want) == outcome(stored_columns_py, buf, end, want)


@needs_native
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(_body(), st.data())
def test_twins_agree_on_garbled_and_truncated_bodies(buf: bytes, data: st.DataObject) -> None:
    mangled = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        if mangled:
            mangled[data.draw(st.integers(0, len(mangled) - 1))] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(mangled)))
    for candidate in (bytes(mangled), buf[:cut], buf + b"\x00" * data.draw(st.integers(1, 9))):
        assert outcome(native, candidate, 2**62, ALL) == outcome(stored_columns_py, candidate,
                                                                  2**62, ALL)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(_body(), st.integers(95, 110))
def test_columns_hold_what_the_messages_hold(buf: bytes, end: int) -> None:
    cols = stored_columns_py(buf, end, ALL)
    rows = [m for m in iter_stored_messages(buf, check_crc=True, decompress=True)
            if m.queue_offset < end]
    assert (cols.rows, cols.messages) == (len(rows), len(list(iter_stored_messages(buf))))
    assert list(array("q", bytes(cols.queue_offset))) == [m.queue_offset for m in rows]
    assert list(array("q", bytes(cols.born_us))) == [m.born_timestamp * 1000 for m in rows]
    assert list(array("i", bytes(cols.reconsume_times))) == [m.reconsume_times for m in rows]
    assert _strings(cols.body_offsets, cols.body_data) == [m.body for m in rows]
    assert _strings(cols.msg_id_offsets, cols.msg_id_data) == [m.msg_id.encode() for m in rows]
    tags = _strings(cols.tags_offsets, cols.tags_data)
    valid = [bool(cols.tags_valid[i // 8] >> (i % 8) & 1) for i in range(len(rows))]
    assert [t.decode() if v else None for t, v in zip(tags, valid, strict=True)] == [
        m.tags for m in rows]
    keys = _strings(cols.key_offsets, cols.key_data)
    per_row = list(array("i", bytes(cols.keys_offsets)))
    assert [[k.decode() for k in keys[a:b]] for a, b in zip(per_row, per_row[1:], strict=False)] == [
        m.keys for m in rows]


def _strings(offsets: bytearray, data: bytearray) -> list[bytes]:
    ends = list(array("i", bytes(offsets)))
    return [bytes(data[a:b]) for a, b in zip(ends, ends[1:], strict=False)]


@pytest.mark.parametrize("column_twin", [stored_columns_py, stored.stored_columns])
def test_refusals_name_the_message(column_twin: Any) -> None:
    good = encode_stored_message(topic="T", body=b"abc", queue_offset=1, properties={"TAGS": "a"})
    crc_at = struct.calcsize(">ii")
    bad_crc = good[:crc_at] + b"\x00\x00\x00\x01" + good[crc_at + 4:]
    with pytest.raises(RemoteProtocolError, match="stored message at 0: body CRC mismatch"):
        column_twin(bad_crc, 10, COLUMN_BODY)
    assert column_twin(bad_crc, 10, COLUMN_TAGS).rows == 1  # a body not read is not checked
    with pytest.raises(RemoteProtocolError, match=f"stored message at {len(good)}: bad magic"):
        column_twin(good + b"\x00" * 12, 10, 0)
    with pytest.raises(RemoteProtocolError, match="3 trailing bytes"):
        column_twin(good + b"\x00" * 3, 10, 0)
    squeezed = encode_stored_message(topic="T", body=b"not zlib", queue_offset=1,
                                     sys_flag=int(MessageSysFlag.COMPRESSED))
    with pytest.raises(RemoteProtocolError, match="bad compressed body"):
        column_twin(squeezed, 10, COLUMN_BODY)
    huge = encode_stored_message(topic="T", body=b"x", queue_offset=1, born_timestamp=2**62)
    with pytest.raises(OverflowError, match="microseconds overflows int64"):
        column_twin(huge, 10, 0)
