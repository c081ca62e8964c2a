"""One verdict for a malformed message wherever it is met.

The same malformed properties and the same garbled stored messages go to every consumer of the
stored codec: the send path (a real broker on 127.0.0.1 port 0: MESSAGE_ILLEGAL with the reason as
remark), recovery (a store whose tail holds the bad message: cut there), dispatch (stops there, no
queue entry), the tag filter (never matches), the SDK decode (RemoteProtocolError) and Spark's
bulk decode (RemoteProtocolError). A good message next to each bad one shows that every consumer
does accept what is well formed, so that none of these checks passes by refusing everything.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.broker.message_filter import TagFilter, stored_tags
from orbitmq.config import TEST_MIN_STORE, StoreConfig
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol import stored
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.properties import PROPERTY_SEPARATOR
from orbitmq.protocol.stored import (
    decode_stored_message,
    encode_stored_message,
    iter_stored_messages,
    problem,
)
from orbitmq.store import MessageInner, MessageStore

TOPIC = "Verdict"
GOOD_PROPS = b"TAGS\x01a\x02UNIQ_KEY\x01U1\x02"

# Malformed properties (every one holds TAGS=a, so a filter would match its well-formed twin)
# and the reason the one rule gives.
MALFORMED_PROPERTIES = [
    (b"TAGS\x01a\x02K\x01\xff\x02", "message properties are not UTF-8"),
    (b"TAGS\x01a\x02K\x01\xed\xa0\x80\x02", "message properties are not UTF-8"),
    (b"TAGS\x01a\x02K\x01x\x00y\x02", "message properties contain a NUL character"),
    (b"TAGS\x01a\x02junk\x02", "message property 2 has no name/value separator"),
    (b"TAGS\x01a\x02\x02", "message property 2 has no name/value separator"),
    (b"TAGS\x01a\x02\x01x\x02", "message property 2 has an empty name"),
    (b"TAGS\x01a\x02K\x01x\x01y\x02", "message property 2 has a second name/value separator"),
    (b"TAGS\x01a\x02TAGS\x01b\x02", "message property 2 repeats an earlier name"),
]


def stored_bytes(props: bytes, *, phy: int = 0, queue_offset: int = 0) -> bytes:
    """A stored message of TOPIC with ``props`` as its raw properties (a test may know the
    layout: the properties are the message's last field, after their i16 length)."""
    good = encode_stored_message(topic=TOPIC, body=b"body", queue_offset=queue_offset,
                                 physical_offset=phy, properties={"TAGS": "a", "UNIQ_KEY": "U1"})
    head = good[: -len(GOOD_PROPS) - 2]
    raw = head + struct.pack(">h", len(props)) + props
    return struct.pack(">i", len(raw)) + raw[4:]


def _set_i32(at: int, value: int) -> Callable[[bytes], bytes]:
    def edit(raw: bytes) -> bytes:
        out = bytearray(raw)
        struct.pack_into(">i", out, at, value)
        return bytes(out)
    return edit


def _topic_len(value: int) -> Callable[[bytes], bytes]:
    def edit(raw: bytes) -> bytes:
        out = bytearray(raw)
        out[88 + 4] = value  # after the v4 header (88) and the 4-byte body
        return bytes(out)
    return edit


def _props_len_plus_one(raw: bytes) -> bytes:
    out = bytearray(raw)
    at = len(raw) - len(GOOD_PROPS) - 2
    struct.pack_into(">h", out, at, len(GOOD_PROPS) + 1)
    return bytes(out)


# Garbled stored messages: an edit of a good one, and the start of the reason decoding gives.
GARBLED = [
    ("bad magic", _set_i32(4, 0x12345678), "bad magic code"),
    ("truncated", lambda raw: raw[:-7], "impossible total size"),
    ("body overruns", _set_i32(84, 10_000), "body length 10000 overruns"),
    ("no topic", _topic_len(0), "bad topic length 0"),
    ("topic overruns", _topic_len(200), "bad topic length 200"),
    ("lengths disagree", _props_len_plus_one, "field lengths disagree"),
    ("negative queue id", _set_i32(12, -1), "negative queue id"),
]

CASES = [pytest.param(stored_bytes(p), reason, p, id=f"props:{reason}")
         for p, reason in MALFORMED_PROPERTIES] + [
    pytest.param(edit(stored_bytes(GOOD_PROPS)), reason, None, id=name)
    for name, edit, reason in GARBLED]


# -- the send path: a real broker ------------------------------------------------------------------

@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("verdict")))
    harness.send_ok(TOPIC, b"seed")
    yield harness
    harness.close()


def _entry(body: bytes, props: bytes) -> bytes:
    return struct.pack(">iiiii", 22 + len(body) + len(props), 0, 0, 0, len(body)) + body + \
        struct.pack(">h", len(props)) + props


@pytest.mark.parametrize(("props", "reason"), MALFORMED_PROPERTIES)
def test_send_path_refuses_with_the_reason(h: BrokerHarness, props: bytes, reason: str) -> None:
    h.wait_dispatched()
    before = h.broker.store.max_physical_offset()
    batch_fields = h.send_header(TOPIC, 0, batch=True).to_v2_ext_fields()
    good = _entry(b"ok", GOOD_PROPS)
    for code in (RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE):
        fields = batch_fields if code == RequestCode.SEND_BATCH_MESSAGE else \
            h.send_header(TOPIC, 0, batch=True).to_ext_fields()
        r = h.invoke(code, fields, good + _entry(b"bad", props))
        assert r.code == ResponseCode.MESSAGE_ILLEGAL, (r.code, r.remark)
        assert r.remark == f"batch entry at {len(good)}: {reason}"
    try:
        text = props.decode("utf-8")
    except UnicodeDecodeError:
        text = None  # a JSON header cannot carry it (see test_broker_bad_input)
    if text is not None:
        for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_MESSAGE):
            header = h.send_header(TOPIC, 0)
            header.properties = text
            fields = header.to_v2_ext_fields() if code == RequestCode.SEND_MESSAGE_V2 else \
                header.to_ext_fields()
            r = h.invoke(code, fields, b"bad")
            assert (r.code, r.remark) == (ResponseCode.MESSAGE_ILLEGAL, reason)
        # the general path (a retry topic takes it: no stored form straight from the wire)
        header = h.send_header("%RETRY%verdict-group", 0)
        header.properties = text
        r = h.invoke(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext_fields(), b"bad")
        assert (r.code, r.remark) == (ResponseCode.MESSAGE_ILLEGAL, reason)
    h.wait_dispatched()
    assert h.broker.store.max_physical_offset() == before
    ok = h.send(TOPIC, b"fine", props={"TAGS": "a", "K": "v"})
    assert ok.code == ResponseCode.SUCCESS


# -- recovery, dispatch, filter, SDK and Spark decode -----------------------------------------------

def _store_config(path: Path) -> StoreConfig:
    return dataclasses.replace(TEST_MIN_STORE, store_path=str(path), mapped_file_size_commitlog=16 * 1024)


def _good_then_raw(store: MessageStore, make_bad: Callable[[int], bytes]) -> tuple[int, int]:
    """Append a good message through the store, then the bad bytes right behind it (written into
    the segment as a torn or corrupt append would leave them); (good offset, bad offset)."""
    put = store.put([MessageInner(TOPIC, 0, b"good", {"TAGS": "a"})])
    assert put.append is not None
    mf = store.commit_log.mfq.last_file()
    assert mf is not None
    pos = mf.wrote_position
    bad = make_bad(mf.file_from_offset + pos)
    mf.buf[pos : pos + len(bad)] = bad
    mf.wrote_position = pos + len(bad)  # as if appended: a crash keeps the bytes
    return put.append.wrote_offset, mf.file_from_offset + pos


@pytest.mark.parametrize(("bad", "reason", "props"), CASES)
def test_recovery_cuts_the_log_at_it(tmp_path: Path, bad: bytes, reason: str,
                                     props: bytes | None) -> None:
    cfg = _store_config(tmp_path / "store")
    with MessageStore(cfg, run_threads=False) as store:
        _, bad_at = _good_then_raw(store, lambda phy: _at(bad, props, phy))
    (tmp_path / "store" / "abort").write_bytes(b"")
    with MessageStore(cfg, run_threads=False) as store:
        report = store.recovery_report
        assert report is not None and report.truncated_from == bad_at, report
        if props is not None:  # the same bytes as the decoders get: the same reason
            assert report.reason == reason
        assert store.get_max_offset_in_queue(TOPIC, 0) == 1  # the good message only
        assert store.commit_log.max_offset == bad_at


def _at(bad: bytes, props: bytes | None, phy: int) -> bytes:
    """The bad message as it would lie at commit log offset ``phy`` (its offset field right)."""
    if props is not None:
        return stored_bytes(props, phy=phy, queue_offset=1)
    out = bytearray(bad)
    if len(out) >= 36:
        struct.pack_into(">q", out, 28, phy)
    return bytes(out)


@pytest.mark.parametrize(("bad", "reason", "props"), CASES)
def test_dispatch_stops_at_it(tmp_path: Path, bad: bytes, reason: str,
                              props: bytes | None) -> None:
    with MessageStore(_store_config(tmp_path / "store"), run_threads=False) as store:
        good_at, bad_at = _good_then_raw(store, lambda phy: _at(bad, props, phy))
        mf = store.commit_log.mfq.last_file()
        assert mf is not None
        end = bad_at + len(bad)
        reached, count = store.dispatcher.dispatch_to(good_at, end, None)
        store.dispatcher.reput_offset = reached
        assert (reached, count) == (bad_at, 1)
        assert store.get_max_offset_in_queue(TOPIC, 0) == 1
        if props is not None:
            assert problem(mf.view, bad_at - mf.file_from_offset) == reason


@pytest.mark.parametrize(("bad", "reason", "props"), CASES)
def test_the_filter_never_matches_it(bad: bytes, reason: str, props: bytes | None) -> None:
    good = stored_bytes(GOOD_PROPS)
    tag_a = TagFilter(frozenset({"a"}))
    assert stored_tags(good) == "a" and tag_a.match_message(good)
    assert stored_tags(bad) is None and not tag_a.match_message(bad)


@pytest.mark.parametrize(("bad", "reason", "props"), CASES)
def test_sdk_decode_raises_the_reason(bad: bytes, reason: str, props: bytes | None) -> None:
    good = stored_bytes(GOOD_PROPS)
    assert decode_stored_message(good).tags == "a"
    with pytest.raises(RemoteProtocolError) as e:
        decode_stored_message(bad)
    assert f"stored message at 0: {reason}" in str(e.value)
    with pytest.raises(RemoteProtocolError):
        list(iter_stored_messages(good + bad))


@pytest.mark.parametrize("columns", [stored.stored_columns, stored.stored_columns_py])
@pytest.mark.parametrize(("bad", "reason", "props"), CASES)
def test_bulk_decode_raises_the_reason(bad: bytes, reason: str, props: bytes | None,
                                       columns: Any) -> None:
    """Spark's source decodes whole pull bodies with the stored codec's ``stored_columns`` (and
    its C twin): the same verdict, in the same words, as every other reader."""
    good = stored_bytes(GOOD_PROPS)
    cols = columns(good, 10, stored.COLUMN_TAGS)
    assert (cols.rows, bytes(cols.tags_data)) == (1, b"a")
    with pytest.raises(RemoteProtocolError) as e:
        columns(good + bad, 10, stored.COLUMN_BODY | stored.COLUMN_TAGS)
    assert f"stored message at {len(good)}: {reason}" in str(e.value)


def test_the_cases_are_what_they_say() -> None:
    """Each bad message differs from a good one only where it says (the reasons are checked
    above; here that the good twin of every malformed-properties case parses)."""
    good = stored_bytes(GOOD_PROPS)
    assert problem(good) is None
    for props, _ in MALFORMED_PROPERTIES:
        fixed = props.split(PROPERTY_SEPARATOR.encode())[0] + PROPERTY_SEPARATOR.encode()
        assert problem(stored_bytes(fixed)) is None
