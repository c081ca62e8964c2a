"""The column encoder (protocol.column_batch): byte for byte the per-Message batch encoder, its C
twin equal to its Python twin in bytes and in refusals, Arrow buffers read in place."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orbitmq.client.producer.column_send import message_columns
from orbitmq.client.producer.send_codec import prepare_batch
from orbitmq.errors import ClientError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.column_batch import (
    BufferColumn,
    IdBlock,
    MessageColumns,
    encode_batch_columns_py,
    encode_columns,
)
from orbitmq.protocol.message import RESERVED_PROPERTIES, Message
from orbitmq.protocol.msgid import UniqIdGenerator
from orbitmq.protocol.native import NATIVE

NATIVE_ENCODE = getattr(NATIVE, "encode_batch_columns", None)
HEAD = "7F000001" + "0007" + "00000009" + "0001E240"  # 28 characters, as UniqIdGenerator's
SIZE_MAX = 1 << 20

_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"),
                max_size=12)
_name = _text.filter(lambda s: s != "" and s not in RESERVED_PROPERTIES)
_message = st.builds(
    lambda body, tags, keys, props, flag: Message("T", body, tags=tags, keys=keys, flag=flag,
                                                  properties=props),
    st.binary(min_size=1, max_size=300), st.none() | _text, st.none() | _text | st.lists(_text,
                                                                                        max_size=3),
    st.dictionaries(_name, _text, max_size=4), st.integers(-(2**31), 2**31 - 1))


def _twins(columns: MessageColumns, ids, *, start=0, rows_max=0, bytes_max=SIZE_MAX,
           size_max=SIZE_MAX):
    """What each twin gives (a result or the ClientError's text), checked equal."""
    rows_max = rows_max or min(len(columns), 0x10000)
    args = (columns.bodies, columns.keys, columns.tags, columns.properties, columns.flags, ids,
            start, rows_max, bytes_max, size_max, RESERVED_PROPERTIES)
    outcomes = []
    for encode in [encode_batch_columns_py] + ([NATIVE_ENCODE] if NATIVE_ENCODE else []):
        try:
            outcomes.append(tuple(encode(*args)))
        except ClientError as e:
            outcomes.append(f"ClientError: {e}")
    assert all(o == outcomes[0] for o in outcomes), outcomes
    return outcomes[0]


def _arrow(values, kind) -> BufferColumn:
    """An Arrow array of ``values`` (sliced by one, so that its offset is not 0) as buffers."""
    array = pa.array([None, *values], kind).slice(1)
    validity, offsets, data = array.buffers()
    return BufferColumn(offsets, data if data is not None else b"", validity, array.offset,
                        len(array))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message, min_size=1, max_size=20))
def test_columns_encode_as_the_per_message_encoder_does(messages):
    ids = [f"{HEAD}{i:04X}" for i in range(len(messages))]
    expected = prepare_batch(messages, ids, SIZE_MAX)
    columns = message_columns(messages)
    assume(columns is not None)  # keys=[""]: the per-Message encoder's own case
    assert columns is not None
    body, rows, msg_ids = _twins(columns, list(ids))
    assert (body, rows, msg_ids) == (expected.body, len(messages), expected.msg_id)
    # the same rows as Arrow columns read in place, and with an id block
    arrow = MessageColumns(_arrow([m.body for m in messages], pa.binary()),
                           keys=_arrow(columns.keys, pa.string()),
                           tags=_arrow(columns.tags, pa.string()),
                           properties=columns.properties, flags=columns.flags)
    assert _twins(arrow, IdBlock(HEAD, 0)) == (expected.body, len(messages), expected.msg_id)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=2000), min_size=1, max_size=40),
       st.integers(1, 12), st.integers(1, 6000), st.integers(0, 0xFFFF))
def test_chunks_cut_at_rows_and_bytes_and_join_into_the_whole(bodies, rows_max, bytes_max, counter):
    columns = MessageColumns(_arrow(bodies, pa.binary()), keys=[f"k{i}" for i in range(len(bodies))])
    whole, _, whole_ids = _twins(columns, IdBlock(HEAD, counter))
    parts, ids, start = [], [], 0
    while start < len(bodies):
        body, rows, msg_ids = _twins(columns, IdBlock(HEAD, counter + start), start=start,
                                     rows_max=rows_max, bytes_max=bytes_max)
        assert 1 <= rows <= rows_max and (rows == 1 or len(body) <= bytes_max)
        parts.append(body)
        ids.append(msg_ids)
        start += rows
    assert b"".join(parts) == whole and ",".join(ids) == whole_ids
    assert [e.body for e in decode_batch(whole)] == bodies


def test_an_id_block_is_what_the_generator_would_have_made_one_by_one():
    def clock() -> int:
        return 1_000

    one_by_one = UniqIdGenerator("10.0.0.1", pid=7, random_part=9, clock_ms=clock)
    block = UniqIdGenerator("10.0.0.1", pid=7, random_part=9, clock_ms=clock)
    first_head, first_counter = block.next_block(2)
    assert [one_by_one.next(), one_by_one.next()] == [
        f"{first_head}{first_counter + i:04X}" for i in range(2)]
    head, counter = block.next_block(3)
    assert counter == 2 and len(head) == 28
    _, ids = encode_columns(MessageColumns([b"a", b"b"]), IdBlock(head, 0xFFFF), rows_max=2,
                            bytes_max=1000, message_size_max=1000)[1:]
    assert ids == f"{head}FFFF,{head}0000"  # the counter wraps as the generator's does
    with pytest.raises(ClientError, match="an id block holds 1..65536 ids"):
        block.next_block(0x10001)


@pytest.mark.parametrize(("columns", "limits", "refusal"), [
    (MessageColumns([b""]), {}, "row 0: message body is empty"),
    (MessageColumns([b"x", None]), {"rows_max": 2}, "row 1: message body is null"),
    (MessageColumns(["text"]), {}, "row 0: message body must be bytes, not str"),
    (MessageColumns([b"x" * 101]), {"size_max": 100, "bytes_max": 100},
     "row 0: message body of 101 bytes exceeds the maximum 100"),
    (MessageColumns([b"x" * 100]), {"size_max": 100, "bytes_max": 100},
     "row 0: message of 174 bytes exceeds the maximum 100"),
    (MessageColumns([b"x"], tags=["a\x01b"]), {}, "row 0: tags holds a NUL or a separator"),
    (MessageColumns([b"x"], keys=["\ud800"]), {}, "row 0: keys is not UTF-8"),
    (MessageColumns([b"x"], keys=[b"k"]), {}, "row 0: keys must be str, not bytes"),
    (MessageColumns([b"x"], properties=[{"TAGS": "a"}]), {},
     "row 0: message property 'TAGS' is reserved by the system"),
    (MessageColumns([b"x"], properties=[{"": "a"}]), {}, "row 0: a message property has an empty"),
    (MessageColumns([b"x"], properties=[{"a": "\x00"}]), {},
     "row 0: message property 'a' holds a reserved character"),
    (MessageColumns([b"x"], properties=[{"é": "\udc80"}]), {},
     "row 0: message property 'é' is not UTF-8"),
    (MessageColumns([b"x"], properties=[{"a": 1}]), {}, "row 0: message property names and"),
    (MessageColumns([b"x"], properties=[["a"]]), {}, "row 0: properties must be a dict or None"),
    (MessageColumns([b"x"], properties=[{"a": "v" * 32_800}]), {},
     "row 0: message properties of 32855 bytes exceed 32767"),
    (MessageColumns([b"x"], flags=[2**31]), {}, "row 0: flag 2147483648 does not fit"),
    (MessageColumns([b"x"], flags=["1"]), {}, "row 0: flag '1' does not fit"),
    (MessageColumns([b"x", b"y"], keys=["k"]), {}, "column keys has 1 rows, body 2"),
    (MessageColumns([b"x"], properties=_arrow(["a"], pa.string())), {},
     "properties and flags must be lists or tuples"),
    (MessageColumns(b"x"), {}, "column body must be a list, a tuple or a BufferColumn, not bytes"),
    (MessageColumns([b"x"]), {"rows_max": 0x10001}, "rows_max must be 1..65536"),
    (MessageColumns([b"x"]), {"bytes_max": 200, "size_max": 100}, "bytes_max must be 1.."),
    (MessageColumns([b"x"]), {"start": 1}, "batch is empty: no row from 1 of 1"),
    (MessageColumns([b"x"], tags=_arrow([b"\xff"], pa.binary())), {}, "row 0: tags is not UTF-8"),
    (MessageColumns(BufferColumn(b"\0" * 4, b"", None, 0, 1)), {},
     "column body: offsets buffer too short"),
    (MessageColumns(BufferColumn(pa.array([0, 9], pa.int32()).buffers()[1], b"abc", None, 0, 1)),
     {}, "row 0: column body offsets out of its data"),
])
def test_bad_rows_and_columns_are_refused_alike_naming_the_row(columns, limits, refusal):
    size_max = limits.get("size_max", SIZE_MAX)
    got = _twins(columns, IdBlock(HEAD, 0), start=limits.get("start", 0),
                 rows_max=limits.get("rows_max", 1), bytes_max=limits.get("bytes_max", size_max),
                 size_max=size_max)
    assert isinstance(got, str) and got.startswith(f"ClientError: {refusal}"), got


@pytest.mark.parametrize(("ids", "refusal"), [
    (["ok"], "row 1: no message id (ids has 1)"),
    (["ok", ""], "row 1: message id is empty"),
    (["ok", "a,\x02"], "row 1: message id holds a NUL or a separator"),
    (("é" * 28, 0), "an id block's head must be ASCII"),
    (("A" * 300, 0), "an id block's head is longer than 256"),
    (("A", "0"), "an id block is (head: str, counter: int)"),
    ({"A": 0}, "ids must be an IdBlock or a list of str, not dict"),
])
def test_bad_ids_are_refused_alike(ids, refusal):
    got = _twins(MessageColumns([b"x", b"y"]), ids, rows_max=2)
    assert isinstance(got, str) and got.startswith(f"ClientError: {refusal}"), got


def test_a_body_of_the_largest_size_that_fits_goes_alone():
    size_max = 1000
    overhead = 22 + len(f"UNIQ_KEY\x01{HEAD}0000\x02WAIT\x01true\x02")
    columns = MessageColumns([b"a" * (size_max - overhead), b"b"])
    body, rows, _ = _twins(columns, IdBlock(HEAD, 0), rows_max=2, bytes_max=size_max,
                           size_max=size_max)
    assert (len(body), rows) == (size_max, 1)
    assert _twins(columns, IdBlock(HEAD, 1), start=1, rows_max=2, bytes_max=size_max,
                  size_max=size_max)[1] == 1


def test_messages_with_reserved_properties_keep_the_per_message_encoder():
    kept = Message.with_system_properties("T", b"x", properties={"UNIQ_KEY": "mine"})
    assert message_columns([Message("T", b"y"), kept]) is None
    assert message_columns([Message("T", b"y", keys=["a", "b"])]).keys == ["a b"]
    # keys=[""] sends an empty KEYS property, which a column (empty: no keys) cannot say
    assert message_columns([Message("T", b"y", keys=[""])]) is None
