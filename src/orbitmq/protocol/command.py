"""RemotingCommand and its codec: the unit every RocketMQ frame carries.

Frame layout (big-endian)::

    [i32 total][i32 (serializeType << 24) | headerLength][header][body]

with ``total = 4 + headerLength + len(body)``. The header is either a JSON object (serialize type 0,
what every RocketMQ client sends by default and all the C++ client understands) or RocketMQ's
compact binary form (serialize type 1). A response is always encoded in the request's type.

Decoding is for bytes a peer sent: any malformed input raises ``RemoteProtocolError`` and nothing
else. Encoding is for commands we built: a command that cannot be encoded (a code that does not fit
the binary header's 16 bits, a header over 16 MiB) raises ``ClientError``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from typing import Any

import orjson

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol.codes import LanguageCode, SerializeType

__all__ = [
    "RemotingCommand",
    "RESPONSE_FLAG",
    "ONEWAY_FLAG",
    "HEADER_LENGTH_MAX",
    "encode_header",
    "encode",
    "decode_command",
    "body_length",
]

RESPONSE_FLAG = 0b01  # flag bit 0: this command answers a request with the same opaque
ONEWAY_FLAG = 0b10  # flag bit 1: the sender expects no answer
HEADER_LENGTH_MAX = 0xFFFFFF  # the header length shares its word with the serialize type byte

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_PREFIX = struct.Struct(">iI")
# Binary header, fixed part: code i16, language u8, version i16, opaque i32, flag i32, remark len i32.
_BIN_FIXED = struct.Struct(">hBhiii")
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
# Hot-path lookups: the language of every header, by wire name and by number.
_LANGUAGES_BY_NAME: dict[str, LanguageCode] = {m.name: m for m in LanguageCode}
_LANGUAGE_NAMES: dict[int, str] = {int(m): m.name for m in LanguageCode}


@dataclasses.dataclass(slots=True)
class RemotingCommand:
    """One request or response of the remoting protocol.

    ``ext_fields`` values are always strings on the wire (typed access goes through the header
    classes of ``orbitmq.protocol.headers``). ``body`` may be a memoryview so that pull responses and
    zero-copy decoding never duplicate message bytes.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    language: LanguageCode = LanguageCode.PYTHON
    version: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes | memoryview = b""
    serialize_type: SerializeType = SerializeType.JSON
    # Who sent it, as the server's access check found (security/guard.py); never on the wire.
    principal: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def is_response(self) -> bool:
        """True when flag bit 0 is set: the command answers the request with the same opaque."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """True when flag bit 1 is set: nobody waits for an answer."""
        return bool(self.flag & ONEWAY_FLAG)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes | memoryview = b"",
        *,
        oneway: bool = False,
    ) -> RemotingCommand:
        """A new request; the transport assigns ``opaque`` when it sends it."""
        return cls(
            code=int(code),
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: Mapping[str, str] | None = None,
        body: bytes | memoryview = b"",
    ) -> RemotingCommand:
        """The answer to this request: same opaque, response flag, same serialize type.

        The serialize type is echoed because clients decode answers in the type they asked in
        (the C++ client only understands JSON).
        """
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=RESPONSE_FLAG,
            version=self.version,
            remark=remark,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
            serialize_type=self.serialize_type,
        )


def body_length(body: bytes | bytearray | memoryview) -> int:
    """Length in bytes of a body, whatever buffer type holds it."""
    return body.nbytes if isinstance(body, memoryview) else len(body)


_body_length = body_length  # encode_header's keyword of the same name shadows the function


# ----------------------------------------------------------------------------------- encoding
def _ext_value(value: object) -> str:
    """Our own ext fields should be strings already; tolerate numbers and bools from callers."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    ext = cmd.ext_fields
    try:
        "".join(ext.values())  # the usual case, all str, checked in C; TypeError otherwise
    except TypeError:
        ext = {k: _ext_value(v) for k, v in ext.items()}
    language = _LANGUAGE_NAMES.get(cmd.language)
    header: dict[str, Any] = {
        "code": int(cmd.code),
        "language": language if language is not None else LanguageCode.parse(int(cmd.language)).name,
        "version": int(cmd.version),
        "opaque": int(cmd.opaque),
        "flag": int(cmd.flag),
        "extFields": ext,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    try:
        return orjson.dumps(header)
    except TypeError as exc:  # e.g. a non-string key, or an int beyond 64 bits
        raise ClientError(f"cannot encode command header as JSON: {exc}") from None


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    parts: list[bytes] = []
    try:
        remark = cmd.remark.encode() if cmd.remark else b""
        for key, value in cmd.ext_fields.items():
            raw_key, raw_value = key.encode(), _ext_value(value).encode()
            parts += (_I16.pack(len(raw_key)), raw_key, _I32.pack(len(raw_value)), raw_value)
        ext = b"".join(parts)
        fixed = _BIN_FIXED.pack(
            int(cmd.code), int(cmd.language), int(cmd.version), int(cmd.opaque), int(cmd.flag),
            len(remark),
        )
    except (struct.error, UnicodeEncodeError) as exc:
        raise ClientError(f"command does not fit the binary (ROCKETMQ) header: {exc}") from None
    return b"".join((fixed, remark, _I32.pack(len(ext)), ext))


def encode_header(cmd: RemotingCommand, *, body_length: int | None = None) -> bytes:
    """The frame prefix (total length, type and header length) followed by the header.

    ``encode_header(cmd) + bytes(cmd.body)`` is the whole frame; a transport can instead write the
    two pieces with ``writelines`` and never copy a large body. ``body_length`` overrides the
    length of ``cmd.body`` when the body travels as separate parts (pull responses: file slices).

    Raises:
        ClientError: the command cannot be encoded in its serialize type.
    """
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    elif cmd.serialize_type == SerializeType.JSON:
        header = _encode_json_header(cmd)
    else:
        raise ClientError(f"unknown serialize type {cmd.serialize_type!r}")
    header_length = len(header)
    if header_length > HEADER_LENGTH_MAX:
        raise ClientError(f"command header of {header_length} bytes exceeds {HEADER_LENGTH_MAX}")
    size = _body_length(cmd.body) if body_length is None else body_length
    total = 4 + header_length + size
    if total > _I32_MAX:
        raise ClientError(f"frame of {total} bytes does not fit a 32-bit length")
    return _PREFIX.pack(total, (int(cmd.serialize_type) << 24) | header_length) + header


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of ``cmd``, length prefix included."""
    return b"".join((encode_header(cmd), cmd.body))


# ----------------------------------------------------------------------------------- decoding
def _utf8(raw: bytes | memoryview, what: str) -> str:
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(f"{what} is not valid UTF-8: {exc}") from None


def _json_int(obj: dict[str, Any], key: str, default: int | None) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise RemoteProtocolError(f"command header lacks {key!r}")
        return default
    if type(value) is not int:
        raise RemoteProtocolError(f"command header field {key!r} must be an integer, got {value!r}")
    if not _I32_MIN <= value <= _I32_MAX:
        raise RemoteProtocolError(f"command header field {key!r} out of 32-bit range: {value}")
    return value


def _json_remark(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):  # lenient: a number where text was meant
        return _ext_value(value)
    raise RemoteProtocolError(f"command header field 'remark' must be a string, got {value!r}")


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"command header field 'extFields' must be an object, got {value!r}")
    fields: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, str):
            fields[key] = item
        elif isinstance(item, int | float):  # the C++ client sends queueId, sysFlag... as numbers
            fields[key] = _ext_value(item)
        elif item is not None:  # a null value means "absent", like in Java
            raise RemoteProtocolError(f"extFields[{key!r}] must be a string or number, got {item!r}")
    return fields


def _json_header_fast(obj: dict[str, Any]) -> RemotingCommand | None:
    """The header every client sends in practice, decoded without the lenient helpers: integer
    fields as JSON integers in 32-bit range, a known language name, remark absent or text, and
    extFields an object of strings. None when anything differs; the caller then takes the lenient
    path, which gives the same command for this shape (one place defines what is accepted)."""
    code, opaque = obj.get("code"), obj.get("opaque", 0)
    flag, version = obj.get("flag", 0), obj.get("version", 0)
    language, remark, ext = obj.get("language"), obj.get("remark"), obj.get("extFields")
    if (type(code) is not int or type(opaque) is not int or type(flag) is not int
            or type(version) is not int or type(language) is not str or type(ext) is not dict
            or not (remark is None or type(remark) is str)):
        return None
    if not (_I32_MIN <= code <= _I32_MAX and _I32_MIN <= opaque <= _I32_MAX
            and _I32_MIN <= flag <= _I32_MAX and _I32_MIN <= version <= _I32_MAX):
        return None
    member = _LANGUAGES_BY_NAME.get(language)
    if member is None:
        return None
    try:
        "".join(ext.values())  # every value a str (checked in C); a number or null raises
    except TypeError:
        return None
    return RemotingCommand(code, opaque, flag, member, version, remark, ext, b"", SerializeType.JSON)


def _decode_json_header(header: memoryview) -> RemotingCommand:
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise RemoteProtocolError(f"command header is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError(f"command header must be a JSON object, got {type(obj).__name__}")
    cmd = _json_header_fast(obj)
    return cmd if cmd is not None else _json_header_lenient(obj)


def _json_header_lenient(obj: dict[str, Any]) -> RemotingCommand:
    return RemotingCommand(
        code=_json_int(obj, "code", None),
        opaque=_json_int(obj, "opaque", 0),
        flag=_json_int(obj, "flag", 0),
        language=LanguageCode.parse(obj.get("language")),
        version=_json_int(obj, "version", 0),
        remark=_json_remark(obj.get("remark")),
        ext_fields=_json_ext_fields(obj.get("extFields")),
        serialize_type=SerializeType.JSON,
    )


def _decode_ext_map(header: memoryview, pos: int, end: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    while pos < end:
        if end - pos < 2:
            raise RemoteProtocolError("binary extFields truncated in a key length")
        (key_length,) = _I16.unpack_from(header, pos)
        pos += 2
        if key_length < 0 or end - pos < key_length + 4:
            raise RemoteProtocolError(f"binary extFields key of bad length {key_length}")
        key = _utf8(header[pos : pos + key_length], "extFields key")
        pos += key_length
        (value_length,) = _I32.unpack_from(header, pos)
        pos += 4
        if value_length < 0 or end - pos < value_length:
            raise RemoteProtocolError(f"binary extFields value of bad length {value_length}")
        fields[key] = _utf8(header[pos : pos + value_length], "extFields value")
        pos += value_length
    return fields


def _decode_binary_header(header: memoryview) -> RemotingCommand:
    size = len(header)
    if size < _BIN_FIXED.size + 4:
        raise RemoteProtocolError(f"binary command header truncated: {size} bytes")
    code, language, version, opaque, flag, remark_length = _BIN_FIXED.unpack_from(header, 0)
    pos = _BIN_FIXED.size
    if remark_length < 0 or size - pos < remark_length + 4:
        raise RemoteProtocolError(f"binary command header: bad remark length {remark_length}")
    remark = _utf8(header[pos : pos + remark_length], "remark") if remark_length else None
    pos += remark_length
    (ext_length,) = _I32.unpack_from(header, pos)
    pos += 4
    if ext_length != size - pos:
        raise RemoteProtocolError(
            f"binary command header: extFields length {ext_length}, {size - pos} bytes left"
        )
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=LanguageCode.parse(language),
        version=version,
        remark=remark,
        ext_fields=_decode_ext_map(header, pos, size),
        serialize_type=SerializeType.ROCKETMQ,
    )


def _decode_view(view: memoryview, *, copy_body: bool) -> RemotingCommand:
    """Decodes a frame without its total length; with copy_body the body is bytes of its own."""
    size = len(view)
    if size < 4:
        raise RemoteProtocolError(f"frame of {size} bytes is shorter than its header length field")
    (mixed,) = _U32.unpack_from(view, 0)
    serialize_type, header_length = mixed >> 24, mixed & HEADER_LENGTH_MAX
    if header_length > size - 4:
        raise RemoteProtocolError(
            f"header length {header_length} exceeds the {size - 4} bytes left in the frame"
        )
    header = view[4 : 4 + header_length]
    if serialize_type == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif serialize_type == SerializeType.ROCKETMQ:
        cmd = _decode_binary_header(header)
    else:
        raise RemoteProtocolError(f"unknown serialize type {serialize_type}")
    body_start = 4 + header_length
    if body_start < size:
        cmd.body = bytes(view[body_start:]) if copy_body else view[body_start:]
    return cmd


def decode_command(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decodes one frame given WITHOUT its leading 4-byte total length.

    A memoryview frame gives a memoryview body (zero copy); bytes give a bytes body.

    Raises:
        RemoteProtocolError: the frame is malformed in any way.
    """
    view = memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        try:
            view = view.cast("B")
        except TypeError as exc:
            raise RemoteProtocolError(f"frame buffer cannot be read as bytes: {exc}") from None
    return _decode_view(view, copy_body=not isinstance(frame, memoryview))
