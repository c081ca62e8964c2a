"""What a config field is: :func:`setting` (its default, one-line doc and what it accepts), the
check every config runs when it is built (:func:`validate`), and the units the bounds use."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from orbitmq.errors import ClientError

__all__ = [
    "ConfigError", "Range", "setting", "field_doc", "field_allowed", "validate", "QUEUE_NUMS_MAX",
    "GiB", "MiB", "DELAY_LEVELS_MAX", "PORT_MAX", "I32_MAX", "HOUR_MS", "DAY_MS",
    "CONSOLE_TOKEN_MIN_CHARS", "CONSUME_QUEUE_ENTRY_SIZE",
]


GiB = 1024 * 1024 * 1024
MiB = 1024 * 1024
DELAY_LEVELS_MAX = 64  # a bound on the schedule topic's queues (RocketMQ ships 18 levels)
# Not a RocketMQ limit, but a bound: stats and registration walk every queue of a topic.
QUEUE_NUMS_MAX = 1024
PORT_MAX = 65535
I32_MAX = 2**31 - 1
HOUR_MS = 3_600_000
CONSOLE_TOKEN_MIN_CHARS = 16  # a guessable console secret is no protection
DAY_MS = 24 * HOUR_MS
CONSUME_QUEUE_ENTRY_SIZE = 20  # bytes of one consume queue entry (files are whole entries)


class ConfigError(ClientError, ValueError):
    """A config value outside what its field accepts; the message is one line naming the
    field, the value and the allowed values. ``field`` is the field's name."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class Range:
    """Numbers ``low..high`` (inclusive; ``low_open`` excludes ``low``, for ratios in (0, 1])."""

    low: float
    high: float
    low_open: bool = False

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high

    def describe(self) -> str:
        if self.low_open:
            return f"({self.low:g}, {self.high:g}]"
        return f"{self.low:g}..{self.high:g}" if isinstance(self.low, float) \
            else f"{self.low}..{self.high}"


def setting(default: Any, doc: str, low: float | None = None, high: float | None = None, *,
            low_open: bool = False, check: Callable[[Any], str | None] | None = None,
            allowed: str | None = None, secret: bool = False) -> Any:
    """A config field: its default, its one-line documentation and what it accepts (a range
    ``low..high`` for numbers, or ``check`` returning why a value is refused, with ``allowed``
    saying in words what it accepts). A ``secret`` field's value is never shown in a refusal."""
    bounds = Range(low, high, low_open) if low is not None and high is not None else None
    metadata = {"doc": doc, "range": bounds, "check": check, "secret": secret,
                "allowed": allowed if allowed is not None else (bounds.describe() if bounds else "")}
    if dataclasses.is_dataclass(default):
        return dataclasses.field(default_factory=lambda: default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def field_doc(f: dataclasses.Field[Any]) -> str:
    """The field's one-line documentation ("" for a field declared without :func:`setting`)."""
    return str(f.metadata.get("doc", ""))


def field_allowed(f: dataclasses.Field[Any]) -> str:
    """What the field accepts, in words ("" when anything of its type goes)."""
    return str(f.metadata.get("allowed", ""))


def validate(cfg: Any) -> None:
    """Check every field of ``cfg`` against its setting; ConfigError for the first refused."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        bounds: Range | None = f.metadata.get("range")
        check: Callable[[Any], str | None] | None = f.metadata.get("check")
        if bounds is not None and (isinstance(value, bool) or not bounds.contains(value)):
            raise ConfigError(f.name, f"{f.name} = {value!r} is out of range; allowed: "
                                      f"{field_allowed(f)}")
        reason = check(value) if check is not None else None
        if reason is not None:
            shown = "(hidden)" if f.metadata.get("secret") else repr(value)
            raise ConfigError(f.name, f"{f.name} = {shown} is refused ({reason}); allowed: "
                                      f"{field_allowed(f)}")
