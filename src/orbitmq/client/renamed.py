"""Options renamed to carry their unit, and their old names kept as deprecated aliases.

A timing option names its unit (``rebalance_interval_ms``). An option that was named without
one (``rebalance_interval``, in seconds) still works, as a constructor keyword and as an
attribute, with a DeprecationWarning and its value converted (seconds -> milliseconds).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["Renamed", "renamed_options", "deprecated_aliases"]

C = TypeVar("C", bound=type)


@dataclasses.dataclass(frozen=True, slots=True)
class Renamed:
    """``old`` is now ``new``; a value given under ``old`` is multiplied by ``scale`` (1000:
    seconds to milliseconds) and rounded to an int when ``scale`` is not 1."""

    old: str
    new: str
    scale: int = 1000

    def to_new(self, value: Any) -> Any:
        if value is None or self.scale == 1:
            return value
        return round(value * self.scale)

    def to_old(self, value: Any) -> Any:
        if value is None or self.scale == 1:
            return value
        return value / self.scale

    def warn(self, owner: str, stacklevel: int) -> None:
        unit = " (in milliseconds)" if self.scale == 1000 else ""
        warnings.warn(f"{owner}: {self.old!r} is deprecated; use {self.new!r}{unit}",
                      DeprecationWarning, stacklevel=stacklevel + 1)


def renamed_options(options: Mapping[str, Any], renames: Mapping[str, Renamed], owner: str, *,
                    stacklevel: int = 2) -> dict[str, Any]:
    """``options`` with every deprecated name replaced by its new one, its value converted, and a
    DeprecationWarning for each. Giving both names of one option is refused (TypeError)."""
    out = dict(options)
    for old, rename in renames.items():
        if old not in out:
            continue
        if rename.new in out:
            raise TypeError(f"{owner}: give {rename.new!r} or its deprecated name {old!r}, "
                            "not both")
        rename.warn(owner, stacklevel + 1)
        out[rename.new] = rename.to_new(out.pop(old))
    return out


def deprecated_aliases(*renames: Renamed) -> Callable[[C], C]:
    """Class decorator (after ``@dataclass``): the constructor also takes each old name, and
    each old name reads as an attribute, both with a DeprecationWarning."""
    table = {r.old: r for r in renames}

    def decorate(cls: C) -> C:
        # getattr and setattr: mypy refuses __init__ read or assigned through a type variable.
        init: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009

        @functools.wraps(init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **renamed_options(kwargs, table, cls.__name__, stacklevel=2))

        setattr(cls, "__init__", __init__)  # noqa: B010
        for rename in renames:
            setattr(cls, rename.old, _alias(rename, cls.__name__))
        return cls

    return decorate


def _alias(rename: Renamed, owner: str) -> property:
    def get(self: Any) -> Any:
        rename.warn(owner, 2)
        return rename.to_old(getattr(self, rename.new))

    get.__doc__ = f"Deprecated: ``{rename.new}``" + (" / 1000" if rename.scale == 1000 else "")
    return property(get)
