"""What the store asks of a subscription filter while it reads a queue (the broker's filters,
tags and SQL92, implement it)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["MessageFilter"]


class MessageFilter(Protocol):
    """What ``get_message`` asks of a subscription filter.

    ``tags_in_c``: a filter that is only a set of tags gives it as (their tags codes, their
    UTF-8 bytes), and its reads are walked in C as an unfiltered one is (queue_reader.py);
    None for any other (SQL92: the properties are evaluated in Python)."""

    @property
    def tags_in_c(self) -> tuple[tuple[int, ...], tuple[bytes, ...]] | None: ...

    def match_tags_code(self, code: int) -> bool: ...

    def match_message(self, raw: memoryview | bytes) -> bool: ...
