"""The mechanism behind ``headers.py``: field specs derived from a header dataclass, and the
lenient decoding and the encoding of extFields by those specs (see headers.py for the rules).

A field's type may carry its allowed values as ``Annotated`` metadata (``I32``, ``U64``,
``bits(...)``, ``OneOf(...)`` from ``_lenient``): decoding checks them, so a header object only ever
holds values in range.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol._lenient import IntRange, OneOf, camel, parse_bool, parse_int, parse_str

__all__ = ["_spec", "_decode", "_encode", "unwrap_hint"]

Check = IntRange | OneOf


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str  # Python attribute
    wire: str  # default wire name
    kind: type  # int, str or bool
    required: bool
    empty_is_absent: bool  # "" means "not given": every non-str field, and optional str fields
    check: Check | None  # the allowed values, from Annotated metadata


def unwrap_hint(hint: object) -> tuple[object, Check | None]:
    """(the type without ``| None`` and ``Annotated``, its IntRange/OneOf metadata or None)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            hint = args[0]
    if typing.get_origin(hint) is typing.Annotated:
        base, *extras = typing.get_args(hint)
        check = next((e for e in extras if isinstance(e, IntRange | OneOf)), None)
        return base, check
    return hint, None


def _kind_of(owner: type, name: str, hint: object) -> tuple[type, Check | None]:
    base, check = unwrap_hint(hint)
    if base not in (int, str, bool):
        raise TypeError(f"{owner.__name__}.{name}: header fields are int, str or bool, not {hint}")
    if isinstance(check, IntRange) and base is not int or isinstance(check, OneOf) and base is not str:
        raise TypeError(f"{owner.__name__}.{name}: {check!r} does not apply to {base}")
    if base is int and check is None:
        raise TypeError(f"{owner.__name__}.{name}: an integer field needs its range (I32, U64...)")
    return typing.cast(type, base), check


# Per-class field specs, derived once from the class definition and never changed afterwards.
_SPECS: dict[type, tuple[_FieldSpec, ...]] = {}


def _spec(cls: type) -> tuple[_FieldSpec, ...]:
    cached = _SPECS.get(cls)
    if cached is None:
        cached = _SPECS[cls] = _derive_spec(cls)
    return cached


def _derive_spec(cls: type) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        kind, check = _kind_of(cls, f.name, hints[f.name])
        empty_is_absent = kind is not str or (not required and f.default is None)
        specs.append(_FieldSpec(f.name, f.metadata.get("wire", camel(f.name)), kind, required,
                                empty_is_absent, check))
    return tuple(specs)


_PARSERS = {int: parse_int, bool: parse_bool, str: parse_str}


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(int(typing.cast(int, value)))


# Per (class, naming): each field's attribute, wire name, parser, whether it is a str field,
# required, empty-is-absent, error prefix and range check; the prefix f-string per field and call
# was a third of the decoding time.
_PLANS: dict[tuple[type, int], tuple[tuple[Any, ...], ...]] = {}


def _where(cls: type, spec: _FieldSpec, wire: str) -> str:
    """How a refusal names a field: ``Class.javaName``, plus the short name it came under."""
    where = f"{cls.__name__}.{spec.wire}"
    return where if wire == spec.wire else f"{where} ({wire!r})"


def _plan(cls: type, names: Mapping[str, str] | None) -> tuple[tuple[Any, ...], ...]:
    key = (cls, id(names))  # names: None or a class constant such as V2_NAMES, never freed
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = tuple(
            (s.name, wire, _PARSERS[s.kind], s.kind is str, s.required, s.empty_is_absent,
             _where(cls, s, wire), s.check)
            for s in _spec(cls) for wire in (names[s.name] if names is not None else s.wire,))
    return plan


def _decode(cls: type[Any], fields: Mapping[str, object], names: Mapping[str, str] | None) -> Any:
    if not isinstance(fields, Mapping):
        raise RemoteProtocolError(f"{cls.__name__}: extFields must be a mapping")
    kwargs: dict[str, Any] = {}
    get = fields.get
    for name, wire_name, parse, is_str, required, empty_is_absent, where, check in _plan(cls, names):
        raw = get(wire_name)
        if raw is None or (empty_is_absent and isinstance(raw, str)
                           and not (raw if is_str else raw.strip())):
            if required:
                raise RemoteProtocolError(f"{cls.__name__}: missing required field {wire_name!r}")
            continue
        value = raw if is_str and type(raw) is str else parse(raw, where)
        kwargs[name] = value if check is None else check.check(value, where)
    return cls(**kwargs)


def _encode(header: object, names: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in _spec(type(header)):
        value = getattr(header, spec.name)
        if value is not None:
            out[names[spec.name] if names is not None else spec.wire] = _format(value)
    return out
