"""What the store asks of a subscription filter while it reads a queue (the broker's filters,
tags and SQL92, implement it)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["MessageFilter"]


class MessageFilter(Protocol):
    """What ``get_message`` asks of a subscription filter."""

    def match_tags_code(self, code: int) -> bool: ...

    def match_message(self, raw: memoryview | bytes) -> bool: ...
