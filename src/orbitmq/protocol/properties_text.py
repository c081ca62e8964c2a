"""Java properties text (``java.util.Properties``), as RocketMQ's config requests carry it.

GET_BROKER_CONFIG answers and UPDATE_BROKER_CONFIG sends a broker's settings in this format:
one ``key=value`` per line. :func:`parse_properties_text` reads what Java writes and accepts
(``=``, ``:`` or blanks between key and value, ``#``/``!`` comments, backslash escapes including
``\\uXXXX``, lines continued with a trailing backslash); :func:`format_properties_text` writes
``key=value`` lines, escaping what would not read back.

Bounded: PROPERTIES_TEXT_MAX_BYTES of text and PROPERTIES_MAX entries; RemoteProtocolError
(naming the line) for text beyond them or that is not UTF-8 / ISO-8859-1.
"""

from __future__ import annotations

from collections.abc import Mapping

from orbitmq.errors import RemoteProtocolError

__all__ = ["parse_properties_text", "format_properties_text", "PROPERTIES_TEXT_MAX_BYTES",
           "PROPERTIES_MAX"]

PROPERTIES_TEXT_MAX_BYTES = 256 * 1024
PROPERTIES_MAX = 1024
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=: \t\f"


def _decode(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    raw = bytes(data)
    if len(raw) > PROPERTIES_TEXT_MAX_BYTES:
        raise RemoteProtocolError(f"properties text of {len(raw)} bytes, at most "
                                  f"{PROPERTIES_TEXT_MAX_BYTES}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")  # what Properties.load reads


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of each logical line: comments and blanks dropped, continuations
    (an odd number of trailing backslashes) joined with the next line's leading blanks cut."""
    out: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        piece = line.lstrip(" \t\f")
        if pending is None:
            if not piece or piece[0] in "#!":
                continue
            start = number
        trailing = len(piece) - len(piece.rstrip("\\"))
        if trailing % 2:
            pending = (pending or "") + piece[:-1]
            continue
        out.append((start, (pending or "") + piece))
        pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2:i + 6]
            if len(digits) != 4 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise RemoteProtocolError(f"{where}: malformed \\u escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split(line: str) -> tuple[str, str]:
    """Key and raw value of one logical line (the key ends at an unescaped separator)."""
    i = 0
    while i < len(line) and line[i] not in _SEPARATORS:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def parse_properties_text(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """The entries of a properties text, in order (a later duplicate key wins, as in Java).

    Raises:
        RemoteProtocolError: too long, too many entries, an empty key or a bad escape.
    """
    entries: dict[str, str] = {}
    for number, line in _logical_lines(_decode(data)):
        raw_key, raw_value = _split(line)
        where = f"properties line {number}"
        key = _unescape(raw_key, where)
        if not key:
            raise RemoteProtocolError(f"{where}: no key")
        entries[key] = _unescape(raw_value, where)
        if len(entries) > PROPERTIES_MAX:
            raise RemoteProtocolError(f"more than {PROPERTIES_MAX} properties")
    return entries


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, c in enumerate(text):
        if c == "\\":
            out.append("\\\\")
        elif c in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[c])
        elif (key and c in "=: #!") or (not key and i == 0 and c == " ") or \
                (key and i == 0 and c in "#!"):
            out.append("\\" + c)
        else:
            out.append(c)
    return "".join(out)


def format_properties_text(entries: Mapping[str, str]) -> bytes:
    """``key=value`` lines (UTF-8) that :func:`parse_properties_text` and Java read back."""
    return "".join(f"{_escape(k, key=True)}={_escape(v, key=False)}\n"
                   for k, v in entries.items()).encode()
