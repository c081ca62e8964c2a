"""Bulk decode: the messages of a pull body as columns (Arrow-shaped buffers), for bulk readers such
as Spark's source. Part of the stored codec (see the package docstring); ``stored_columns_py`` is
the Python twin of the C ``stored_columns`` (the same buffers byte for byte, the same refusals:
tests/unit/protocol/test_stored_columns.py).

Each column comes as the buffers Arrow builds an array from, in native byte order: fixed-width
values back to back; variable-width ones as int32 offsets (one more than the values) and the
bytes; a nullable one with a validity bitmap (bit i of byte i // 8, least significant first). So a
reader makes Arrow arrays without a Python object per message.

Every message is checked as every reader checks it (``iter_peek``), and the body of each kept
row as ``body_of`` does (CRC, and inflated when COMPRESSED).
"""

from __future__ import annotations

from array import array
from typing import Any, NamedTuple

from orbitmq.protocol.message import KEY_SEPARATOR, PropertyKey
from orbitmq.protocol.stored._decode import body_of, iter_peek
from orbitmq.protocol.stored._layout import _view

__all__ = ["StoredColumns", "stored_columns_py", "COLUMN_BODY", "COLUMN_TAGS", "COLUMN_MSG_ID",
           "COLUMN_KEYS", "COLUMNS_DATA_MAX"]

# Which variable-width columns to build (the fixed-width ones always are): ``want`` bits.
COLUMN_BODY = 1
COLUMN_TAGS = 2
COLUMN_MSG_ID = 4
COLUMN_KEYS = 8
COLUMNS_DATA_MAX = 0x7FFFFFFF  # bytes one variable-width column holds at most (int32 offsets)
_TOO_MUCH = "stored_columns: a column holds more than 2 GiB"


class StoredColumns(NamedTuple):
    """The kept rows of a pull body as column buffers (see the module docstring).

    ``messages`` is the number of messages in the body, kept or not; ``rows`` those kept. A column
    not asked for has empty buffers. Timestamps are in microseconds. ``keys_offsets`` gives, per
    row, where its keys start among all keys (``key_offsets`` / ``key_data``: a list<string>).
    """

    messages: int
    rows: int
    queue_id: bytearray
    queue_offset: bytearray
    born_us: bytearray
    store_us: bytearray
    reconsume_times: bytearray
    body_offsets: bytearray
    body_data: bytearray
    tags_valid: bytearray
    tags_offsets: bytearray
    tags_data: bytearray
    msg_id_offsets: bytearray
    msg_id_data: bytearray
    keys_offsets: bytearray
    key_offsets: bytearray
    key_data: bytearray


def _bytes(values: array[int]) -> bytearray:
    return bytearray(values.tobytes())


def _offsets(want: bool) -> array[int]:
    return array("i", [0] if want else [])


def _us(ms: int) -> int:
    us = ms * 1000
    if not -(2**63) <= us < 2**63:
        raise OverflowError("stored_columns: a timestamp in microseconds overflows int64")
    return us


def _grow(data: bytearray, value: bytes, offsets: array[int]) -> None:
    if len(data) + len(value) > COLUMNS_DATA_MAX:
        raise OverflowError(_TOO_MUCH)
    data += value
    offsets.append(len(data))


def stored_columns_py(buf: Any, end_offset: int, want: int) -> StoredColumns:
    """The messages of ``buf`` (back-to-back stored messages, a pull body) whose queue offset is
    below ``end_offset``, as columns; ``want`` says which variable-width ones (COLUMN_* bits).

    Raises:
        RemoteProtocolError: as ``iter_peek`` and ``body_of`` (a kept row's body CRC, a bad
            compressed body).
        OverflowError: a column over COLUMNS_DATA_MAX bytes.
    """
    mv = _view(buf)
    qid, rec = array("i"), array("i")
    qoff, born, store = array("q"), array("q"), array("q")
    body_off, tags_off = _offsets(bool(want & COLUMN_BODY)), _offsets(bool(want & COLUMN_TAGS))
    id_off, keys_off = _offsets(bool(want & COLUMN_MSG_ID)), _offsets(bool(want & COLUMN_KEYS))
    key_off = _offsets(bool(want & COLUMN_KEYS))
    body, tags, ids, keys = bytearray(), bytearray(), bytearray(), bytearray()
    valid = bytearray()
    count = rows = 0
    for p in iter_peek(mv):
        count += 1
        if p.queue_offset >= end_offset:
            continue
        born_us, store_us = _us(p.born_timestamp), _us(p.store_timestamp)
        qid.append(p.queue_id)
        qoff.append(p.queue_offset)
        born.append(born_us)
        store.append(store_us)
        rec.append(p.reconsume_times)
        if want & COLUMN_BODY:
            _grow(body, body_of(mv, p, check_crc=True, decompress=True), body_off)
        if want & COLUMN_TAGS:
            tag = p.properties.get(PropertyKey.TAGS)
            if rows % 8 == 0:
                valid.append(0)
            if tag is not None:
                valid[rows // 8] |= 1 << (rows % 8)
            _grow(tags, (tag or "").encode(), tags_off)
        if want & COLUMN_MSG_ID:
            _grow(ids, p.msg_id.encode(), id_off)
        if want & COLUMN_KEYS:
            for key in (p.keys or "").split(KEY_SEPARATOR):
                if key:
                    _grow(keys, key.encode(), key_off)
            keys_off.append(len(key_off) - 1)
        rows += 1
    return StoredColumns(count, rows, _bytes(qid), _bytes(qoff), _bytes(born), _bytes(store),
                         _bytes(rec), _bytes(body_off), body, valid, _bytes(tags_off), tags,
                         _bytes(id_off), ids, _bytes(keys_off), _bytes(key_off), keys)
