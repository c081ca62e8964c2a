"""SEND_BATCH_MESSAGE bodies straight from columns, without a Message object per row.

A bulk writer (the Spark sink) holds its rows as columns: bodies, keys, tags, property maps. This
module lays them out as ``protocol.batch`` does (one entry per row: head, body, properties
``user..., TAGS, KEYS, UNIQ_KEY, WAIT``, the order the SDK's per-Message encoder gives), byte for
byte the same, so the broker sees no difference. A column is either a list or tuple of values, or a
:class:`BufferColumn`: Arrow's binary/string layout (int32 offsets, data bytes, validity bitmap),
read in place, so an Arrow array goes to the wire without a Python object per row.

One call takes rows from ``start`` until ``rows_max`` rows or ``bytes_max`` bytes (at least one
row), so a caller cuts a large column set into requests without sizing rows itself. Every row is
checked as ``check_message`` and ``encode_properties`` would check it, with errors naming the row.

The C twin (``encode_batch_columns`` in ``protocol/_native/column_batch.c``) takes the same arguments and gives
the same bytes and the same refusals; :func:`encode_batch_columns` picks it unless
``ORBITMQ_PURE_PYTHON=1`` or no compiler built it. tests/unit/protocol/test_column_batch.py compares the
two with each other and with ``protocol.batch.encode_batch``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from orbitmq.errors import ClientError
from orbitmq.protocol.message import RESERVED_PROPERTIES, PropertyKey
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.properties import PROPERTIES_SIZE_MAX

__all__ = ["BufferColumn", "IdBlock", "EncodedColumns", "Column", "MessageColumns",
           "encode_batch_columns", "encode_columns",
           "encode_batch_columns_py", "column_length", "ID_BLOCK_ROWS_MAX", "ID_HEAD_LENGTH"]

ID_BLOCK_ROWS_MAX = 0x10000  # an IdBlock's counter is 16 bits: more rows would repeat ids
ID_HEAD_LENGTH = 28  # UniqIdGenerator: 24 hex digits of host/pid/random, 8 of milliseconds
_HEAD = struct.Struct(">iiiii")  # total size, magic code, body crc, flag, body length
_I16 = struct.Struct(">h")
_ENTRY_OVERHEAD = _HEAD.size + _I16.size
_ID_HEAD_MAX = 256
_INT32 = range(-0x80000000, 0x80000000)
_TAIL = f"\x02{PropertyKey.WAIT}\x01true\x02".encode()  # after the UNIQ_KEY value
_UNIQ = f"{PropertyKey.UNIQ_KEY}\x01".encode()
_TAGS = f"{PropertyKey.TAGS}\x01".encode()
_KEYS = f"{PropertyKey.KEYS}\x01".encode()


@dataclasses.dataclass(frozen=True, slots=True)
class BufferColumn:
    """A column of byte strings in Arrow's binary / string layout, read in place (not a tuple:
    a tuple is a column of values).

    Attributes:
        offsets: a buffer of native int32: value i is ``data[offsets[offset+i]:offsets[offset+i+1]]``.
        data: the values' bytes.
        validity: Arrow's bitmap (bit ``offset+i`` set: value i present), or None: all present.
        offset: the first row's index in ``offsets`` and ``validity`` (a sliced Arrow array).
        length: the number of rows.
    """

    offsets: Any
    data: Any
    validity: Any
    offset: int
    length: int


class IdBlock(NamedTuple):
    """Message ids of consecutive rows: ``head`` then ``(counter + k) & 0xFFFF`` as 4 upper-case
    hex digits for the k-th row taken (``UniqIdGenerator.next_block``)."""

    head: str
    counter: int


class EncodedColumns(NamedTuple):
    """One batch body: the rows ``start .. start+rows`` and their ids, comma-joined."""

    body: bytes
    rows: int
    msg_ids: str


Column = BufferColumn | Sequence[Any]


def column_length(column: Column) -> int:
    """Rows of a column (a BufferColumn's ``length``, a sequence's ``len``)."""
    return column.length if isinstance(column, BufferColumn) else len(column)


@dataclasses.dataclass(frozen=True, slots=True)
class MessageColumns:
    """Rows of one topic as columns, what :func:`encode_batch_columns` reads (see its Args).

    ``len()`` is the number of rows (the bodies'); the other columns must have as many.
    """

    bodies: Column
    keys: Column | None = None
    tags: Column | None = None
    properties: Sequence[Mapping[str, str] | None] | None = None
    flags: Sequence[int] | None = None

    def __len__(self) -> int:
        return column_length(self.bodies)


def encode_columns(columns: MessageColumns, ids: IdBlock | Sequence[str], *, start: int = 0,
                   rows_max: int, bytes_max: int, message_size_max: int) -> EncodedColumns:
    """:func:`encode_batch_columns` of a :class:`MessageColumns`."""
    return encode_batch_columns(columns.bodies, ids, keys=columns.keys, tags=columns.tags,
                                properties=columns.properties, flags=columns.flags, start=start,
                                rows_max=rows_max, bytes_max=bytes_max,
                                message_size_max=message_size_max)


def encode_batch_columns(
    bodies: Column, ids: IdBlock | Sequence[str], *, keys: Column | None = None,
    tags: Column | None = None, properties: Sequence[Mapping[str, str] | None] | None = None,
    flags: Sequence[int] | None = None, start: int = 0, rows_max: int, bytes_max: int,
    message_size_max: int,
) -> EncodedColumns:
    """One batch body of the rows from ``start``: as many as fit ``rows_max`` rows and
    ``bytes_max`` bytes (at least one).

    Args:
        bodies: the rows' bodies (bytes-like; never empty, at most ``message_size_max`` bytes).
        ids: an IdBlock, or the ids of the rows taken (``ids[k]`` for row ``start + k``).
        keys: per row the KEYS text (several keys joined by spaces), None or "" for none.
        tags: per row the TAGS text, None or "" for none.
        properties: per row the user properties (no name the system reserves), or None.
        flags: per row the flag (signed 32-bit), or None for 0 everywhere.
        bytes_max: the batch's target size; a first row larger than it goes alone.
        message_size_max: the largest body, and the largest batch body, in bytes.

    Raises:
        ClientError: a bad row (named), columns of different lengths, no row left, or limits
            out of range (``rows_max`` 1..65536, ``bytes_max`` 1..``message_size_max``).
    """
    if NATIVE is not None:
        encode = getattr(NATIVE, "encode_batch_columns", None)
        if encode is not None:
            return EncodedColumns(*encode(bodies, keys, tags, properties, flags, ids, start,
                                          rows_max, bytes_max, message_size_max,
                                          RESERVED_PROPERTIES))
    return encode_batch_columns_py(bodies, keys, tags, properties, flags, ids, start, rows_max,
                                   bytes_max, message_size_max, RESERVED_PROPERTIES)


# -- the Python twin --------------------------------------------------------------------------
class _Reader:
    """Values of one column by row: ``(present, bytes)`` for buffers, the item for sequences."""

    def __init__(self, column: Any, name: str) -> None:
        self.name = name
        if isinstance(column, list | tuple):
            self.seq: Sequence[Any] | None = column
            self.length = len(column)
            return
        self.seq = None
        try:
            offsets, data, validity = column.offsets, column.data, column.validity
            self.first, self.length = int(column.offset), int(column.length)
        except AttributeError:
            raise ClientError(f"column {name} must be a list, a tuple or a BufferColumn, "
                              f"not {type(column).__name__}") from None
        self.offsets = memoryview(offsets).cast("B")
        self.data = memoryview(data).cast("B")
        self.validity = None if validity is None else memoryview(validity).cast("B")
        if self.first < 0 or self.length < 0:
            raise ClientError(f"column {name}: negative offset or length")
        if len(self.offsets) < 4 * (self.first + self.length + 1):
            raise ClientError(f"column {name}: offsets buffer too short for its rows")
        if self.validity is not None and len(self.validity) * 8 < self.first + self.length:
            raise ClientError(f"column {name}: validity bitmap too short for its rows")

    def raw(self, row: int) -> bytes | None:
        """A buffer column's value (None when null)."""
        i = self.first + row
        if self.validity is not None and not self.validity[i >> 3] >> (i & 7) & 1:
            return None
        lo, hi = struct.unpack_from("=ii", self.offsets, 4 * i)
        if not 0 <= lo <= hi <= len(self.data):
            raise ClientError(f"row {row}: column {self.name} offsets out of its data")
        return bytes(self.data[lo:hi])


def _has_control(raw: bytes) -> bool:
    return b"\x00" in raw or b"\x01" in raw or b"\x02" in raw


def _text(reader: _Reader | None, row: int, index: int | None = None) -> bytes | None:
    """A keys/tags/id value (at ``index``, default ``row``) as checked UTF-8 bytes, None when
    absent; errors name ``row``."""
    if reader is None:
        return None
    at = row if index is None else index
    if reader.seq is None:
        raw = reader.raw(at)
        if raw is None:
            return None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ClientError(f"row {row}: {reader.name} is not UTF-8") from None
    else:
        value = reader.seq[at]
        if value is None:
            return None
        if not isinstance(value, str):
            raise ClientError(f"row {row}: {reader.name} must be str, not {type(value).__name__}")
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError:
            raise ClientError(f"row {row}: {reader.name} is not UTF-8") from None
    if _has_control(raw):
        raise ClientError(f"row {row}: {reader.name} holds a NUL or a separator character")
    return raw


def _body(reader: _Reader, row: int, size_max: int) -> bytes:
    if reader.seq is None:
        body = reader.raw(row)
        if body is None:
            raise ClientError(f"row {row}: message body is null")
    else:
        value = reader.seq[row]
        if value is None:
            raise ClientError(f"row {row}: message body is null")
        if not isinstance(value, bytes | bytearray | memoryview):
            raise ClientError(f"row {row}: message body must be bytes, not {type(value).__name__}")
        body = bytes(value)
    if not body:
        raise ClientError(f"row {row}: message body is empty")
    if len(body) > size_max:
        raise ClientError(f"row {row}: message body of {len(body)} bytes exceeds the maximum "
                          f"{size_max}")
    return body


def _user_properties(props: Any, row: int, reserved: frozenset[str]) -> bytes:
    if props is None:
        return b""
    if not isinstance(props, dict):
        raise ClientError(f"row {row}: properties must be a dict or None, not {type(props).__name__}")
    out: list[bytes] = []
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise ClientError(f"row {row}: message property names and values must be str")
        if not name:
            raise ClientError(f"row {row}: a message property has an empty name")
        if name in reserved:
            raise ClientError(f"row {row}: message property {name!r} is reserved by the system")
        try:
            pair = (name.encode("utf-8"), value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ClientError(f"row {row}: message property {name!r} is not UTF-8") from None
        if _has_control(pair[0]) or _has_control(pair[1]):
            raise ClientError(f"row {row}: message property {name!r} holds a reserved character "
                              "(\\x00, \\x01 or \\x02)")
        out += (pair[0], b"\x01", pair[1], b"\x02")
    return b"".join(out)


def _check_limits(start: int, n: int, rows_max: int, bytes_max: int, size_max: int) -> None:
    if not 1 <= rows_max <= ID_BLOCK_ROWS_MAX:
        raise ClientError(f"rows_max must be 1..{ID_BLOCK_ROWS_MAX}, got {rows_max}")
    if not 1 <= bytes_max <= size_max:
        raise ClientError(f"bytes_max must be 1..message_size_max ({size_max}), got {bytes_max}")
    if not 0 <= start < n:
        raise ClientError(f"batch is empty: no row from {start} of {n}")


def _id_source(ids: Any) -> tuple[bytes, int] | _Reader:
    if isinstance(ids, tuple):
        head, counter = ids
        if not isinstance(head, str) or not isinstance(counter, int):
            raise ClientError("an id block is (head: str, counter: int)")
        raw = head.encode("utf-8", "replace")
        if not head.isascii() or _has_control(raw):
            raise ClientError("an id block's head must be ASCII without separators")
        if len(raw) > _ID_HEAD_MAX:
            raise ClientError(f"an id block's head is longer than {_ID_HEAD_MAX} characters")
        return raw, counter
    if not isinstance(ids, list):
        raise ClientError(f"ids must be an IdBlock or a list of str, not {type(ids).__name__}")
    return _Reader(ids, "message id")


def encode_batch_columns_py(
    bodies: Any, keys: Any, tags: Any, properties: Any, flags: Any, ids: Any, start: int,
    rows_max: int, bytes_max: int, size_max: int, reserved: frozenset[str],
) -> EncodedColumns:
    """The Python twin of the C ``encode_batch_columns`` (arguments as passed to it)."""
    body_col = _Reader(bodies, "body")
    n = body_col.length
    others = [(_Reader(c, name) if c is not None else None) for c, name in
              ((keys, "keys"), (tags, "tags"), (properties, "properties"), (flags, "flags"))]
    for reader in others:
        if reader is not None and reader.length != n:
            raise ClientError(f"column {reader.name} has {reader.length} rows, body {n}")
    keys_col, tags_col, props_col, flags_col = others
    props_seq = props_col.seq if props_col is not None else None
    flags_seq = flags_col.seq if flags_col is not None else None
    if props_col is not None and props_seq is None or flags_col is not None and flags_seq is None:
        raise ClientError("properties and flags must be lists or tuples")
    _check_limits(start, n, rows_max, bytes_max, size_max)
    source = _id_source(ids)
    parts: list[bytes] = []
    id_parts: list[bytes] = []
    total, row = 0, start
    while row < n and row - start < rows_max:
        k = row - start
        body = _body(body_col, row, size_max)
        tag = _text(tags_col, row)
        key = _text(keys_col, row)
        props = _user_properties(props_seq[row], row, reserved) if props_seq is not None else b""
        if isinstance(source, tuple):
            msg_id = source[0] + b"%04X" % ((source[1] + k) & 0xFFFF)
        else:
            if k >= source.length:
                raise ClientError(f"row {row}: no message id (ids has {source.length})")
            msg_id = _text(source, row, k) or b""
            if not msg_id:
                raise ClientError(f"row {row}: message id is empty")
        flag = flags_seq[row] if flags_seq is not None else 0
        if not isinstance(flag, int) or flag not in _INT32:
            raise ClientError(f"row {row}: flag {flag!r} does not fit a signed 32-bit field")
        if tag:
            props += _TAGS + tag + b"\x02"
        if key:
            props += _KEYS + key + b"\x02"
        props += _UNIQ + msg_id + _TAIL
        if len(props) > PROPERTIES_SIZE_MAX:
            raise ClientError(f"row {row}: message properties of {len(props)} bytes exceed "
                              f"{PROPERTIES_SIZE_MAX}")
        entry = _ENTRY_OVERHEAD + len(body) + len(props)
        if k and total + entry > bytes_max:
            break
        if total + entry > size_max:
            raise ClientError(f"row {row}: message of {entry} bytes exceeds the maximum {size_max}")
        parts += (_HEAD.pack(entry, 0, 0, flag, len(body)), body, _I16.pack(len(props)), props)
        id_parts.append(msg_id)
        total += entry
        row += 1
    return EncodedColumns(b"".join(parts), row - start, b",".join(id_parts).decode())
