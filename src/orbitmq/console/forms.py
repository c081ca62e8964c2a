"""Reading what a form or a query string holds: every value checked, a refusal naming the field.

A refused value raises :class:`FormError` (a ClientError): the page answers 400 with the reason.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from orbitmq.errors import ClientError

__all__ = ["FormError", "text", "secret", "integer", "flag", "utc_ms", "choice", "choices"]

TEXT_MAX_CHARS = 1024  # no field of the console's forms needs more


class FormError(ClientError):
    """A form field's value is refused; the message names the field."""


def text(data: Mapping[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = data.get(name)
    value = value.strip() if isinstance(value, str) else ""
    if not value:
        if required:
            raise FormError(f"{name} is required")
        return default
    if len(value) > TEXT_MAX_CHARS:
        raise FormError(f"{name} has {len(value)} characters, more than {TEXT_MAX_CHARS}")
    return value


def secret(data: Mapping[str, Any], name: str, *, required: bool = True) -> str:
    """A password as typed (not stripped: its spaces are part of it); a refusal never shows it."""
    value = data.get(name)
    value = value if isinstance(value, str) else ""
    if not value and required:
        raise FormError(f"{name} is required")
    if len(value) > TEXT_MAX_CHARS:
        raise FormError(f"{name} is longer than {TEXT_MAX_CHARS} characters")
    return value


def choices(values: list[Any], name: str, allowed: tuple[str, ...]) -> list[str]:
    """The ticked boxes of a group (``values``: every value the form sent under ``name``)."""
    out = []
    for value in values:
        if not isinstance(value, str) or value not in allowed:
            raise FormError(f"{name}: {str(value)[:64]!r} is not one of {', '.join(allowed)}")
        out.append(value)
    return out


def integer(data: Mapping[str, Any], name: str, low: int, high: int, *,
            default: int | None = None) -> int:
    raw = text(data, name, required=default is None)
    if not raw:
        assert default is not None
        return default
    try:
        value = int(raw)
    except ValueError:
        raise FormError(f"{name} = {raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise FormError(f"{name} = {value} is out of range {low}..{high}")
    return value


def flag(data: Mapping[str, Any], name: str) -> bool:
    """A checkbox: present (any value but "" or "0") or not."""
    value = data.get(name)
    return isinstance(value, str) and value not in ("", "0", "false")


def choice(data: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = text(data, name, required=False, default=default)
    if value not in allowed:
        raise FormError(f"{name} = {value!r} is not one of {', '.join(allowed)}")
    return value


def utc_ms(data: Mapping[str, Any], name: str, *, required: bool = True,
           default: int | None = None) -> int | None:
    """A time typed as UTC (``2026-11-01T12:00``, seconds optional, as a datetime-local input
    sends it; a trailing Z or offset is honoured) or as epoch milliseconds."""
    raw = text(data, name, required=required and default is None)
    if not raw:
        return default
    if raw.isdigit():
        return int(raw)
    try:
        moment = datetime.datetime.fromisoformat(raw.replace(" ", "T"))
    except ValueError:
        raise FormError(f"{name} = {raw!r} is not a time such as 2026-11-01T12:00 (UTC) "
                        "or epoch milliseconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)
