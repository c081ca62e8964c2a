"""Message properties: the ``name\\x01value\\x02...`` text of a send header, a batch entry and a
stored message, and its ONE rule.

A properties blob is well formed when, checked in this order:

1. it is valid UTF-8 (strict, as Python's decoder: no surrogates, no overlong forms);
2. it holds no NUL character (recovery reads NULs as the zeroed sectors of a torn write);
3. cut at every ``\\x02`` (after dropping one final ``\\x02``: writers end every item with it, and
   a missing final separator is accepted, as RocketMQ's readers do), every item, in order:
   has a ``\\x01``, has a non-empty name before it, has no second ``\\x01`` in its value, and
   names a property no earlier item named.

The empty blob holds no properties. Anything else is malformed, wherever it is met: the send
path refuses it with MESSAGE_ILLEGAL (the remark is the reason below), recovery treats the message
as torn and cuts the log there, dispatch stops at it, the filters never match it, and decoding
raises ``RemoteProtocolError``. RocketMQ's Java reader drops an item without a separator
silently; OrbitMQ refuses it instead, since its writers (Java, C++, ours) never produce one.

A well-formed blob is canonical: encoding its parsed dict gives it back byte for byte (plus the
final separator when it lacked one), which is what lets the store copy wire properties as they
came. The C twin of this rule is ``props_check`` in ``_native/stored_rules.c``; both give the
same reasons.
"""

from __future__ import annotations

from collections.abc import Mapping

from orbitmq.errors import ClientError, RemoteProtocolError

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "PROPERTIES_SIZE_MAX",
    "encode_properties",
    "parse_properties",
    "properties_problem",
]

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTIES_SIZE_MAX = 32767  # bytes: the i16 length field of a stored message and a batch entry

# The reasons, word for word as the C twin formats them (``%zd`` for the 1-based item number).
NOT_UTF8 = "message properties are not UTF-8"
HAS_NUL = "message properties contain a NUL character"
_NO_SEPARATOR = "message property {} has no name/value separator"
_EMPTY_NAME = "message property {} has an empty name"
_SECOND_SEPARATOR = "message property {} has a second name/value separator"
_REPEATED = "message property {} repeats an earlier name"


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """``name\\x01value\\x02`` for every pair, final separator included (as RocketMQ writes).

    Refuses what the rule above would refuse on reading, so that whatever OrbitMQ writes reads
    back.

    Raises:
        ClientError: an empty name, a name or value holding ``\\x00``, ``\\x01`` or ``\\x02``,
            or a character UTF-8 cannot encode (a lone surrogate).
    """
    if not properties:
        return b""
    parts = []
    for name, value in properties.items():
        if not name:
            raise ClientError("a message property has an empty name")
        for text in (name, value):
            if "\x00" in text or "\x01" in text or "\x02" in text:
                raise ClientError(f"message property {name!r} holds a reserved character "
                                  "(\\x00, \\x01 or \\x02)")
        parts.append(f"{name}\x01{value}\x02")
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a JSON "\ud800" escape
        raise ClientError(f"message properties are not encodable as UTF-8: {e}") from None


def properties_problem(raw: bytes | bytearray | memoryview | str | None) -> str | None:
    """Why ``raw`` breaks the rule, or None when it is well formed (see the module docstring)."""
    try:
        parse_properties(raw)
    except RemoteProtocolError as e:
        return str(e)
    return None


def parse_properties(raw: bytes | bytearray | memoryview | str | None) -> dict[str, str]:
    """The properties of a blob (bytes as stored, or the text of a send header), by the rule.

    Raises:
        RemoteProtocolError: the blob is malformed; the message names the first problem.
    """
    if not raw:
        return {}
    if isinstance(raw, str):
        try:
            raw.encode("utf-8")  # a lone surrogate (a JSON "\ud800" escape) is not UTF-8
        except UnicodeEncodeError:
            raise RemoteProtocolError(NOT_UTF8) from None
        text = raw
    else:
        try:
            text = str(raw, "utf-8")
        except UnicodeDecodeError:
            raise RemoteProtocolError(NOT_UTF8) from None
    if "\x00" in text:
        raise RemoteProtocolError(HAS_NUL)
    items = text.split("\x02")
    if not items[-1]:
        items.pop()  # the final separator
    props: dict[str, str] = {}
    for number, item in enumerate(items, 1):
        name, sep, value = item.partition("\x01")
        if not sep:
            raise RemoteProtocolError(_NO_SEPARATOR.format(number))
        if not name:
            raise RemoteProtocolError(_EMPTY_NAME.format(number))
        if "\x01" in value:
            raise RemoteProtocolError(_SECOND_SEPARATOR.format(number))
        if name in props:
            raise RemoteProtocolError(_REPEATED.format(number))
        props[name] = value
    return props
