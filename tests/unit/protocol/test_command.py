"""RemotingCommand codec: layout, both serialize types, leniency for real clients, strict errors."""

from __future__ import annotations

import json
import struct
from typing import Any

import orjson
import pytest

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol import (
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    decode_command,
    encode,
    encode_header,
)


def json_frame(header: Any, body: bytes = b"", *, raw: bytes | None = None) -> bytes:
    """A frame WITHOUT its total length, around a JSON header given as data or raw bytes."""
    text = raw if raw is not None else json.dumps(header).encode()
    return struct.pack(">I", len(text)) + text + body


def binary_header(code: int = 10, language: int = 3, version: int = 1, opaque: int = 7,
                  flag: int = 0, remark: bytes = b"", ext: bytes = b"") -> bytes:
    return (struct.pack(">hBhiii", code, language, version, opaque, flag, len(remark)) + remark
            + struct.pack(">i", len(ext)) + ext)


def ext_pair(key: bytes, value: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value


def binary_frame(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">I", (1 << 24) | len(header)) + header + body


# ----------------------------------------------------------------------------- building commands
def test_request_and_response_helpers() -> None:
    req = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"}, b"x")
    assert req.code == 11 and req.ext_fields == {"topic": "T"} and req.body == b"x"
    assert not req.is_response and not req.is_oneway
    req.opaque = 42
    req.serialize_type = SerializeType.ROCKETMQ
    resp = req.response(ResponseCode.PULL_NOT_FOUND, "nothing", {"minOffset": "0"})
    assert resp.opaque == 42 and resp.is_response and not resp.is_oneway
    assert resp.serialize_type is SerializeType.ROCKETMQ
    assert resp.remark == "nothing" and resp.ext_fields == {"minOffset": "0"}
    assert RemotingCommand.request(37, oneway=True).is_oneway


def test_request_copies_ext_fields() -> None:
    fields = {"a": "1"}
    req = RemotingCommand.request(10, fields)
    fields["b"] = "2"
    assert req.ext_fields == {"a": "1"}


def test_default_ext_fields_are_not_shared() -> None:
    first, second = RemotingCommand(code=1), RemotingCommand(code=1)
    first.ext_fields["k"] = "v"
    assert second.ext_fields == {}


# ----------------------------------------------------------------------------- JSON encoding
def test_json_frame_layout() -> None:
    cmd = RemotingCommand(code=105, opaque=9, ext_fields={"topic": "T"}, body=b"abc")
    frame = encode(cmd)
    total, mixed = struct.unpack_from(">iI", frame)
    assert total == len(frame) - 4
    assert mixed >> 24 == 0
    header = orjson.loads(frame[8 : 8 + (mixed & 0xFFFFFF)])
    assert header == {"code": 105, "language": "PYTHON", "version": 0, "opaque": 9, "flag": 0,
                      "extFields": {"topic": "T"}}
    assert frame.endswith(b"abc")
    assert encode_header(cmd) + b"abc" == frame


def test_json_remark_written_when_present() -> None:
    frame = encode(RemotingCommand(code=0, flag=1, remark="héllo"))
    assert orjson.loads(frame[8:])["remark"] == "héllo"


def test_ext_field_numbers_from_callers_are_written_as_strings() -> None:
    cmd = RemotingCommand(code=10, ext_fields={"queueId": 3, "batch": True})
    back = decode_command(encode(cmd)[4:])
    assert back.ext_fields == {"queueId": "3", "batch": "true"}


def test_memoryview_body_encodes_without_copy_semantics_changing() -> None:
    payload = bytearray(b"0123456789")
    cmd = RemotingCommand(code=11, body=memoryview(payload)[2:6])
    frame = encode(cmd)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    assert frame.endswith(b"2345")


# ----------------------------------------------------------------------------- binary encoding
def test_binary_header_layout() -> None:
    cmd = RemotingCommand(code=310, opaque=-5, flag=2, language=LanguageCode.GO, version=399,
                          remark="r", ext_fields={"a": "xy"}, serialize_type=SerializeType.ROCKETMQ)
    frame = encode(cmd)
    expected = binary_header(310, 9, 399, -5, 2, b"r", ext_pair(b"a", b"xy"))
    assert frame[8:] == expected
    assert struct.unpack_from(">iI", frame) == (4 + len(expected), (1 << 24) | len(expected))
    assert decode_command(frame[4:]) == cmd


def test_binary_empty_remark_decodes_as_none() -> None:
    cmd = RemotingCommand(code=1, remark="", serialize_type=SerializeType.ROCKETMQ)
    assert decode_command(encode(cmd)[4:]).remark is None


@pytest.mark.parametrize("field", ["code", "version", "opaque"])
def test_binary_refuses_values_that_do_not_fit(field: str) -> None:
    cmd = RemotingCommand(code=10, serialize_type=SerializeType.ROCKETMQ)
    setattr(cmd, field, 2**40)
    with pytest.raises(ClientError):
        encode(cmd)


def test_binary_refuses_long_ext_key() -> None:
    cmd = RemotingCommand(code=10, ext_fields={"k" * 40000: "v"},
                          serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(ClientError):
        encode_header(cmd)


def test_unknown_serialize_type_on_encode_is_misuse() -> None:
    cmd = RemotingCommand(code=10, serialize_type=5)
    with pytest.raises(ClientError):
        encode(cmd)


def test_oversized_header_is_misuse() -> None:
    cmd = RemotingCommand(code=10, remark="x" * (16 * 1024 * 1024))
    with pytest.raises(ClientError, match="exceeds"):
        encode_header(cmd)


# ----------------------------------------------------------------------------- decoding
def test_decode_bytes_gives_bytes_body_and_memoryview_gives_view() -> None:
    frame = encode(RemotingCommand(code=11, body=b"payload"))[4:]
    assert decode_command(frame).body == b"payload"
    assert isinstance(decode_command(frame).body, bytes)
    assert isinstance(decode_command(bytearray(frame)).body, bytes)
    view_cmd = decode_command(memoryview(frame))
    assert isinstance(view_cmd.body, memoryview) and bytes(view_cmd.body) == b"payload"


def test_empty_body_is_empty_bytes() -> None:
    assert decode_command(memoryview(encode(RemotingCommand(code=1))[4:])).body == b""


def test_cpp_style_header_is_accepted() -> None:
    header = {"code": 11, "extFields": {"queueId": 0, "sysFlag": 4, "maxMsgNums": 32,
                                        "ratio": 0.5, "unitMode": True, "gone": None,
                                        "topic": "T"},
              "flag": 0, "language": "CPP", "opaque": 12, "remark": "", "version": 63}
    cmd = decode_command(json_frame(header))
    assert cmd.language is LanguageCode.CPP and cmd.version == 63 and cmd.remark == ""
    assert cmd.ext_fields == {"queueId": "0", "sysFlag": "4", "maxMsgNums": "32", "ratio": "0.5",
                              "unitMode": "true", "topic": "T"}


def test_unknown_language_and_missing_optional_fields() -> None:
    cmd = decode_command(json_frame({"code": 3, "language": "KOTLIN"}))
    assert cmd.language is LanguageCode.OTHER
    assert (cmd.opaque, cmd.flag, cmd.version, cmd.remark, cmd.ext_fields) == (0, 0, 0, None, {})
    assert decode_command(json_frame({"code": 3, "language": 9})).language is LanguageCode.GO


def test_java_extra_header_keys_are_ignored() -> None:
    cmd = decode_command(json_frame({"code": 0, "serializeTypeCurrentRPC": "JSON", "flag": 1}))
    assert cmd.is_response


def test_remark_number_is_coerced() -> None:
    assert decode_command(json_frame({"code": 1, "remark": 5})).remark == "5"


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "shorter"),
        (b"\x00\x00", "shorter"),
        (struct.pack(">I", 50) + b"{}", "exceeds"),
        (json_frame(None, raw=b"{not json"), "not valid JSON"),
        (json_frame([1, 2]), "JSON object"),
        (json_frame({"opaque": 1}), "lacks 'code'"),
        (json_frame({"code": "10"}), "'code' must be an integer"),
        (json_frame({"code": 10.0}), "'code' must be an integer"),
        (json_frame({"code": True}), "'code' must be an integer"),
        (json_frame({"code": 1, "opaque": 2**40}), "out of 32-bit range"),
        (json_frame({"code": 1, "flag": "1"}), "'flag' must be an integer"),
        (json_frame({"code": 1, "remark": {}}), "'remark' must be a string"),
        (json_frame({"code": 1, "extFields": []}), "'extFields' must be an object"),
        (json_frame({"code": 1, "extFields": {"a": {"b": 1}}}), "extFields"),
        (json_frame({"code": 1, "extFields": {"a": [1]}}), "extFields"),
        (json_frame(None, raw=b'{"code":1,"remark":"\xff"}'), "not valid JSON"),
        (struct.pack(">I", (7 << 24) | 2) + b"{}", "unknown serialize type"),
        (binary_frame(b"\x00" * 10), "truncated"),
        (binary_frame(struct.pack(">hBhiii", 10, 3, 1, 7, 0, 100) + b"ab" + b"\x00" * 4),
         "remark length"),
        (binary_frame(struct.pack(">hBhiii", 10, 3, 1, 7, 0, -1) + b"\x00" * 4), "remark length"),
        (binary_frame(binary_header(remark=b"\xff\xfe")), "UTF-8"),
        (binary_frame(binary_header() + b"junk"), "extFields length"),
        (binary_frame(binary_header(ext=b"\x00")), "truncated"),
        (binary_frame(binary_header(ext=b"\x00\x05ab")), "bad length"),
        (binary_frame(binary_header(ext=b"\xff\xff" + b"\x00" * 4)), "bad length"),
        (binary_frame(binary_header(ext=struct.pack(">h", 1) + b"k" + struct.pack(">i", 9) + b"v")),
         "bad length"),
        (binary_frame(binary_header(ext=ext_pair(b"k", b"\xc3"))), "UTF-8"),
    ],
)
def test_malformed_frames_raise_remote_protocol_error(frame: bytes, message: str) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        decode_command(frame)


def test_binary_decoding_of_hand_built_header() -> None:
    ext = ext_pair(b"topic", "tópico".encode()) + ext_pair(b"queueId", b"3")
    cmd = decode_command(binary_frame(binary_header(105, 0, 399, 77, 1, b"ok", ext), b"BODY"))
    assert cmd == RemotingCommand(code=105, opaque=77, flag=1, language=LanguageCode.JAVA,
                                  version=399, remark="ok",
                                  ext_fields={"topic": "tópico", "queueId": "3"}, body=b"BODY",
                                  serialize_type=SerializeType.ROCKETMQ)


def test_binary_unknown_language_byte_is_other() -> None:
    cmd = decode_command(binary_frame(binary_header(language=250)))
    assert cmd.language is LanguageCode.OTHER
