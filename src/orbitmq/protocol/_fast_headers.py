"""Fast decoders for the two headers on the hot path: SEND_MESSAGE_V2 and PULL_MESSAGE.

The generic lenient decoder of ``headers.py`` costs about 7 us per header (a spec walk with a
parser call per field); a broker answering tens of thousands of sends a second pays that on every
one. These functions handle the shape real clients send (every value a str, numbers in decimal)
and return None for anything else, so that the caller falls back to the generic decoder. That
keeps one definition of what is accepted and what error is raised: for every input where these
functions return a header, the generic decoder returns an equal one (tests/unit/protocol/test_fast_headers.py
checks that on generated inputs and on every range boundary). The ranges of headers.py are checked
here with plain comparisons; a value out of range declines, and the generic decoder then refuses it
naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from orbitmq.protocol._lenient import (
    FALSE_WORDS,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    PULL_SYS_FLAG_MASK,
    SEND_SYS_FLAG_MASK,
    TRUE_WORDS,
)

__all__ = ["send_v2_fast", "pull_fast"]

H = TypeVar("H")

_SEND_SYS_FLAG_OTHER_BITS = ~SEND_SYS_FLAG_MASK
_PULL_SYS_FLAG_OTHER_BITS = ~PULL_SYS_FLAG_MASK


def _opt_int(raw: str | None, default: int | None, low: int, high: int) -> int | None:
    """An optional number in ``low..high``: absent or blank is the default; ValueError when it
    does not parse or is out of range."""
    if raw is None or not raw.strip():
        return default
    value = int(raw)
    if not low <= value <= high:
        raise ValueError(raw)
    return value


def _opt_bool(raw: str | None) -> bool:
    """An optional flag (default False): ValueError for a word that is not a boolean."""
    if raw is None:
        return False
    text = raw.strip().lower()
    if not text or text in FALSE_WORDS:
        return False
    if text in TRUE_WORDS:
        return True
    raise ValueError(raw)


def send_v2_fast(cls: Callable[..., H], fields: dict[str, Any]) -> H | None:
    """SendMessageRequestHeader from the a..n names, or None (use the generic decoder)."""
    try:
        "".join(fields.values())  # every value a str (one C loop); TypeError otherwise
        get = fields.get
        queue_nums, queue_id, sys_flag = int(fields["d"]), int(fields["e"]), int(fields["f"])
        born, flag = int(fields["g"]), int(fields["h"])
        if (not 0 <= queue_nums <= I32_MAX or not I32_MIN <= queue_id <= I32_MAX
                or sys_flag & _SEND_SYS_FLAG_OTHER_BITS or not 0 <= born <= I64_MAX
                or not I32_MIN <= flag <= I32_MAX):
            return None
        return cls(
            fields["a"], fields["b"], fields["c"],  # producer group, topic, default topic
            queue_nums, queue_id, sys_flag, born, flag,
            get("i") or None,  # properties: "" is absent
            _opt_int(get("j"), 0, 0, I32_MAX),  # reconsume times
            _opt_bool(get("k")),  # unit mode
            _opt_bool(get("m")),  # batch
            _opt_int(get("l"), None, -1, I32_MAX),  # max reconsume times
            get("n") or None,  # broker name
        )
    except (TypeError, KeyError, ValueError):
        return None


def pull_fast(cls: Callable[..., H], fields: dict[str, Any]) -> H | None:
    """PullMessageRequestHeader from its camelCase names, or None (use the generic decoder)."""
    try:
        "".join(fields.values())
        get = fields.get
        queue_id, offset = int(fields["queueId"]), int(fields["queueOffset"])
        max_nums, sys_flag = int(fields["maxMsgNums"]), int(fields["sysFlag"])
        commit, suspend = int(fields["commitOffset"]), int(fields["suspendTimeoutMillis"])
        if (not 0 <= queue_id <= I32_MAX or not I64_MIN <= offset <= I64_MAX
                or not 1 <= max_nums <= I32_MAX or sys_flag & _PULL_SYS_FLAG_OTHER_BITS
                or not -1 <= commit <= I64_MAX or not 0 <= suspend <= I64_MAX):
            return None
        return cls(
            fields["consumerGroup"], fields["topic"],
            queue_id, offset, max_nums, sys_flag, commit, suspend,
            get("subscription") or None,
            _opt_int(get("subVersion"), 0, I64_MIN, I64_MAX),
            get("expressionType") or None,
            _opt_int(get("maxMsgBytes"), None, 1, I32_MAX),
        )
    except (TypeError, KeyError, ValueError):
        return None
