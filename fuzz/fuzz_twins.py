"""The fuzzer's checks of the C entry points against their Python twins (fuzz/speedups_fuzz.c
calls these from its embedded interpreter, so the C runs under the sanitizers with the rest).

Each function takes the fuzzer's bytes, builds the arguments the way their callers would from
outside bytes (a commit log range, an index file and its planned entries, a pull body, a
column set), calls the C function and its Python twin, and raises AssertionError when the two
disagree (a result, or a refusal's type and message). A refusal both give is an expected outcome;
any exception leaving these functions is a finding.

    Both take a flags byte, a u16 length and that many bytes for the first part, then the rest.
    store(data)    selector 14: dispatch_plan over the bytes as a commit log range, against
                   the Python read (stored.scan_py) and IndexService.build_index's hashes; then
                   index_put of its planned entries and of the bytes' own into an index file
                   whose header and slots are the bytes too, against IndexFile.put_hash
    pull(frame, fields)  selectors 0..3 and 8..11: a frame FastPath.peek read as a pull
                   (``fields``, its tuple), against the Python decoder (decode_command and
                   PullMessageRequestHeader.from_ext_fields): the same command and header
    columns(data)  selector 15: stored_columns over the bytes as a pull body (against
                   stored_columns_py), and encode_batch_columns over columns whose Arrow offsets,
                   data, validity, texts, properties and ids are the bytes (against
                   encode_batch_columns_py)
"""

from __future__ import annotations

import struct
from typing import Any

from orbitmq.protocol import stored
from orbitmq.protocol.column_batch import BufferColumn, IdBlock, encode_batch_columns_py
from orbitmq.protocol.command import decode_command
from orbitmq.protocol.headers import PullMessageRequestHeader
from orbitmq.protocol.java_hash import java_string_hash_py
from orbitmq.protocol.message import RESERVED_PROPERTIES
from orbitmq.protocol.native import NATIVE as PROTOCOL
from orbitmq.store.index_file import HASH_SLOT_SIZE, HEADER_SIZE, INDEX_ENTRY_SIZE, IndexFile
from orbitmq.store.native import NATIVE as STORE

__all__ = ["store", "columns", "pull"]

assert PROTOCOL is not None and STORE is not None, "no C speedups"

DELAY_TOPICS = (b"SCHEDULE_TOPIC_XXXX", b"rmq_sys_wheel_timer")  # their entries: Python's
PLANNED = struct.Struct(">iqq")  # index_file.PLANNED_ENTRY
CQ = struct.Struct(">qiq")  # consume_queue.CQ_ENTRY
HEADER = struct.Struct(">qqqqii")  # index_file._HEADER
SLOT = struct.Struct(">i")
PUT_DONE, PUT_FULL, PUT_PAGE, PUT_ENTRIES, PUT_PYTHON = range(5)
INT32_MIN = -(1 << 31)


def outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    """("ok", result) or ("error", its type, its message): a refusal is an outcome to compare."""
    try:
        return ("ok", fn(*args))
    except (ValueError, OverflowError, TypeError, UnicodeError) as e:
        return ("error", type(e).__name__, str(e))
    except Exception as e:  # the twins' own refusals (RemoteProtocolError, ClientError)
        if type(e).__module__ != "orbitmq.errors":
            raise
        return ("error", type(e).__name__, str(e))


def same(c: tuple[Any, ...], py: tuple[Any, ...], what: str) -> None:
    if c != py:
        raise AssertionError(f"{what}: C {c!r:.400} != Python {py!r:.400}")


# -- the store: dispatch_plan and index_put ----------------------------------------------------

def _key_hash(topic: str, key: str) -> int:
    """index_file.topic_key_hash in Python only."""
    h = java_string_hash_py(f"{topic}#{key}")
    return 0 if h == INT32_MIN else abs(h)


def _index_of(record: Any, base: int) -> list[tuple[int, int, int]]:
    """IndexService.build_index's entries of one scan record: UNIQ_KEY, then each KEYS word,
    each hash once."""
    topic = record[5].decode()
    keys, uniq = record[7], record[8]
    hashes: list[int] = []
    for key in [uniq, *(keys or "").split()] if uniq else (keys or "").split():
        if key:
            h = _key_hash(topic, key)
            if h not in hashes:
                hashes.append(h)
    return [(h, base + record[0], record[4]) for h in hashes]


def _planned_items(items: list[Any]) -> list[tuple[int, int, int]]:
    """dispatch_plan's index items as entries: planned bytes as they are, Python's share as
    IndexService.put_planned hands it to build_index."""
    out: list[tuple[int, int, int]] = []
    for item in items:
        if isinstance(item, bytes):
            assert len(item) % PLANNED.size == 0, len(item)
            out += PLANNED.iter_unpack(item)
        else:
            topic, keys, uniq, phy, ts = item
            hashes: list[int] = []
            for key in [uniq.decode(), *keys.decode().split()] if uniq else keys.decode().split():
                if key and (h := _key_hash(topic.decode(), key)) not in hashes:
                    hashes.append(h)
            out += [(h, phy, ts) for h in hashes]
    return out


def _check_plan(data: bytes, base: int, count_max: int) -> list[tuple[int, int, int]]:
    """dispatch_plan against scan_py and build_index; returns its index entries."""
    c = outcome(STORE.dispatch_plan, data, 0, len(data), count_max, base, True)
    py = outcome(stored.scan_py, data, 0, len(data), count_max)
    if c[0] != "ok" or py[0] != "ok":
        same(c, py, "dispatch_plan's refusal")
        return []
    reached, count, stop, runs, delayed, items = c[1]
    records, py_reached, py_count, py_stop = py[1]
    same((reached, count, stop), (py_reached, py_count, py_stop), "dispatch_plan's reach")
    same(tuple(delayed), tuple(r for r in records if r[5] in DELAY_TOPICS), "delayed records")
    entries = []
    for topic, queue_id, first, raw, _arrivals in runs:
        for i, (phy, size, tags) in enumerate(CQ.iter_unpack(raw)):
            entries.append((topic, queue_id, first + i, phy, size, tags))
    want = [(r[5], r[2], r[3], base + r[0], r[1], r[6]) for r in records
            if r[5] not in DELAY_TOPICS]
    same(tuple(sorted(entries)), tuple(sorted(want)), "queue entries")
    index = _planned_items(items)
    same(tuple(index), tuple(e for r in records for e in _index_of(r, base)), "index entries")
    return index


def _python_index(mm: bytearray, slots: int, index_num: int, state: tuple[int, ...]) -> IndexFile:
    """An IndexFile over ``mm`` (every page and the whole entry log allocated), as opened."""
    f = object.__new__(IndexFile)
    f.path, f.hash_slot_num, f.index_num = "fuzz", slots, index_num
    f._entries_at = HEADER_SIZE + slots * HASH_SLOT_SIZE
    f.file_size = f._entries_at + index_num * INDEX_ENTRY_SIZE
    f._entries_allocated_to = f.file_size
    f._pages = bytearray(b"\x01" * (f.file_size // 64 + 1))
    f._mm = mm  # type: ignore[assignment]
    (f._index_count, f._begin_ts, f._end_ts, f._begin_phy, f._end_phy, f._slot_count) = state
    f._dirty = False
    return f


def _put_python(f: IndexFile, planned: list[tuple[int, int, int]]) -> int:
    """put_hash of each entry while index_put would put it (it stops, as put_planned hands an
    offset going back or a negative hash to put_hash, which refuses it); the entries put."""
    done = 0
    for key_hash, phy, ts in planned:
        n = f._index_count
        if n >= f.index_num or key_hash < 0 or (n > 1 and phy < f._end_phy):
            break
        assert f.put_hash(key_hash, phy, ts)
        done += 1
    return done


def _index_file(data: bytes, planned: list[tuple[int, int, int]]) -> None:
    """index_put into an index file made of ``data`` (header and slots as a damaged file may
    hold them; its header as IndexFile._read_header accepts it), against put_hash, then again
    with pages and the entry log unallocated, following index_put's requests."""
    if len(data) < 2:
        return
    slots, index_num = 1 + data[0] % 16, 2 + data[1] % 24
    entries_at = HEADER_SIZE + slots * HASH_SLOT_SIZE
    size = entries_at + index_num * INDEX_ENTRY_SIZE
    mm = bytearray(data[2 : 2 + size].ljust(size, b"\0"))
    tail = data[2 + size :]
    planned = planned + list(PLANNED.iter_unpack(tail[: min(len(tail), 16 * 20) // 20 * 20]))
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = HEADER.unpack_from(mm)
    index_count = index_count or 1
    if not (1 <= index_count <= index_num and 0 <= slot_count <= slots
            and (index_count == 1 or 0 <= begin_phy <= end_phy)):
        return  # IndexFile refuses to open it
    state = (index_count, begin_ts, end_ts, begin_phy, end_phy, slot_count)
    raw = b"".join(PLANNED.pack(*e) for e in planned)
    pages = b"\x01" * (size // 64 + 1)
    c_mm = bytearray(mm)
    got = outcome(STORE.index_put, c_mm, entries_at, slots, index_num, state, pages, size, 64,
                  raw, 0)
    f = _python_index(bytearray(mm), slots, index_num, state)
    py = outcome(_put_python, f, list(PLANNED.iter_unpack(raw)))
    if got[0] != "ok" or py[0] != "ok":
        same(got, py, "index_put's refusal")
        return
    done, c_state, need, need_at = got[1]
    same((done, c_state), (py[1], (f._index_count, f._begin_ts, f._end_ts, f._begin_phy,
                                    f._end_phy, f._slot_count)), "index_put's state")
    same((bytes(c_mm),), (bytes(f._mm),), "the index file's bytes")
    assert need in (PUT_DONE, PUT_FULL, PUT_PYTHON), need
    # Again from nothing allocated, as put_planned drives it: each page and entry step on request.
    page, allocated, pages_now = 64, entries_at, bytearray(len(pages))
    start, count, state2, c_mm2 = 0, len(raw) // PLANNED.size, state, bytearray(mm)
    for _ in range(4 * count + 8):
        got = outcome(STORE.index_put, c_mm2, entries_at, slots, index_num, state2,
                      bytes(pages_now), allocated, page, raw, start)
        assert got[0] == "ok", got
        start, state2, need, need_at = got[1]
        assert 0 <= start <= count and 1 <= state2[0] <= index_num, (start, state2)
        if need == PUT_PAGE:
            assert 0 <= need_at < size and not (pages_now[0] and pages_now[need_at // page])
            pages_now[need_at // page] = 1
        elif need == PUT_ENTRIES:
            assert allocated < need_at <= size, (allocated, need_at, size)
            allocated = min(-(-need_at // page) * page, size)
        elif need == PUT_PYTHON:
            start += 1
        else:
            break
    else:
        raise AssertionError("index_put asks for pages without end")


# -- the broker: peek's pulls ------------------------------------------------------------------

def pull(frame: bytes, fields: tuple[Any, ...]) -> None:
    """A pull ``FastPath.peek`` read (``fields``) from ``frame`` (length word included): the
    Python decoder must take the frame and give the same request and header."""
    cmd = decode_command(frame[4:])
    header = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    assert fields[0] == len(frame) and not cmd.body, (fields, cmd)
    assert fields[1:6] == (cmd.code, cmd.opaque, cmd.flag, cmd.version, int(cmd.serialize_type)), (
        fields, cmd)
    assert PullMessageRequestHeader(*fields[6:]) == header, (fields, header)


def _split(data: bytes) -> tuple[int, bytes, bytes]:
    """(flags, first part, rest): a flags byte, then a u16 length and the first part."""
    if len(data) < 3:
        return 0, b"", b""
    cut = 3 + (data[1] << 8 | data[2])
    return data[0], data[3:cut], data[cut:]


def store(data: bytes) -> None:
    """Selector 14: flags (base, count_max), a commit log range, then an index file and more
    planned entries."""
    flags, log, index_file = _split(data)
    index = _check_plan(log, (flags & 7) << 30, 1 + (flags >> 3))
    _index_file(index_file, index)


# -- the protocol: stored_columns and encode_batch_columns -------------------------------------

def _stored_columns(data: bytes, end_offset: int, want: int) -> None:
    c = outcome(lambda: tuple(bytes(x) if isinstance(x, bytearray) else x
                              for x in PROTOCOL.stored_columns(data, end_offset, want)))
    py = outcome(lambda: tuple(bytes(x) if isinstance(x, bytearray) else x
                               for x in stored.stored_columns_py(data, end_offset, want)))
    same(c, py, "stored_columns")


def _texts(raw: bytes, n: int) -> list[str | None]:
    words = raw.decode("utf-8", "replace").split("\x03")
    return [None if i >= len(words) or words[i] == "\x04" else words[i] for i in range(n)]


def _encode_columns(data: bytes) -> None:
    """Columns made of the bytes: a 10-byte head (rows, mode bits, first row of the buffers,
    start, rows_max, the size limits, a validity bitmap, an id counter), the Arrow offsets of the
    buffers (the fuzzer's: they may point anywhere), then the values' bytes. Mode bits: the
    bodies (and keys) as those buffers or as lists of the values' pieces, keys, tags, properties,
    flags present or not, ids an IdBlock or a list."""
    if len(data) < 10:
        return
    n, mode, first = 1 + data[0] % 6, data[1], data[2] % 3
    start, rows_max = data[3] % (n + 1), 1 + data[4] % 8
    size_max, bytes_max = 64 + data[5] * 64, 1 + data[6] * 16
    off_len = 4 * (first + n + 1)
    offsets, payload = data[10 : 10 + off_len].ljust(off_len, b"\0"), data[10 + off_len :]
    buffers = BufferColumn(offsets, payload, None if mode & 1 else data[7:9], first, n)
    pieces = payload.split(b"\x05")
    bodies: Any = buffers if mode & 2 else [pieces[i] if i < len(pieces) else None
                                            for i in range(n)]
    texts = _texts(payload, n)
    keys = None if mode & 4 else (buffers if mode & 8 else texts)
    tags = None if mode & 16 else list(reversed(texts))
    props: Any = None
    if mode & 32:
        props = [None if t is None else dict(zip(t.split("=")[::2], t.split("=")[1::2],
                                                 strict=False)) for t in texts]
    flags = None if not mode & 64 else [int.from_bytes(data[i : i + 4], "big", signed=True)
                                        for i in range(n)]
    ids: Any = (IdBlock("7F00000100002A9F" + data[7:9].hex().upper(), data[9] << 8 | data[0])
                if mode & 128 else _texts(payload[::-1], n))
    args = (bodies, keys, tags, props, flags, ids, start, rows_max, bytes_max, size_max,
            RESERVED_PROPERTIES)
    same(outcome(lambda: tuple(PROTOCOL.encode_batch_columns(*args))),
         outcome(lambda: tuple(encode_batch_columns_py(*args))), "encode_batch_columns")


def columns(data: bytes) -> None:
    """Selector 15: flags (the columns stored_columns makes, its end offset), a pull body, then
    a column set."""
    flags, body, column_set = _split(data)
    _stored_columns(body, (flags >> 4) - 2, flags & 15)
    _encode_columns(column_set)
