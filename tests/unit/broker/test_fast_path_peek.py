"""FastPath.peek (broker/_native/fastpath.c, pull_request.c) called directly: which frames it
reads as pulls, and that a pull it reads is the request and header the Python decoder reads
(decode_command, PullMessageRequestHeader.from_ext_fields), on generated headers and on every
range boundary. The same pulls over a socket, against a broker without the fast reader, are in
tests/integration/test_fast_path_differential.py; the fuzzer compares the two on any bytes
(fuzz/fuzz_twins.pull).
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any

import pytest

from orbitmq.broker.fast_path import INERT_PROPERTIES
from orbitmq.broker.native import NATIVE
from orbitmq.broker.processor.pull_processor import ParsedPull, parsed_pull
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.protocol.command import RemotingCommand, SerializeType, decode_command, encode
from orbitmq.protocol.headers import PullMessageRequestHeader

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

PULL = int(RequestCode.PULL_MESSAGE)
I32_MAX, I64_MAX, I64_MIN = 2**31 - 1, 2**63 - 1, -(2**63)
CONSUMER = {"consumerGroup": "g", "topic": "Orders", "queueId": "3", "queueOffset": "120",
            "maxMsgNums": "32", "sysFlag": "3", "commitOffset": "118",
            "suspendTimeoutMillis": "15000", "subscription": "a || b", "subVersion": "1767000000000",
            "expressionType": "TAG"}


def fast_path() -> Any:
    assert NATIVE is not None
    return NATIVE.FastPath(bytes(8), 4096, 1 << 20, 1 << 20, tuple(INERT_PROPERTIES),
                           (1024, 4096), 1 << 30)


def pull(fields: dict[str, Any], serialize: SerializeType = SerializeType.JSON, **kw: Any) -> bytes:
    return encode(RemotingCommand(kw.pop("code", PULL), opaque=kw.pop("opaque", 7),
                                  ext_fields=fields, serialize_type=serialize, **kw))


def python_read(frame: bytes) -> tuple[Any, ...] | None:
    """What the Python path reads from ``frame``: the peek tuple's values, or None when it
    refuses the frame or the header."""
    try:
        cmd = decode_command(frame[4:])
        h = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    except RemoteProtocolError:
        return None
    return (len(frame), cmd.code, cmd.opaque, cmd.flag, cmd.version, int(cmd.serialize_type),
            h.consumer_group, h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, h.sys_flag,
            h.commit_offset, h.suspend_timeout_millis, h.subscription, h.sub_version,
            h.expression_type, h.max_msg_bytes)


def same_or_declined(fp: Any, frame: bytes) -> bool:
    """peek's pull equals the Python path's reading; True when peek read it, False when it
    left it to the Python decoder."""
    got = fp.peek(frame, 0)
    if not isinstance(got, tuple):
        return False
    assert got == python_read(frame), frame
    return True


@pytest.mark.parametrize("serialize", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_consumers_pull_is_read_as_python_reads_it(serialize: SerializeType) -> None:
    fp = fast_path()
    for fields in (CONSUMER, {k: v for k, v in CONSUMER.items() if k not in
                              ("subscription", "subVersion", "expressionType")},
                   {**CONSUMER, "subscription": "", "expressionType": "", "maxMsgBytes": "65536",
                    "bname": "broker-a", "lo": "true"}):
        frame = pull(fields, serialize, version=399)
        assert same_or_declined(fp, frame), fields
    cmd = parsed_pull(fp.peek(pull(CONSUMER, serialize, opaque=42), 0))
    assert type(cmd) is ParsedPull and cmd.opaque == 42 and cmd.serialize_type is serialize
    assert cmd.header == PullMessageRequestHeader.from_ext_fields(CONSUMER)
    assert cmd.response(1).serialize_type is serialize


@pytest.mark.parametrize(("name", "values"), [
    ("queueId", ["0", str(I32_MAX), "-1", str(I32_MAX + 1)]),
    ("queueOffset", [str(I64_MIN + 1), "-5", "0", str(I64_MAX)]),
    ("maxMsgNums", ["1", str(I32_MAX), "0", str(I32_MAX + 1)]),
    ("sysFlag", ["0", "31", "32", "-1"]),
    ("commitOffset", ["-1", str(I64_MAX), "-2"]),
    ("suspendTimeoutMillis", ["0", str(I64_MAX), "-1"]),
    ("subVersion", ["", str(I64_MAX), str(I64_MIN + 1), "x"]),
    ("maxMsgBytes", ["", "1", str(I32_MAX), "0", str(I32_MAX + 1)]),
])
def test_every_range_boundary_reads_the_same_or_is_left_to_python(name: str,
                                                                   values: list[str]) -> None:
    fp = fast_path()
    for value in values:
        frame = pull({**CONSUMER, name: value})
        taken = same_or_declined(fp, frame)
        if python_read(frame) is None:
            assert not taken, (name, value)  # what Python refuses, C never takes


@pytest.mark.parametrize(("why", "frame"), [
    ("a name missing", pull({k: v for k, v in CONSUMER.items() if k != "commitOffset"})),
    ("oneway", pull(CONSUMER, flag=2)),
    ("a response", pull(CONSUMER, flag=1)),
    ("a body", pull(CONSUMER, body=b"x")),
    ("a sign", pull({**CONSUMER, "queueId": "+3"})),
    ("blanks", pull({**CONSUMER, "queueOffset": " 120"})),
    ("the bulk code", pull(CONSUMER, code=int(OrbitMQRequestCode.PULL_MESSAGE_BULK))),
])
def test_what_the_reader_leaves_to_the_python_decoder(why: str, frame: bytes) -> None:
    assert fast_path().peek(frame, 0) is False, why


def test_a_name_given_twice_is_left_to_the_python_decoder() -> None:
    text = json.dumps({"code": PULL, "opaque": 1, "flag": 0, "language": "JAVA", "version": 1,
                       "extFields": {k: v for k, v in CONSUMER.items() if k != "topic"}})
    text = text.replace('"consumerGroup"', '"topic": "A", "topic": "B", "consumerGroup"')
    raw = text.encode()
    frame = struct.pack(">ii", 4 + len(raw), len(raw)) + raw
    assert decode_command(frame[4:]).ext_fields["topic"] == "B"  # the last one, in Python
    assert fast_path().peek(frame, 0) is False


def test_sends_partial_and_unreadable_frames_are_take_s_to_decide() -> None:
    fp = fast_path()
    send = encode(RemotingCommand(int(RequestCode.SEND_MESSAGE_V2), opaque=1,
                                  ext_fields={"a": "p", "b": "Orders"}, body=b"x"))
    assert fp.peek(send, 0) is True
    assert fp.peek(pull(CONSUMER)[:-1], 0) is True  # not all in yet
    assert fp.peek(b"\x00\x00", 0) is True
    assert fp.peek(struct.pack(">ii", 5, 1 << 24) + b"?", 0) is True  # unreadable header
    heartbeat = encode(RemotingCommand(int(RequestCode.HEART_BEAT), opaque=2, body=b"{}"))
    assert fp.peek(heartbeat, 0) is False
    both = heartbeat + pull(CONSUMER)
    assert isinstance(fp.peek(both, len(heartbeat)), tuple)
    with pytest.raises(ValueError):
        fp.peek(both, len(both) + 1)


def test_generated_pulls_read_the_same() -> None:
    fp = fast_path()
    rng = random.Random(41)
    odd = ["", "-", "0x1", "1_0", "٣", "99999999999999999999", "-0", "00", "1 ", "true"]
    taken = 0
    for _ in range(3000):
        fields = dict(CONSUMER)
        for name in rng.sample(sorted(fields), rng.randint(0, 3)):
            roll = rng.random()
            if roll < 0.2:
                del fields[name]
            elif roll < 0.6:
                fields[name] = rng.choice(odd)
            else:
                fields[name] = str(rng.randint(-(2**40), 2**40))
        if rng.random() < 0.2:
            fields[rng.choice(["bname", "x", "topicé"])] = rng.choice(["1", "é", ""])
        serialize = rng.choice([SerializeType.JSON, SerializeType.ROCKETMQ])
        taken += same_or_declined(fp, pull(fields, serialize, version=rng.choice([0, 399, -7])))
    assert taken > 300  # the reader takes what consumers send, not only the canonical shape
