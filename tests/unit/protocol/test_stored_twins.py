"""The stored codec's C twins (protocol/_native/stored_twins.c) against its Python twins (stored.*_py).

For the same input both must give the same bytes, the same None and the same refusal (exception
type and message); inputs are generated valid, malformed, mangled and truncated. The Python
twins are also checked against the general path (properties parsed into a dict, then
``encode_messages``), so the three ways into the commit log store the same bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_fixtures import Clock, config

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.message import MessageSysFlag
from orbitmq.protocol.native import NATIVE
from orbitmq.protocol.properties import parse_properties
from orbitmq.protocol.stored import decode_stored_message, encode_messages
from orbitmq.store import MessageInner, MessageStore

needs_native = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

BORN = ("10.1.2.3", 40000)
STORE = ("127.0.0.1", 10911)
BORN_PART = bytes([10, 1, 2, 3]) + (40000).to_bytes(4, "big")
BORN6_PART = bytes(15) + b"\x01" + (5555).to_bytes(4, "big")
STORE_PART = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
TOPIC_PART = b"\x06Orders"
MAX_MESSAGE = 4 * 1024 * 1024
MAX_BLOB = 64 * 1024 * 1024


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call gave: its value (bytes-like as bytes) or its exception's type and message."""
    try:
        got = fn(*args)
    except (RemoteProtocolError, ValueError, OverflowError, TypeError) as e:
        return ("raised", type(e), str(e))
    if isinstance(got, tuple):
        return ("ok", bytes(got[0]), got[1])
    return ("ok", None if got is None else bytes(got))


# -- properties texts, well formed or not ----------------------------------------------------------

_names = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                 min_size=1, max_size=10)
_values = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                  max_size=20)
_good_props = st.dictionaries(_names, _values, max_size=6).map(
    lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items()).encode())
_pieces = st.sampled_from([b"A", b"B", b"TAGS", b"KEYS", b"DELAY", b"TRAN_MSG", b"true", b"\x01",
                           b"\x02", b"\x00", b"\xff", b"\xed\xa0\x80", "é".encode(), b"\xc3"])
_odd_props = st.lists(_pieces, max_size=24).map(b"".join)
_many_props = st.integers(30, 200).map(  # past the C twin's small name table, a repeat at the end
    lambda n: b"".join(b"n%d\x01v\x02" % i for i in range(n)) + b"n7\x01again\x02")
_props = st.one_of(_good_props, _odd_props, _good_props.map(lambda b: b[:-1]), _many_props)


def _single_args(props: bytes, body: bytes = b"body", flag: int = 7,
                 born: bytes = BORN_PART) -> tuple[Any, ...]:
    return (body, props, flag, TOPIC_PART, 5, 1, 1_700_000_000_123, born, STORE_PART, 2)


@needs_native
@settings(max_examples=600)
@given(_props, st.binary(max_size=64), st.sampled_from([BORN_PART, BORN6_PART]))
def test_encode_wire_single_twins_agree(props: bytes, body: bytes, born: bytes) -> None:
    args = _single_args(props, body, born=born)
    assert outcome(NATIVE.encode_wire_single, *args) == outcome(stored.encode_wire_single_py, *args)


@settings(max_examples=400)
@given(_props)
def test_encode_wire_single_refuses_exactly_what_the_rule_refuses(props: bytes) -> None:
    """Both twins (the one in use under ORBITMQ_PURE_PYTHON=1 too) against parse_properties,
    and the stored bytes against the general path's."""
    try:
        parsed = parse_properties(props)
    except RemoteProtocolError as e:
        with pytest.raises(RemoteProtocolError) as refused:
            stored._encode._encode_single(*_single_args(props))
        assert str(refused.value) == str(e)
        return
    got = stored._encode._encode_single(*_single_args(props))
    if "DELAY" in parsed or "TRAN_MSG" in parsed:
        assert got is None
        return
    general = encode_messages([MessageInner("Orders", 5, b"body", parsed, 7, 1, 1_700_000_000_123,
                                            BORN, STORE, 2)], MAX_MESSAGE, MAX_BLOB)
    assert bytes(got) == bytes(general.blob)


@needs_native
@pytest.mark.parametrize(("props", "reason"), [
    (b"A\x01x\x02", None),
    (b"A\x01x", None),                                # no final separator: accepted, added
    (b"\xffA\x01x\x02", "message properties are not UTF-8"),
    (b"A\x01\xed\xa0\x80\x02", "message properties are not UTF-8"),  # an encoded surrogate
    (b"A\x01x\x00\x02", "message properties contain a NUL character"),
    (b"A\x01x\x02junk\x02", "message property 2 has no name/value separator"),
    (b"\x02", "message property 1 has no name/value separator"),
    (b"A\x01x\x02\x02", "message property 2 has no name/value separator"),
    (b"\x01x\x02", "message property 1 has an empty name"),
    (b"A\x01x\x01y\x02", "message property 1 has a second name/value separator"),
    (b"A\x01x\x02A\x01y\x02", "message property 2 repeats an earlier name"),
    (b"A\x01" + b"v" * 32766, "message properties take 32768 bytes, over 32767"),
    (b"A\x01" + b"v" * 32766 + b"\x02", "message properties take 32769 bytes, over 32767"),
])
def test_the_rule_word_for_word(props: bytes, reason: str | None) -> None:
    for fn in (NATIVE.encode_wire_single, stored.encode_wire_single_py):
        got = outcome(fn, *_single_args(props))
        if reason is None:
            assert got[0] == "ok" and got[1] is not None
            assert decode_stored_message(got[1]).properties == {"A": "x"}
        else:
            assert got == ("raised", RemoteProtocolError, reason)


@needs_native
def test_routed_properties_decline_and_bad_arguments_raise_alike() -> None:
    for props in (b"DELAY\x013\x02", b"TRAN_MSG\x01false\x02", b"A\x01b\x02TRAN_MSG\x01true"):
        assert outcome(NATIVE.encode_wire_single, *_single_args(props)) == ("ok", None)
        assert outcome(stored.encode_wire_single_py, *_single_args(props)) == ("ok", None)
    bad = [
        (b"b", b"", 0, b"Orders", 0, 0, 0, BORN_PART, STORE_PART, 0),   # no length byte
        (b"b", b"", 0, TOPIC_PART, 0, 0, 0, b"\x01\x02", STORE_PART, 0),  # host size
        (b"b", b"", 2**31, TOPIC_PART, 0, 0, 0, BORN_PART, STORE_PART, 0),  # flag width
        (b"b", b"", 0, TOPIC_PART, 0, 0, 2**63, BORN_PART, STORE_PART, 0),  # timestamp width
    ]
    for args in bad:
        c, py = outcome(NATIVE.encode_wire_single, *args), outcome(stored.encode_wire_single_py, *args)
        assert c[0] == py[0] == "raised" and c[1] is py[1], (c, py)
        if c[1] is ValueError:
            assert c == py


# -- batch bodies ----------------------------------------------------------------------------------

def _entry(flag: int, body: bytes, raw_props: bytes) -> bytes:
    total = 22 + len(body) + len(raw_props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + \
        struct.pack(">h", len(raw_props)) + raw_props


_entries = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80), _props),
                    min_size=0, max_size=8)


def _batch_args(body: bytes, max_message: int = MAX_MESSAGE, max_blob: int = MAX_BLOB,
                born: bytes = BORN_PART) -> tuple[Any, ...]:
    return (body, TOPIC_PART, 3, 0, 1_700_000_000_123, born, STORE_PART, 2, max_message, max_blob)


@needs_native
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(_entries, st.data())
def test_encode_wire_batch_twins_agree(entries, data) -> None:
    body = bytearray(b"".join(_entry(*e) for e in entries))
    if body and data.draw(st.booleans()):
        for _ in range(data.draw(st.integers(1, 3))):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    body = bytes(body[: data.draw(st.integers(0, len(body)))]) if data.draw(st.booleans()) else bytes(body)
    max_message = data.draw(st.sampled_from([MAX_MESSAGE, 40]))
    max_blob = data.draw(st.sampled_from([MAX_BLOB, 400]))
    born = data.draw(st.sampled_from([BORN_PART, BORN6_PART]))
    args = _batch_args(body, max_message, max_blob, born)
    assert outcome(NATIVE.encode_wire_batch, *args) == outcome(stored.encode_wire_batch_py, *args)


_uniq = st.sampled_from([b"", b"UNIQ_KEY\x01\x02", b"UNIQ_KEY\x01AC1100\x02", b"UNIQ_KEY\x01x"])
_checked_entries = st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80),
                                      st.tuples(_uniq, _props).map(b"".join)), max_size=8)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(_checked_entries, st.data())
def test_check_wire_batch_checks_what_encode_wire_batch_checks(entries, data) -> None:
    """``check_wire_batch`` (both twins) refuses, word for word, and declines what
    ``encode_wire_batch`` does, and otherwise counts its entries and those without a UNIQ_KEY
    (an empty one counts as none)."""
    body = bytearray(b"".join(_entry(*e) for e in entries))
    if body and data.draw(st.booleans()):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    max_message = data.draw(st.sampled_from([MAX_MESSAGE, 40]))
    max_blob = data.draw(st.sampled_from([MAX_BLOB, 400]))
    born = data.draw(st.sampled_from([BORN_PART, BORN6_PART]))
    args = _batch_args(bytes(body), max_message, max_blob, born)
    encoded = outcome(stored.encode_wire_batch_py, *args)
    twins = [stored.check_wire_batch_py] + ([NATIVE.check_wire_batch] if NATIVE else [])
    for check in twins:
        try:
            got: tuple[Any, ...] = ("ok", check(*args))
        except (RemoteProtocolError, ValueError) as e:
            got = ("raised", type(e), str(e))
        if encoded[0] == "raised" or encoded[1] is None:
            assert got == encoded, (check, got, encoded)
            continue
        blob = stored.encode_wire_batch_py(*args)[0]
        found = list(stored.iter_stored_messages(blob, check_crc=False))
        assert got == ("ok", (len(found), sum(not m.properties.get("UNIQ_KEY") for m in found)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80), _good_props),
                min_size=1, max_size=8))
def test_encode_wire_batch_stores_what_the_general_path_stores(entries) -> None:
    body = b"".join(_entry(*e) for e in entries)
    got = stored._encode._encode_batch(*_batch_args(body))
    decoded = decode_batch(body)
    if any("DELAY" in e.properties or "TRAN_MSG" in e.properties for e in decoded):
        assert got is None
        return
    msgs = [MessageInner("Orders", 3, b, p, f, 0, 1_700_000_000_123, BORN, STORE, 2)
            for f, b, p in decoded]
    general = encode_messages(msgs, MAX_MESSAGE, MAX_BLOB)
    assert bytes(got[0]) == bytes(general.blob) and got[1] == general.rel_positions


@needs_native
@pytest.mark.parametrize(("body", "reason"), [
    (b"", "empty batch"),
    (b"\x00" * 10, "batch entry at 0 truncated: 10 bytes left"),
    (struct.pack(">iiiii", 30, 0, 0, 0, -1) + bytes(10), "batch entry at 0: bad body length -1"),
    (struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", -2), "batch entry at 0: bad properties length"),
    (struct.pack(">iiiii", 99, 0, 0, 0, 0) + struct.pack(">h", 0), "batch entry at 0: total size 99 disagrees"),
    (_entry(0, b"a", b"A\x01x\x02") + _entry(0, b"b", b"Ax\x02"),
     "batch entry at 27: message property 1 has no name/value separator"),
    (_entry(0, b"a" * 50, b""), "batch entry at 0: body of 50 bytes exceeds the limit 40"),
    (_entry(0, b"a", b"") * 5, "the batch takes more than 400 bytes in stored form"),
    (_entry(0, b"a" * 50, b"") + _entry(0, b"", b"DELAY\x011\x02"), None),  # declined first
])
def test_batch_refusals_word_for_word(body: bytes, reason: str | None) -> None:
    for fn in (NATIVE.encode_wire_batch, stored.encode_wire_batch_py):
        got = outcome(fn, *_batch_args(body, 40, 400))
        assert got == (("ok", None) if reason is None else ("raised", RemoteProtocolError, reason))


# -- patch_positions -------------------------------------------------------------------------------

_sys_flags = st.sampled_from([0, 1, 4, 8, 12, 2])


@needs_native
@settings(max_examples=200)
@given(st.lists(st.tuples(_sys_flags, st.booleans(), st.binary(max_size=40)), min_size=1,
                max_size=10), st.integers(0, 64), st.integers(0, 2**40), st.integers(0, 2**40))
def test_patch_positions_twins_agree(specs, pad: int, phy: int, qoff: int) -> None:
    msgs = [MessageInner("T", 1, body, {"K": "v"}, 0, flag, 5, ("::1", 9) if v6 else BORN, STORE)
            for flag, v6, body in specs]
    batch = encode_messages(msgs, MAX_MESSAGE, MAX_BLOB)
    a = bytearray(pad) + batch.blob + bytearray(8)
    b = bytearray(a)
    ts = 1_700_000_000_999
    got_c = NATIVE.patch_positions(a, pad, phy, qoff, ts, batch.rel_positions)
    got_py = stored.patch_positions_py(b, pad, phy, qoff, ts, batch.rel_positions)
    assert (got_c, a) == (got_py, b)
    for rel, (_flag, _, body) in zip(batch.rel_positions, specs, strict=True):
        m = decode_stored_message(a, pad + rel)
        assert (m.commit_log_offset, m.store_timestamp, m.body) == (phy + rel, ts, body)
    taking = [rel for rel, (flag, _, _) in zip(batch.rel_positions, specs, strict=True)
              if flag & 12 not in (4, 12)]
    assert got_c == qoff + len(taking)


@needs_native
@pytest.mark.parametrize(("pos", "rels"), [(0, [0, 60]), (-1, [0]), (-3, [22]), (0, [-5]), (200, [0])])
def test_patch_positions_refuse_positions_outside_alike(pos: int, rels: list[int]) -> None:
    blob = encode_messages([MessageInner("T", 0, b"x", {}, 0, 0, 0, BORN, STORE)], 99, 999).blob
    buf = bytearray(blob) + bytearray(20)
    c = outcome(NATIVE.patch_positions, bytearray(buf), pos, 0, 0, 0, rels)
    py = outcome(stored.patch_positions_py, bytearray(buf), pos, 0, 0, 0, rels)
    assert c == py == ("raised", ValueError, "patch_positions: position outside the buffer")


# -- scan --------------------------------------------------------------------------------------------

def _log(specs) -> bytes:
    """Stored messages back to back, as an append would leave them."""
    out = bytearray()
    for flag, v6, body, props, topic in specs:
        msg = MessageInner(topic, 2, body, props, 0, flag, 5, ("::1", 9) if v6 else BORN, STORE)
        blob = encode_messages([msg], MAX_MESSAGE, MAX_BLOB).blob
        stored.patch_positions_py(blob, 0, len(out), 11, 1_700_000_000_000, [0])
        out += blob
    return bytes(out)


_prop_dicts = st.sampled_from([{}, {"TAGS": "TagA"}, {"TAGS": "", "KEYS": "k1 k2"},
                               {"UNIQ_KEY": "U1", "DELAY": "3", "TAGS": "\U0001f600"},
                               {"KEYS": "ünï"}])
_specs = st.lists(st.tuples(_sys_flags, st.booleans(), st.binary(max_size=30), _prop_dicts,
                            st.sampled_from(["T", "Pay\u00e9", "SCHEDULE_TOPIC_XXXX"])),
                  min_size=1, max_size=6)


@needs_native
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(_specs, st.data())
def test_scan_twins_agree_on_good_and_garbled_logs(specs, data) -> None:
    log = bytearray(_log(specs))
    if data.draw(st.booleans()):
        log += struct.pack(">ii", 64, stored.BLANK_MAGIC_CODE) + bytes(56)
    for _ in range(data.draw(st.integers(0, 3))):
        log[data.draw(st.integers(0, len(log) - 1))] = data.draw(st.integers(0, 255))
    buf = bytes(log[: data.draw(st.integers(0, len(log)))]) if data.draw(st.booleans()) else bytes(log)
    pos = data.draw(st.sampled_from([0, 0, 1, len(buf)]))
    limit = data.draw(st.integers(0, len(buf) + 10))
    count_max = data.draw(st.integers(0, 8))
    assert NATIVE.scan_stored(buf, pos, limit, count_max) == stored.scan_py(buf, pos, limit, count_max)


@needs_native
def test_scan_stops_at_blank_and_bad_entries_alike() -> None:
    blob = _log([(0, False, b"abc", {"TAGS": "x"}, "T")])
    blank = struct.pack(">ii", 64, stored.BLANK_MAGIC_CODE) + bytes(56)
    for scan in (NATIVE.scan_stored, stored.scan_py):
        records, pos, count, stop = scan(blob + blank, 0, len(blob) + 64, 100)
        assert (len(records), pos, count, stop) == (1, len(blob), 1, stored.SCAN_BLANK)
        bad = blob + struct.pack(">ii", 100, 12345) + bytes(92)
        assert scan(bad, 0, len(bad), 100)[1:] == (len(blob), 1, stored.SCAN_BAD)
        torn = blob + blob[: len(blob) // 2]
        assert scan(torn, 0, len(torn), 100)[1:] == (len(blob), 1, stored.SCAN_BAD)
        assert scan(blob * 3, 0, len(blob) * 3, 2)[1:] == (2 * len(blob), 2, 0)
    assert outcome(NATIVE.scan_stored, blob, -1, 10, 1) == outcome(stored.scan_py, blob, -1, 10, 1)


# -- dispatch over a real store: the queues and index of both scans are the same ---------------------

def _mixed_messages() -> list[list[MessageInner]]:
    prepared = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE)
    rollback = int(MessageSysFlag.TRANSACTION_ROLLBACK_TYPE)
    commit = int(MessageSysFlag.TRANSACTION_COMMIT_TYPE)
    puts: list[list[MessageInner]] = []
    for i in range(300):
        props = {"UNIQ_KEY": f"U{i:05d}"}
        if i % 3 == 0:
            props["TAGS"] = ["TagA", "TagB", "ünï", "", "\U0001f600"][i % 5]
        if i % 4 == 0:
            props["KEYS"] = f"order-{i} user-{i % 7}"
        topic, sys_flag, born = "Orders" if i % 2 else "Pay\u00e9", 0, BORN
        if i % 11 == 0:
            topic, props["DELAY"] = "SCHEDULE_TOPIC_XXXX", str(i % 20)
        if i % 13 == 0:
            sys_flag = [prepared, rollback, commit][i % 3]
        if i % 17 == 0:
            born = ("::1", 6000)
        if i % 19 == 0:
            props = {}
        body = bytes((i * 7 + k) % 256 for k in range(i % 50))
        msg = MessageInner(topic, i % 4, body, props, 0, sys_flag,
                           1_700_000_000_000 + i, born, STORE, 0)
        if i % 10 == 0:  # some as batches, a prepared message inside one
            second_flag = prepared if i % 20 == 0 else 0
            puts.append([msg, MessageInner(topic, i % 4, b"second", {"KEYS": f"b{i}", "TAGS": "T"},
                                           0, second_flag, 0, BORN, STORE, 0)])
        else:
            puts.append([msg])
    return puts


def _store_files(root: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for path in sorted((root / sub).rglob("*")):
            if path.is_file():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _dispatch_all(tmp_path: Path, name: str) -> tuple[dict[str, bytes], list]:
    cfg = config(tmp_path / name, mapped_file_size_commitlog=16 * 1024)
    arrived: list = []
    store = MessageStore(cfg, clock=Clock(), run_threads=False)
    store.start()
    try:
        store.add_arrival_listener(lambda *a: arrived.append(a))
        for batch in _mixed_messages():
            assert store.put(batch).status.name == "PUT_OK"
            store.run_services_once()
        store.run_services_once()
    finally:
        store.shutdown()
    return _store_files(Path(cfg.store_path)), arrived


@needs_native
def test_store_files_are_the_same_with_either_twin(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Appends (patch_positions) and dispatch (scan) through the C twins, then the Python ones:
    the commit log, the queues and the index come out byte for byte the same."""
    fast_files, fast_arrived = _dispatch_all(tmp_path, "c")
    monkeypatch.setattr(stored, "scan", stored.scan_py)
    monkeypatch.setattr(stored, "patch_positions", stored.patch_positions_py)
    slow_files, slow_arrived = _dispatch_all(tmp_path, "py")
    assert fast_files.keys() == slow_files.keys() and len(fast_files) > 8
    for name in fast_files:
        assert fast_files[name] == slow_files[name], name
    assert fast_arrived == slow_arrived and fast_arrived


def _entries(specs: list[tuple[int, int]]) -> bytes:
    from orbitmq.store.consume_queue import CQ_ENTRY

    return b"".join(CQ_ENTRY.pack(phy, size, 7) for phy, size in specs)


_CQ_SPECS = st.lists(st.one_of(
    st.tuples(st.integers(0, 5000), st.integers(1, 400)),  # scattered
    st.tuples(st.just(-1), st.integers(1, 400)),  # back to back with the entry before
    st.tuples(st.just(0), st.just(0x7FFFFFFF)),  # a blank entry
    st.tuples(st.integers(-2**63, 2**63 - 1), st.integers(-2**31, 2**31 - 1)),  # garbage
), max_size=60)


class _Log:
    """A commit log of one ``SEGMENT``-byte segment as ``queue_reader`` reads one: a slice when
    the bytes are all there, None when they are outside it (``CommitLog.read``'s answer)."""

    SEGMENT = 40_000

    def __init__(self) -> None:
        self.view = memoryview(bytes(i % 251 for i in range(self.SEGMENT)))

    def read(self, offset: int, size: int) -> memoryview | None:
        if not 0 <= offset < self.SEGMENT or offset + size > self.SEGMENT:
            return None
        return self.view[offset : offset + size]

    def roll_next_file(self, offset: int) -> int:
        return offset + self.SEGMENT - offset % self.SEGMENT


class _Queue:
    """A consume queue holding ``entries`` from queue offset 0."""

    min_offset = 0

    def __init__(self, entries: bytes) -> None:
        self.entries = entries
        self.max_offset = len(entries) // 20

    def entries_from(self, index: int, count_max: int) -> memoryview | None:
        at = memoryview(self.entries)[index * 20 : (index + count_max) * 20]
        return at if len(at) else None

    def roll_next_index(self, index: int) -> int:
        return self.max_offset


@needs_native
@settings(max_examples=400, deadline=None)
@given(_CQ_SPECS, st.integers(1, 70), st.integers(1, 20_000), st.integers(-1, 30_000))
def test_an_unfiltered_read_in_runs_is_alike_in_c_and_in_python(
        specs, count_max: int, bytes_max: int, max_end: int) -> None:
    """The unfiltered read in runs (store/queue_reader.py) with the entries walked in C
    (``queue_runs``, then a slice a run) and read message by message in Python, joining runs as
    it goes: the same answer, runs and counts, for scattered, back-to-back, blank and damaged
    entries; and the same messages, counts and offsets as the read without runs."""
    from orbitmq.config import StoreConfig

    laid, end = [], 0
    for phy, size in specs:
        phy = end if phy == -1 else phy
        laid.append((phy, size))
        end = phy + size if -2**63 <= phy + size < 2**63 else 0
    queue, log = _Queue(_entries(laid)), _Log()
    conf = StoreConfig(max_transfer_count_on_message_in_memory=count_max,
                       max_transfer_bytes_on_message_in_memory=bytes_max)
    _assert_read_alike(queue, log, 64, None, conf, None if max_end < 0 else max_end)


def _assert_read_alike(queue: Any, log: Any, max_msg_nums: int, message_filter: Any,
                       conf: Any, bound: int | None) -> None:
    """``read_queue`` in runs walked in C, in runs read message by message in Python, and
    without runs: the same answer, runs and counts (the same messages without runs)."""
    from orbitmq.store import queue_reader

    def read(in_c: bool, runs: bool = True) -> tuple[Any, ...]:
        queue_reader._RUNS_IN_C = in_c
        got = queue_reader.read_queue(queue, log, 0, max_msg_nums, message_filter, conf,
                                      max_physical_end=bound, runs=runs)
        return (got.status, got.next_begin_offset, got.message_count, got.total_size,
                got.last_commit_offset, got.held_back_end, b"".join(got.buffers),
                [len(b) for b in got.buffers] if runs else None)

    try:
        in_c, in_python, one_by_one = read(True), read(False), read(False, runs=False)
    finally:
        queue_reader._RUNS_IN_C = NATIVE is not None
    assert in_c == in_python
    assert in_c[:7] == one_by_one[:7]


# "Aa" and "BB" share a tags code (Java's hashCode): the exact tag tells them apart.
_TAGS = ["Aa", "BB", "C", "", "\u00e9t\u00e9", None]
_TAG_LOG_SPECS = st.lists(st.tuples(
    st.sampled_from(_TAGS),
    st.sampled_from(["back to back", "gap", "blank entry", "code of another tag",
                     "magic broken", "offset field wrong", "entry too short"]),
), max_size=40)


class _TagLog(_Log):
    """A commit log of real stored messages (``_tag_log``) read as ``CommitLog.read`` does."""

    def __init__(self, data: bytes) -> None:
        self.SEGMENT = len(data) + 1
        self.view = memoryview(data)


def _tag_log(specs: list[tuple[str | None, str]]) -> tuple[bytes, bytes]:
    """(the commit log, the queue's entries) for messages tagged and damaged as ``specs`` say."""
    from orbitmq.protocol.message import java_string_hash
    from orbitmq.store.consume_queue import CQ_ENTRY

    log, entries = bytearray(), bytearray()
    for i, (tag, how) in enumerate(specs):
        if how == "gap":
            log += b"\x00" * 7
        phy = len(log)
        raw = bytearray(stored.encode_stored_message(
            topic="T", body=b"m%d" % i, queue_offset=i, physical_offset=phy,
            properties={} if tag is None else {"TAGS": tag}))
        if how == "magic broken":
            raw[4] ^= 0xFF
        elif how == "offset field wrong":
            raw[28:36] = (phy + 1).to_bytes(8, "big")
        code = 0 if tag is None else java_string_hash(tag)
        if how == "code of another tag":
            code = java_string_hash("C") if code != java_string_hash("C") else 0
        log += raw
        size = len(raw) - 1 if how == "entry too short" else len(raw)
        entries += CQ_ENTRY.pack(0, 0x7FFFFFFF, 0) if how == "blank entry" else b""
        entries += CQ_ENTRY.pack(phy, size, code)
    return bytes(log), bytes(entries)


@needs_native
@settings(max_examples=400, deadline=None)
@given(_TAG_LOG_SPECS, st.sets(st.sampled_from(["Aa", "BB", "C", "\u00e9t\u00e9", "zz"]),
                               min_size=1),
       st.integers(1, 40), st.integers(1, 4000), st.integers(-1, 6000))
def test_a_tag_filtered_read_in_runs_is_alike_in_c_and_in_python(
        specs, tags: set[str], count_max: int, bytes_max: int, max_end: int) -> None:
    """A TAG subscription's read in runs with the entries walked in C (``queue_runs`` by tags
    code, ``runs_tags_in`` for the exact tag) and read message by message in Python: the same
    answer for tags that share a code, messages without tags, gaps, blank entries, entries of
    the wrong code or size, and damaged messages."""
    from orbitmq.broker.message_filter import TagFilter
    from orbitmq.config import StoreConfig

    log, entries = _tag_log(specs)
    queue, commit_log = _Queue(entries), _TagLog(log)
    conf = StoreConfig(max_transfer_count_on_message_in_memory=count_max,
                       max_transfer_bytes_on_message_in_memory=bytes_max)
    _assert_read_alike(queue, commit_log, 32, TagFilter(frozenset(tags)), conf,
                       None if max_end < 0 else max_end)


@needs_native
def test_a_clean_tag_filtered_read_is_walked_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages whose tags codes and tags agree never reach the Python read; a tags code two
    tags share sends the read there, and the other tag is left out."""
    from orbitmq.broker.message_filter import TagFilter, build_filter
    from orbitmq.config import StoreConfig
    from orbitmq.store import queue_reader

    log, entries = _tag_log([(tag, "back to back") for tag in ["C", "Aa", "C", "C", None, "C"]])
    queue, commit_log, conf = _Queue(entries), _TagLog(log), StoreConfig()
    one_by_one = queue_reader._read_one_by_one
    called: list[str] = []

    def spy(*args: Any, **kwargs: Any) -> None:
        called.append("python")
        one_by_one(*args, **kwargs)

    monkeypatch.setattr(queue_reader, "_read_one_by_one", spy)
    got = queue_reader.read_queue(queue, commit_log, 0, 32, build_filter("C"),  # type: ignore[arg-type]
                                  conf, runs=True)
    assert (called, got.message_count, [len(b) for b in got.buffers].__len__()) == ([], 4, 3)
    assert got.next_begin_offset == 6
    got = queue_reader.read_queue(queue, commit_log, 0, 32, TagFilter(frozenset({"BB"})),  # type: ignore[arg-type]
                                  conf, runs=True)
    assert called == ["python"] and got.message_count == 0  # "Aa" has "BB"'s code, not its tag
