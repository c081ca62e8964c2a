"""Fast decoders for the two headers on the hot path: SEND_MESSAGE_V2 and PULL_MESSAGE.

The generic lenient decoder of ``headers.py`` costs about 7 us per header (a spec walk with a
parser call per field); a broker answering tens of thousands of sends a second pays that on every
one. These functions handle the shape real clients send (every value a str, numbers in decimal)
and return None for anything else, so that the caller falls back to the generic decoder. That
keeps one definition of what is accepted and what error is raised: for every input where these
functions return a header, the generic decoder returns an equal one (tests/unit/test_fast_headers.py
checks that on generated inputs).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from orbitmq.protocol._lenient import FALSE_WORDS, TRUE_WORDS

__all__ = ["send_v2_fast", "pull_fast"]

H = TypeVar("H")


def _opt_int(raw: str | None, default: int | None) -> int | None:
    """An optional number: absent or blank is the default; ValueError when it does not parse."""
    if raw is None or not raw.strip():
        return default
    return int(raw)


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
        return cls(
            fields["a"], fields["b"], fields["c"],  # producer group, topic, default topic
            int(fields["d"]), int(fields["e"]), int(fields["f"]),  # queue nums, queue id, sysFlag
            int(fields["g"]), int(fields["h"]),  # born timestamp, flag
            get("i") or None,  # properties: "" is absent
            _opt_int(get("j"), 0),  # reconsume times
            _opt_bool(get("k")),  # unit mode
            _opt_bool(get("m")),  # batch
            _opt_int(get("l"), None),  # max reconsume times
            get("n") or None,  # broker name
        )
    except (TypeError, KeyError, ValueError):
        return None


def pull_fast(cls: Callable[..., H], fields: dict[str, Any]) -> H | None:
    """PullMessageRequestHeader from its camelCase names, or None (use the generic decoder)."""
    try:
        "".join(fields.values())
        get = fields.get
        return cls(
            fields["consumerGroup"], fields["topic"],
            int(fields["queueId"]), int(fields["queueOffset"]), int(fields["maxMsgNums"]),
            int(fields["sysFlag"]), int(fields["commitOffset"]),
            int(fields["suspendTimeoutMillis"]),
            get("subscription") or None,
            _opt_int(get("subVersion"), 0),
            get("expressionType") or None,
            _opt_int(get("maxMsgBytes"), None),
        )
    except (TypeError, KeyError, ValueError):
        return None
