"""The C speedups (orbitmq.protocol._speedups) against their Python twins, byte for byte.

Each C function either gives exactly what the Python code gives, or declines (None) so that the
Python code decides; these tests generate inputs, valid and broken, and check both paths agree.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_fixtures import Clock, config

from orbitmq.broker.send_processor import parse_properties
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.batch import decode_batch, encode_batch
from orbitmq.protocol.java_hash import java_string_hash_py
from orbitmq.protocol.message import MessageSysFlag, decode_stored_message
from orbitmq.protocol.native import NATIVE
from orbitmq.store import MessageInner, MessageStore, PutMessageStatus, dispatch
from orbitmq.store.commit_log import encode_messages, encode_wire_batch, encode_wire_single
from orbitmq.store.index_file import build_key, index_key_hash

needs_native = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

BORN = ("10.1.2.3", 40000)
STORE = ("127.0.0.1", 10911)
MAX_MESSAGE = 4 * 1024 * 1024
MAX_BLOB = 64 * 1024 * 1024


def test_the_speedups_are_built_here() -> None:
    """The install compiles them on this machine (hatch_build.py): a silent fallback to Python
    would only show as a slower broker, so it fails here instead."""
    if os.environ.get("ORBITMQ_PURE_PYTHON") == "1":
        pytest.skip("turned off by ORBITMQ_PURE_PYTHON=1")
    assert NATIVE is not None, "orbitmq.protocol._speedups did not build; see hatch_build.py"


# -- Java's String.hashCode ----------------------------------------------------------------------

_surrogates = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\ud83d\ude00"])


@needs_native
@given(st.one_of(st.text(), st.text(alphabet=st.characters(max_codepoint=0x7F)), _surrogates))
def test_java_string_hash_matches_python(s: str) -> None:
    assert NATIVE.java_string_hash(s) == java_string_hash_py(s)


@needs_native
def test_java_string_hash_known_values() -> None:
    assert NATIVE.java_string_hash("") == 0
    assert NATIVE.java_string_hash("TagA") == 2598919
    assert NATIVE.java_string_hash("polygenelubricants") == -2147483648
    assert NATIVE.java_string_hash("\U0001f600") == java_string_hash_py("\U0001f600") == 1772899


@needs_native
@given(st.text(max_size=40), st.text(max_size=40))
def test_index_key_hash_matches_the_joined_key(topic: str, key: str) -> None:
    assert NATIVE.index_key_hash(topic, key) == index_key_hash(build_key(topic, key))


# -- batch bodies to stored form -------------------------------------------------------------------

_names = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                 min_size=1, max_size=12)
_values = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
                  max_size=30)
_entries = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.binary(max_size=300),
              st.dictionaries(_names, _values, max_size=6)),
    min_size=1, max_size=12,
)


def _general(body: bytes, sys_flag: int = 0, queue_id: int = 3):
    """The general path: decode the batch, then encode each message as the store does."""
    msgs = [
        MessageInner("Orders", queue_id, b, props, flag, sys_flag, 1_700_000_000_123, BORN, STORE, 2)
        for flag, b, props in decode_batch(body)
    ]
    return encode_messages(msgs, MAX_MESSAGE, MAX_BLOB)


def _fast(body: bytes, sys_flag: int = 0, queue_id: int = 3, born: tuple[str, int] = BORN):
    return encode_wire_batch("Orders", queue_id, body, sys_flag, 1_700_000_000_123, born, STORE, 2,
                             MAX_MESSAGE, MAX_BLOB)


@needs_native
@given(_entries, st.sampled_from([0, int(MessageSysFlag.COMPRESSED)]))
def test_wire_batch_gives_the_bytes_of_the_general_path(entries, sys_flag: int) -> None:
    props_ok = all("DELAY" not in p and "TRAN_MSG" not in p for _, _, p in entries)
    body = encode_batch(entries)
    fast, general = _fast(body, sys_flag), _general(body, sys_flag)
    if not props_ok:
        assert fast is None
        return
    assert fast is not None, "canonical properties must take the fast path"
    assert bytes(fast.blob) == bytes(general.blob)
    assert fast.rel_positions == general.rel_positions
    assert fast.store_ts_ats == general.store_ts_ats
    assert fast.counts_in_queue == general.counts_in_queue
    assert fast.id_prefix == general.id_prefix


@needs_native
def test_wire_batch_with_ipv6_born_host_matches() -> None:
    body = encode_batch([(1, b"x" * 10, {"TAGS": "a", "UNIQ_KEY": "u1"}), (2, b"", {})])
    v6 = ("::1", 5555)
    fast = _fast(body, born=v6)
    msgs = [MessageInner("Orders", 3, b, p, f, 0, 1_700_000_000_123, v6, STORE, 2)
            for f, b, p in decode_batch(body)]
    general = encode_messages(msgs, MAX_MESSAGE, MAX_BLOB)
    assert fast is not None and bytes(fast.blob) == bytes(general.blob)
    assert fast.store_ts_ats == general.store_ts_ats


def _entry(flag: int, body: bytes, raw_props: bytes) -> bytes:
    total = 22 + len(body) + len(raw_props)
    return struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body + \
        struct.pack(">h", len(raw_props)) + raw_props


@needs_native
@pytest.mark.parametrize("raw", [
    b"A\x01x",                      # no final separator
    b"A\x01x\x02A\x01y\x02",        # a name twice: the dict keeps the last
    b"\x01x\x02",                   # empty name: dropped by the general path
    b"Ax\x02",                      # no name/value separator
    b"A\x01x\x01y\x02",             # a second separator in the value
    b"A\x01\xff\x02",               # not UTF-8
    b"A\x01\xed\xa0\x80\x02",       # a UTF-8-encoded surrogate
    b"A\x01\x00\x02",               # NUL
    b"DELAY\x013\x02",              # delayed: refused in a batch
    b"TRAN_MSG\x01true\x02",        # transactional: refused in a batch
])
def test_non_canonical_properties_decline(raw: bytes) -> None:
    assert _fast(_entry(0, b"b", raw)) is None


@needs_native
@given(_entries, st.data())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_mangled_bodies_never_store_what_the_general_path_would_not(entries, data) -> None:
    body = bytearray(encode_batch(entries))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(body)))
    body = bytes(body[:cut])
    fast = _fast(body)
    if fast is None:
        return  # the general path decides; whatever it does is what happens
    try:
        general = _general(body)
    except RemoteProtocolError:
        pytest.fail("the fast path took a batch the general path refuses")
    assert not isinstance(general, PutMessageStatus), general
    assert bytes(fast.blob) == bytes(general.blob)


_prop_text = st.one_of(
    st.dictionaries(_names, _values, max_size=6).map(
        lambda d: "".join(f"{k}\x01{v}\x02" for k, v in d.items())),
    st.lists(st.sampled_from(["A", "B", "\x01", "\x02", "\x00", "\ud800", "é", "DELAY",
                              "TRAN_MSG", "true"]), max_size=20).map("".join),
)


@needs_native
@given(_prop_text, st.binary(max_size=200), st.integers(-(2**31), 2**31 - 1))
def test_wire_single_gives_the_bytes_of_the_general_path(text: str, body: bytes, flag: int) -> None:
    fast = encode_wire_single("Orders", 5, body, text, flag, 0, 1_700_000_000_123, BORN, STORE, 1)
    props = parse_properties(text)
    msg = MessageInner("Orders", 5, body, props, flag, 0, 1_700_000_000_123, BORN, STORE, 1)
    general = encode_messages([msg], MAX_MESSAGE, MAX_BLOB)
    if fast is None:
        return  # the general path decides
    assert "DELAY" not in props and "TRAN_MSG" not in props
    assert not isinstance(general, PutMessageStatus), general
    assert bytes(fast.blob) == bytes(general.blob)
    assert (fast.rel_positions, fast.store_ts_ats, fast.counts_in_queue) == (
        general.rel_positions, general.store_ts_ats, general.counts_in_queue)


@needs_native
def test_wire_single_takes_the_usual_message() -> None:
    text = "UNIQ_KEY\x01AC11000100002A9F0000000000000001\x02WAIT\x01true\x02TAGS\x01TagA\x02"
    fast = encode_wire_single("Orders", 0, b"hello", text, 0, 0, 1, BORN, STORE, 0)
    assert fast is not None
    m = decode_stored_message(bytes(fast.blob))
    assert m.body == b"hello" and m.tags == "TagA" and m.properties["WAIT"] == "true"
    assert encode_wire_single("Orders", 0, b"x", "DELAY\x013\x02", 0, 0, 1, BORN, STORE, 0) is None
    assert encode_wire_single("Orders", 0, b"x", None, 0, 0, 1, BORN, STORE, 0) is not None


@needs_native
def test_limits_decline() -> None:
    body = encode_batch([(0, b"x" * 100, {})])
    assert encode_wire_batch("Orders", 0, body, 0, 0, BORN, STORE, 0, 99, MAX_BLOB) is None
    assert encode_wire_batch("Orders", 0, body, 0, 0, BORN, STORE, 0, MAX_MESSAGE, 100) is None
    assert encode_wire_batch("Orders", 0, b"", 0, 0, BORN, STORE, 0, MAX_MESSAGE, MAX_BLOB) is None
    assert encode_wire_batch("a/b", 0, body, 0, 0, BORN, STORE, 0, MAX_MESSAGE, MAX_BLOB) is None
    assert encode_wire_batch("Orders", 0, body, 0, 0, ("nohost", 1), STORE, 0, MAX_MESSAGE,
                             MAX_BLOB) is None


@needs_native
def test_patch_batch_matches_the_python_loop() -> None:
    body = encode_batch([(i, bytes([i]) * (i * 7), {"UNIQ_KEY": f"k{i}"}) for i in range(9)])
    fast = _fast(body)
    assert fast is not None
    a = bytearray(len(fast.blob) + 100)
    b = bytearray(a)
    a[50 : 50 + len(fast.blob)] = fast.blob
    b[50 : 50 + len(fast.blob)] = fast.blob
    ts_at = fast.store_ts_ats[0]
    nxt = NATIVE.patch_batch(a, 50, 123_456, 77, 1_700_000_000_999, fast.rel_positions, ts_at)
    qoff = 77
    for rel in fast.rel_positions:
        struct.pack_into(">qq", b, 50 + rel + 20, qoff, 123_456 + rel)
        struct.pack_into(">q", b, 50 + rel + ts_at, 1_700_000_000_999)
        qoff += 1
    assert nxt == qoff and a == b
    m = decode_stored_message(bytes(a[50 + fast.rel_positions[3] :]))
    assert (m.queue_offset, m.commit_log_offset, m.store_timestamp) == (80, 123_456 + fast.rel_positions[3],
                                                                        1_700_000_000_999)
    with pytest.raises(ValueError):
        NATIVE.patch_batch(bytearray(10), 0, 0, 0, 0, [5], ts_at)


# -- dispatch ----------------------------------------------------------------------------------------

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
        msg = MessageInner(topic, i % 4, os.urandom(i % 50), props, 0, sys_flag,
                           1_700_000_000_000 + i, born, STORE, 0)
        if i % 10 == 0:  # some as batches
            puts.append([msg, MessageInner(topic, i % 4, b"second", {"KEYS": f"b{i}", "TAGS": "T"},
                                           0, 0, 0, BORN, STORE, 0)])
        else:
            puts.append([msg])
    return puts


def _store_files(root: Path) -> dict[str, bytes]:
    out = {}
    for sub in ("consumequeue", "index"):
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
            assert store.put_messages(batch).status.name == "PUT_OK"
            store.run_services_once()
        store.run_services_once()
    finally:
        store.shutdown()
    return _store_files(Path(cfg.store_path)), arrived


@needs_native
def test_dispatch_scan_gives_the_queues_and_index_of_the_python_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast_files, fast_arrived = _dispatch_all(tmp_path, "c")
    monkeypatch.setattr(dispatch, "NATIVE", None)
    slow_files, slow_arrived = _dispatch_all(tmp_path, "py")
    assert fast_files.keys() == slow_files.keys() and len(fast_files) > 8
    for name in fast_files:
        assert fast_files[name] == slow_files[name], name
    assert fast_arrived == slow_arrived and fast_arrived


@needs_native
def test_scan_stops_at_blank_and_bad_entries() -> None:
    good = MessageInner("T", 0, b"abc", {"TAGS": "x"}, 0, 0, 0, BORN, STORE, 0)
    blob = bytes(encode_messages([good], MAX_MESSAGE, MAX_BLOB).blob)
    blank = struct.pack(">ii", 64, -875286124) + bytes(56)
    records, pos, count, stop = NATIVE.scan_stored(blob + blank, 0, len(blob) + 64, 100)
    assert (len(records), pos, count, stop) == (1, len(blob), 1, 1)
    assert records[0][5:7] == (b"T", java_string_hash_py("x"))
    bad = blob + struct.pack(">ii", 100, 12345) + bytes(92)
    assert NATIVE.scan_stored(bad, 0, len(bad), 100)[1:] == (len(blob), 1, 2)
    torn = blob + blob[: len(blob) // 2]  # a size that runs past the buffer
    assert NATIVE.scan_stored(torn, 0, len(torn), 100)[1:] == (len(blob), 1, 2)
    assert NATIVE.scan_stored(blob * 3, 0, len(blob) * 3, 2)[1:] == (2 * len(blob), 2, 0)
