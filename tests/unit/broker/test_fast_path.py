"""FastPath.take (broker/_native/fastpath.c) called directly: what it takes, what it declines and why,
where it stops, and that what it stores is what the stored codec stores. No sockets: a bytearray
stands for the commit log segment, a dict for the queue-offset table, as in CommitLog.

The byte-for-byte comparison with the Python path over whole request streams is
tests/integration/test_fast_path_differential.py; the fuzzer is fuzz/speedups_fuzz.c.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from typing import Any

import pytest

from orbitmq.broker.fast_path import INERT_PROPERTIES, plain_topic
from orbitmq.broker.native import NATIVE
from orbitmq.protocol import stored
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.bodies import Perm, TopicConfig
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand, SerializeType, decode_command, encode
from orbitmq.protocol.native import NATIVE as PROTOCOL_NATIVE

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

STORE = bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
BORN = bytes([10, 1, 2, 3]) + (40000).to_bytes(4, "big")
NOW = 1_767_000_000_123
SEG = 64 * 1024
PARTIAL, DECLINED, SEGMENT_FULL = 0, 1, 2


def fast_path(**topics: int) -> Any:
    assert NATIVE is not None
    fp = NATIVE.FastPath(STORE, 4096, SEG - 8, 1 << 20, tuple(INERT_PROPERTIES),
                         (1024, 4096), 1 << 30)
    fp.set_topics(topics or {"Orders": 4})
    return fp


def send(opaque: int = 1, topic: str = "Orders", body: bytes = b"hello", qid: int = 1,
         props: str = "UNIQ_KEY\x01ABC\x02", *, code: int = RequestCode.SEND_MESSAGE_V2,
         ser: SerializeType = SerializeType.JSON, flag: int = 0, **fields: str) -> bytes:
    ext = {"a": "p", "b": topic, "c": "TBW102", "d": "4", "e": str(qid), "f": "0",
           "g": "1767000000000", "h": "0", "i": props, "j": "0", "k": "false", "m": "false",
           **fields}
    return encode(RemotingCommand(code=int(code), opaque=opaque, flag=flag, ext_fields=ext,
                                  body=body, serialize_type=ser))


def json_frame(header: str, body: bytes = b"x") -> bytes:
    raw = header.encode()
    return struct.pack(">ii", 4 + len(raw) + len(body), len(raw)) + raw + body


def known(*topics: str, queues: int = 8) -> dict[tuple[str, int], int]:
    """A queue-offset table holding every queue of ``topics`` at offset 0: the fast path takes
    sends to the queues the table holds only (a queue it lacks is new, or not loaded yet)."""
    return {(t, q): 0 for t in topics for q in range(queues)}


def take(fp: Any, data: bytes, seg: bytearray | None = None, seg_pos: int = 0,
         table: dict[tuple[str, int], int] | None = None) -> tuple[Any, ...]:
    seg = bytearray(SEG) if seg is None else seg
    return tuple(fp.take(bytearray(data), 0, BORN, seg, seg_pos, 0, NOW,
                         known("Orders", "A", "Ördérs") if table is None else table))


def test_takes_a_plain_send_stores_what_the_codec_stores_and_answers_it() -> None:
    fp, seg, table = fast_path(), bytearray(SEG), {("Orders", 1): 7}
    frame = send(opaque=42, version=0)
    pos, end, answers, stop, counts, by_code = take(fp, frame, seg, 0, table)
    assert (pos, stop) == (len(frame), PARTIAL)
    msg = stored.decode_stored_message(bytes(seg[:end]))
    assert (msg.topic, msg.queue_id, msg.queue_offset, msg.body) == ("Orders", 1, 7, b"hello")
    assert msg.properties == {"UNIQ_KEY": "ABC"} and msg.store_timestamp == NOW
    expected = stored.encode_wire_single("Orders", 1, b"hello", "UNIQ_KEY\x01ABC\x02", 0, 0,
                                         1767000000000, ("10.1.2.3", 40000),
                                         ("127.0.0.1", 10911), 0)
    assert expected is not None
    stored.patch_positions(expected.blob, 0, 0, 7, NOW, [0])
    assert bytes(seg[:end]) == bytes(expected.blob)
    assert table == {("Orders", 1): 8}
    answer = decode_command(answers[4:])
    assert (answer.code, answer.opaque, answer.flag) == (0, 42, 1)
    assert answer.ext_fields == {"msgId": "7F00000100002A9F0000000000000000", "queueId": "1",
                                 "queueOffset": "7"}
    assert counts == [("Orders", 1, 1, end, (1, 0, 0))] and by_code == (0, 1, 0)
    assert fp.counts()["handled"] == 1


def test_takes_every_frame_it_can_and_stops_at_the_first_it_declines() -> None:
    fp = fast_path()
    frames = [send(1), send(2, qid=3), send(3, topic="Unknown"), send(4)]
    pos, end, answers, stop, _, by_code = take(fp, b"".join(frames))
    assert by_code == (0, 2, 0)
    assert (pos, stop) == (len(frames[0]) + len(frames[1]), DECLINED)
    assert len(answers) > 0 and end > 0
    # the caller hands the declined frame to the Python path and asks again from after it
    rest = b"".join(frames[3:])
    assert take(fp, rest)[0] == len(rest)


def test_a_partial_frame_waits_for_its_bytes() -> None:
    fp, frame = fast_path(), send()
    for cut in (0, 3, 4, 8, len(frame) - 1):
        assert take(fp, frame[:cut])[:4] == (0, 0, None, PARTIAL)


@pytest.mark.parametrize("case", [
    dict(topic="Unknown"),  # unknown topic: auto-creation is the Python path's
    dict(qid=-1), dict(qid=4),  # a queue the broker picks itself
    dict(props="UNIQ_KEY\x01A\x02DELAY\x013\x02"),  # routed
    dict(props="TRAN_MSG\x01true\x02"),
    dict(props="user\x01v\x02"),  # not an inert name
    dict(props="TIMER_DELIVER_MS\x011\x02"),
    dict(props="UNIQ_KEY\x01A\x02UNIQ_KEY\x01B\x02"),  # the rule refuses it: the Python path says why
    dict(props="noseparator\x02"),
    dict(body=b"x" * 4097),  # over max_message_size
    dict(f="4"), dict(f="8"), dict(f="-1"),  # transaction, commit type, garbage
    dict(e="+1"), dict(e=" 1"), dict(e="1.0"), dict(d=""), dict(g="-1"),
    dict(k="maybe"), dict(j="-1"), dict(l="-2"),
    dict(code=RequestCode.PULL_MESSAGE), dict(code=RequestCode.END_TRANSACTION),
    dict(flag=1),  # a response
])
def test_declines(case: dict[str, Any]) -> None:
    fp = fast_path()
    pos, end, answers, stop, counts, by_code = take(fp, send(**case))
    assert (pos, end, answers, stop, counts, by_code) == (0, 0, None, DECLINED, None, (0, 0, 0))


def test_declines_v1_names_and_header_shapes_it_does_not_read() -> None:
    fp = fast_path()
    ok = json.loads(send()[8:].split(b"hello")[0])
    variants = [
        {**ok, "extFields": {**ok["extFields"], "producerGroup": "p"}},  # V1 names
        {**ok, "extFields": {**ok["extFields"], "e": 1}},  # a number (the C++ client)
        {**ok, "code": 310.0}, {**ok, "code": "310"}, {**ok, "opaque": 2**31},
        {**ok, "remark": 5}, {k: v for k, v in ok.items() if k != "code"},
    ]
    for header in variants:
        assert take(fp, json_frame(json.dumps(header)))[3] == DECLINED, header
    text = json.dumps(ok)
    for bad in (text.replace('"code"', '"code": 310, "code"', 1),  # a key given twice
                text.replace('"b": "Orders"', '"b": "Ord\\ud800ers"'),  # an escaped surrogate
                text + " x", text.replace("{", "{,", 1), text.replace('"opaque": 1', '"opaque": 01'),
                text.replace('"opaque": 1', '"opaque": 1234567890123456789')):
        assert take(fp, json_frame(bad))[3] == DECLINED, bad
    assert take(fp, json_frame(text.replace("{", " {\n", 1) + "\t"))[3] == PARTIAL


def test_json_escapes_and_unknown_members_are_read_as_the_python_decoder_reads_them() -> None:
    fp = fast_path(**{"Orders": 4, "Ördérs": 2})
    ok = json.loads(send()[8:].split(b"hello")[0])
    header = {**ok, "extFields": {**ok["extFields"], "b": "Ördérs"}, "extra": [1, {"a": None}],
              "serializeTypeCurrentRPC": "JSON"}
    frame = json_frame(json.dumps(header, ensure_ascii=True), b"hello")
    pos, end, answers, stop, counts, _ = take(fp, frame)
    assert stop == PARTIAL and counts[0][0] == "Ördérs"


def test_binary_headers_and_batches_and_oneway() -> None:
    fp, seg, table = fast_path(), bytearray(SEG), known("Orders")
    body = encode_batch([(0, b"a" * 10, {"UNIQ_KEY": "1"}), (5, b"", {"TAGS": "t", "KEYS": "x"})])
    frames = [send(1, body=body, code=RequestCode.SEND_BATCH_MESSAGE, ser=SerializeType.ROCKETMQ,
                   props=""),
              send(2, flag=2), send(3, ser=SerializeType.ROCKETMQ)]
    pos, end, answers, stop, counts, by_code = take(fp, b"".join(frames), seg, 0, table)
    assert by_code == (0, 2, 1)
    assert stop == PARTIAL and pos == sum(map(len, frames))
    msgs = list(stored.iter_stored_messages(bytes(seg[:end])))
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3] and msgs[1].flag == 5
    first = decode_command(answers[4 : 4 + struct.unpack_from(">i", answers)[0]])
    assert first.serialize_type == SerializeType.ROCKETMQ and first.opaque == 1
    assert first.ext_fields["msgId"].count(",") == 1
    assert counts == [("Orders", 3, 4, end, (4, 0, 0))]
    assert answers.count(b"msgId") == 2  # the oneway send is stored, not answered


def test_a_send_that_does_not_fit_the_segment_is_left_for_the_roll() -> None:
    fp, frame = fast_path(), send(body=b"x" * 1000)
    size = take(fp, frame)[1]
    seg = bytearray(SEG)
    at = SEG - size - 7  # one byte short of the blank entry's room
    assert take(fp, frame, seg, at)[1:4] == (at, None, SEGMENT_FULL)
    assert take(fp, frame, seg, at - 1)[1:4:2] == (SEG - 8, PARTIAL)


def test_the_snapshot_follows_set_topics_and_leaves_out_what_cannot_be_stored() -> None:
    fp = fast_path()
    assert fp.set_topics({"A": 1, "": 3, "a/b": 2, "..": 1, "x" * 128: 1, "Z": 0, "Y": "2"}) == 1
    assert take(fp, send(topic="Orders"))[3] == DECLINED
    assert take(fp, send(topic="A", qid=0))[3] == PARTIAL


def test_plain_topic_is_an_allow_list() -> None:
    assert plain_topic(TopicConfig("Orders", 4, 4))
    for tc in (TopicConfig("Orders", 4, 4, int(Perm.READ)), TopicConfig("Orders", 4, 0),
               TopicConfig("TBW102", 8, 8), TopicConfig("%RETRY%g", 1, 1),
               TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18)):
        assert not plain_topic(tc), tc

    @dataclasses.dataclass(slots=True)
    class LaterTopicConfig(TopicConfig):  # a field added later (a message type, say)
        attributes: dict[str, str] = dataclasses.field(default_factory=dict)

    import orbitmq.broker.fast_path as module

    later = [(f.name, {}) for f in dataclasses.fields(LaterTopicConfig) if f.name == "attributes"]
    saved = module._OTHER_TOPIC_FIELDS
    module._OTHER_TOPIC_FIELDS = tuple(later)
    try:
        assert plain_topic(LaterTopicConfig("Orders", 4, 4))
        assert not plain_topic(LaterTopicConfig("Orders", 4, 4, attributes={"message.type": "FIFO"}))
    finally:
        module._OTHER_TOPIC_FIELDS = saved


def test_positions_outside_their_buffers_are_refused() -> None:
    fp = fast_path()
    with pytest.raises(ValueError):
        fp.take(bytearray(b"1234"), 5, BORN, bytearray(SEG), 0, 0, NOW, {})
    with pytest.raises(ValueError):
        fp.take(bytearray(b""), 0, BORN, bytearray(SEG), SEG + 1, 0, NOW, {})
    with pytest.raises(TypeError):
        fp.take(bytearray(b""), 0, BORN, bytearray(SEG), 0, 0, NOW, [])


def test_crc_is_zlibs() -> None:
    import zlib

    assert PROTOCOL_NATIVE is not None and PROTOCOL_NATIVE.CRC32_FROM_ZLIB == 1
    for body in (b"", b"a", bytes(range(256)) * 40):
        blob = stored.encode_wire_single("T", 0, body, None, 0, 0, 0, ("1.2.3.4", 1),
                                         ("1.2.3.4", 2), 0)
        assert blob is not None
        assert struct.unpack_from(">i", blob.blob, 8)[0] == zlib.crc32(body) & 0x7FFFFFFF


def test_requests_answered_outside_dispatch_are_sampled_as_dispatched_ones() -> None:
    """RemotingServer.note_answered: one request in ``every`` timed, wherever it was answered."""
    from orbitmq.transport.server import RemotingServer

    recorded: list[tuple[int, int | None, float]] = []
    server = RemotingServer(name="t")
    server.sample_requests(3, lambda code, resp, s: recorded.append((code, resp, s)))
    for count in (1, 1, 1, 5, 2, 9):  # 19 requests: the 3rd, 6th, ... 18th are timed
        server.note_answered(310, 0, count, 0.5)
    assert recorded == [(310, 0, 0.5)] * 6
    assert server._sample_countdown == 2  # the 21st is next


def test_put_topic_adds_changes_and_removes_one_topic_as_set_topics_would() -> None:
    """The incremental snapshot: thousands of adds and removes (the slots grow and entries move
    back on removal) leave exactly the topics a whole snapshot of the same table would."""
    fp = fast_path(Orders=4)
    names = [f"T{i}" for i in range(3000)]
    for name in names:
        assert fp.put_topic(name, 2) is True
    for name in names[::3]:  # removal: the last entry fills the hole, probing chains close
        assert fp.put_topic(name, 0) is False
    assert fp.put_topic("T1", 1) is True  # a change in place
    assert fp.put_topic("a/b", 2) is False and fp.put_topic("", 1) is False  # never stored
    assert fp.put_topic("Missing", 0) is False
    table = known(*names, "Orders")
    for i, name in enumerate(names):
        kept = i % 3 != 0
        got = take(fp, send(topic=name, qid=1), table=table)[3]
        want = PARTIAL if kept and name != "T1" else DECLINED
        assert got == want, (name, got)
    assert take(fp, send(topic="T1", qid=0), table=table)[3] == PARTIAL
    assert take(fp, send(topic="Orders", qid=3), table=table)[3] == PARTIAL


def test_a_queue_the_table_lacks_is_left_to_the_python_path() -> None:
    """New, or on disk and not loaded yet: the Python path asks the store for its offset."""
    fp, table = fast_path(), {("Orders", 1): 3}
    assert take(fp, send(qid=2), table=table)[3] == DECLINED and table == {("Orders", 1): 3}
    assert take(fp, send(qid=1), table=table)[3] == PARTIAL and table == {("Orders", 1): 4}
