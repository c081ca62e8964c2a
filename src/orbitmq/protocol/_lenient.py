"""Lenient value parsing shared by headers and bodies.

Real clients disagree on types: the C++ client sends numbers where Java sends strings, booleans as
"1"/"0", enums as ordinals. These helpers accept every spelling we have seen and raise
RemoteProtocolError, naming where the value came from, for anything else.
"""

from __future__ import annotations

from orbitmq.errors import RemoteProtocolError

TRUE_WORDS = _TRUE = frozenset({"true", "1", "yes", "y", "on"})
FALSE_WORDS = _FALSE = frozenset({"false", "0", "no", "n", "off"})
_SHOWN_MAX = 80  # characters of a bad value quoted in an error message


def camel(name: str) -> str:
    """snake_case Python name -> Java's camelCase field name."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def bad_value(where: str, expected: str, value: object) -> RemoteProtocolError:
    """The error for a value of the wrong type, with the value shortened for logs."""
    shown = repr(value)
    if len(shown) > _SHOWN_MAX:
        shown = shown[: _SHOWN_MAX - 3] + "..."
    return RemoteProtocolError(f"{where}: expected {expected}, got {shown}")


def parse_int(raw: object, where: str) -> int:
    """An int from an int, an integral float, a bool or a decimal string."""
    if type(raw) is int:
        return raw
    if isinstance(raw, str):
        try:
            return int(raw.strip())
        except ValueError:
            pass
    elif isinstance(raw, bool) or (isinstance(raw, float) and raw.is_integer()):
        return int(raw)
    raise bad_value(where, "an integer", raw)


def parse_bool(raw: object, where: str) -> bool:
    """A bool from a bool, 0/1, or "true"/"false"/"1"/"0" (any case, also yes/no, on/off)."""
    if isinstance(raw, bool):
        return raw
    if type(raw) is int and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise bad_value(where, "a boolean", raw)


def parse_str(raw: object, where: str) -> str:
    """A str; numbers and bools are turned into the text Java would have sent."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float):
        return str(raw)
    raise bad_value(where, "a string", raw)
