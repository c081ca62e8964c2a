"""Bad input over the wire gets a response code with a remark or a closed connection; the broker
keeps serving others and its store does not change."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from test_broker_support import BrokerHarness, RawConnection, broker_config, length_prefix

from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, encode

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def h(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerHarness]:
    harness = BrokerHarness(broker_config(tmp_path_factory.mktemp("bad-input")))
    harness.send_ok("Healthy", b"seed")
    yield harness
    harness.close()


@pytest.fixture
def unchanged(h: BrokerHarness) -> Iterator[None]:
    """The store and the topic table are the same after the test; the broker still serves."""
    h.wait_dispatched()
    store = h.broker.store
    before = (store.max_physical_offset(), sorted(h.broker.topics.table))
    yield
    h.wait_dispatched()
    assert (store.max_physical_offset(), sorted(h.broker.topics.table)) == before
    assert [m.body for m in h.pull_all("Healthy", 0)][:1] == [b"seed"]


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


@pytest.mark.usefixtures("unchanged")
def test_absurd_frame_length_closes_the_connection(h: BrokerHarness) -> None:
    for total in (0x7FFFFFFF, -5, 2):
        c = RawConnection(h.port)
        c.send(length_prefix(total))
        assert c.is_closed_by_peer()
        c.close()


@pytest.mark.usefixtures("unchanged")
def test_garbage_header_closes_the_connection(h: BrokerHarness) -> None:
    for header in (b"{not json", b"[1, 2]", b'{"code": "ten"}', b"\xff\xfe"):
        c = RawConnection(h.port)
        c.send(_json_frame(header))
        assert c.is_closed_by_peer(), header
        c.close()
    c = RawConnection(h.port)
    c.send(struct.pack(">ii", 12, (7 << 24) | 4) + b"abcd" + b"efgh")  # unknown serialize type
    assert c.is_closed_by_peer()
    c.close()


@pytest.mark.usefixtures("unchanged")
def test_unknown_code_and_malformed_fields_get_a_code_and_remark(h: BrokerHarness) -> None:
    c = RawConnection(h.port)
    try:
        c.send(encode(RemotingCommand.request(4242, {"x": "y"})))
        r = c.response()
        assert r is not None and r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "4242" in r.remark
        c.send(encode(RemotingCommand.request(RequestCode.SEND_MESSAGE, {"topic": "T"}, b"x")))
        r = c.response()
        assert r is not None and r.code == ResponseCode.MESSAGE_ILLEGAL and "producerGroup" in r.remark
        fields = h.pull_fields("Healthy", 0, 0)
        fields["queueId"] = "zero"
        c.send(encode(RemotingCommand.request(RequestCode.PULL_MESSAGE, fields)))
        r = c.response()
        assert r is not None and r.code == ResponseCode.INVALID_PARAMETER and "queueId" in r.remark
        c.send(encode(RemotingCommand.request(RequestCode.HEART_BEAT, {}, b"\x00garbage")))
        r = c.response()
        assert r is not None and r.code == ResponseCode.INVALID_PARAMETER and r.remark
        # the same connection still works
        c.send(encode(RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "Healthy", "queueId": "0"})))
        r = c.response()
        assert r is not None and r.code == ResponseCode.SUCCESS
    finally:
        c.close()


@pytest.mark.usefixtures("unchanged")
def test_illegal_topics_are_refused(h: BrokerHarness) -> None:
    for topic, code, words in (
        ("has space", ResponseCode.MESSAGE_ILLEGAL, "illegal characters"),
        ("slash/topic", ResponseCode.MESSAGE_ILLEGAL, "illegal characters"),
        ("t" * 128, ResponseCode.MESSAGE_ILLEGAL, "max length"),
        ("TBW102", ResponseCode.NO_PERMISSION, "forbidden"),
        ("SCHEDULE_TOPIC_XXXX", ResponseCode.NO_PERMISSION, "forbidden"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", ResponseCode.NO_PERMISSION, "forbidden"),
    ):
        r = h.send(topic, b"x")
        assert r.code == code and words in r.remark, (topic, r.code, r.remark)


def test_unknown_topic_without_auto_create(tmp_path_factory: pytest.TempPathFactory) -> None:
    h2 = BrokerHarness(broker_config(tmp_path_factory.mktemp("no-auto"), auto_create_topic=False))
    try:
        r = h2.send("NeverCreated", b"x")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NeverCreated" in r.remark
        assert h2.broker.store.max_physical_offset() == 0
    finally:
        h2.close()


@pytest.mark.usefixtures("unchanged")
def test_oversized_body_properties_and_bad_batches(h: BrokerHarness) -> None:
    r = h.send("Healthy", b"x" * (4 * MiB + 1))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "exceeds" in r.remark
    r = h.send("Healthy", b"x", props={"big": "p" * 40_000})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "properties" in r.remark
    h_fields = h.send_header("Healthy", 0, batch=True).to_ext_fields()
    for body in (b"\x00\x00\x00\x05junk", b"\x00" * 30, b""):
        r = h.invoke(RequestCode.SEND_MESSAGE, h_fields, body)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and r.remark, body
    transaction = h.send_header("Healthy", 0, batch=True).to_ext_fields()
    transaction["sysFlag"] = "4"  # a batch cannot be a transaction's half message
    r = h.invoke(RequestCode.SEND_MESSAGE, transaction, encode_batch([(0, b"half", {})]))
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "transaction" in r.remark


@pytest.mark.usefixtures("unchanged")
def test_properties_that_cannot_be_stored_are_refused(h: BrokerHarness) -> None:
    """Properties UTF-8 cannot hold: a lone surrogate escaped in a JSON header ("\\ud800") is a
    header the decoder refuses (the connection closes, as for other garbage headers); bytes
    that are not UTF-8 in a batch entry get MESSAGE_ILLEGAL."""
    fields = h.send_header("Healthy", 0).to_ext_fields()
    fields["properties"] = "KEYS\x01a\ud800b\x02"
    header = json.dumps({"code": int(RequestCode.SEND_MESSAGE), "language": "JAVA", "version": 0,
                         "opaque": 77, "flag": 0, "extFields": fields}).encode()
    c = RawConnection(h.port)
    c.send(_json_frame(header, b"x"))
    assert c.is_closed_by_peer()
    c.close()
    batch_fields = h.send_header("Healthy", 0, batch=True).to_ext_fields()
    bad_utf8 = struct.pack(">iiiii", 22 + 1 + 5, 0, 0, 0, 1) + b"x" + struct.pack(">h", 5) + b"K\x01\xff\xfe\x02"
    r = h.invoke(RequestCode.SEND_BATCH_MESSAGE, batch_fields, bad_utf8)
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "UTF-8" in r.remark


@pytest.mark.usefixtures("unchanged")
def test_frame_cut_midway_then_closed(h: BrokerHarness) -> None:
    frame = encode(RemotingCommand.request(RequestCode.SEND_MESSAGE,
                                           h.send_header("Healthy").to_ext_fields(), b"z" * 10_000))
    for cut in (3, 10, len(frame) // 2, len(frame) - 1):
        c = RawConnection(h.port)
        c.send(frame[:cut])
        c.close()
    # A whole frame after the cut ones is served normally on a fresh connection.
    c = RawConnection(h.port)
    c.send(encode(RemotingCommand.request(RequestCode.GET_MIN_OFFSET, {"topic": "Healthy", "queueId": "0"})))
    r = c.response()
    assert r is not None and r.code == ResponseCode.SUCCESS
    c.close()


@pytest.mark.usefixtures("unchanged")
def test_frame_over_the_maximum_is_refused_before_it_arrives(h: BrokerHarness) -> None:
    header = orjson.dumps({"code": 10, "flag": 0, "opaque": 1, "extFields": {}})
    c = RawConnection(h.port)
    c.send(struct.pack(">ii", 17 * MiB, len(header)) + header)  # then nothing of the 17 MiB
    assert c.is_closed_by_peer()
    c.close()


def test_other_clients_are_served_while_one_misbehaves(h: BrokerHarness) -> None:
    bad = RawConnection(h.port)
    bad.send(_json_frame(b'{"code": 10, "opaque": 1, "flag": 0}')[:9])  # half a frame, then silence
    try:
        r = h.send_ok("Healthy", b"during")
        assert r.ext_fields["queueId"] == "0"
        assert h.pull_all("Healthy", 0)[-1].body == b"during"
    finally:
        bad.close()


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize(("field", "value"), [
    ("bornTimestamp", "99999999999999999999"), ("bornTimestamp", "-1"),
    ("flag", "2147483648"), ("queueId", "-2147483649"), ("sysFlag", "65536"),
    ("reconsumeTimes", "4294967296"),
])
def test_send_numbers_out_of_range_are_refused_before_the_store(h: BrokerHarness, field: str,
                                                                 value: str) -> None:
    """They used to reach the store and come back as SYSTEM_ERROR carrying an OverflowError or a
    struct.error; now the header refuses them, naming the field."""
    for code, fields in ((RequestCode.SEND_MESSAGE, h.send_header("Healthy", 0).to_ext_fields()),
                         (RequestCode.SEND_MESSAGE_V2, h.send_header("Healthy", 0).to_v2_ext_fields())):
        key = field if code == RequestCode.SEND_MESSAGE else dict(
            zip(h.send_header("Healthy", 0).to_ext_fields(), fields, strict=True))[field]
        r = h.invoke(code, {**fields, key: value}, b"x")
        assert r.code == ResponseCode.MESSAGE_ILLEGAL, (code, field, r.remark)
        assert field in r.remark and value in r.remark and "Error" not in r.remark


@pytest.mark.usefixtures("unchanged")
def test_other_families_answer_invalid_parameter_naming_the_field(h: BrokerHarness) -> None:
    fields = h.pull_fields("Healthy", 0, 0)
    for key, value in (("maxMsgNums", "0"), ("sysFlag", "64"), ("queueOffset", "1e999")):
        r = h.invoke(RequestCode.PULL_MESSAGE, {**fields, key: value})
        assert r.code == ResponseCode.INVALID_PARAMETER and key in r.remark, (key, r.remark)
    r = h.invoke(RequestCode.QUERY_CONSUMER_OFFSET,
                 {"consumerGroup": "g", "topic": "Healthy", "queueId": "-1"})
    assert r.code == ResponseCode.INVALID_PARAMETER and "queueId" in r.remark


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("topic", ["..", ".", "", "a/b", "../Healthy"])
def test_deleting_a_topic_named_like_a_path_is_refused(h: BrokerHarness, topic: str) -> None:
    """Found by the wire fuzzer: DELETE_TOPIC_IN_BROKER of ".." removed the directory above the
    consume queues, the whole store, and every message was gone after a restart."""
    r = h.invoke(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
    assert r.code == ResponseCode.INVALID_PARAMETER and r.remark, (topic, r.code, r.remark)
    assert (Path(h.config.store.store_path) / "commitlog").is_dir()
    assert (Path(h.config.store.store_path) / "consumequeue" / "Healthy").is_dir()


@pytest.mark.usefixtures("unchanged")
@pytest.mark.parametrize("limit", ["²", "-1", "0", "many", "99999999999"])
def test_a_transaction_list_limit_that_is_not_a_count_is_refused(h: BrokerHarness,
                                                                 limit: str) -> None:
    """Found by the wire fuzzer: a limit of "²" (a digit to str.isdigit, not to int) was answered
    SYSTEM_ERROR with a ValueError inside."""
    r = h.invoke(OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS, {"limit": limit})
    assert r.code == ResponseCode.INVALID_PARAMETER and "limit" in r.remark
    assert h.invoke(OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS, {"limit": "5"}).code == 0
