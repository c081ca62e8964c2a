"""The mechanism behind ``headers.py``: field specs derived from a header dataclass, and the
lenient decoding and the encoding of extFields by those specs (see headers.py for the rules).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol._lenient import camel, parse_bool, parse_int, parse_str

__all__ = ["_spec", "_decode", "_encode"]


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str  # Python attribute
    wire: str  # default wire name
    kind: type  # int, str or bool
    required: bool
    empty_is_absent: bool  # "" means "not given": every non-str field, and optional str fields


def _kind_of(owner: type, name: str, hint: object) -> type:
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else ()
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if base not in (int, str, bool):
        raise TypeError(f"{owner.__name__}.{name}: header fields are int, str or bool, not {hint}")
    return typing.cast(type, base)


# Per-class field specs, derived once from the class definition and never changed afterwards.
_SPECS: dict[type, tuple[_FieldSpec, ...]] = {}


def _spec(cls: type) -> tuple[_FieldSpec, ...]:
    cached = _SPECS.get(cls)
    if cached is None:
        cached = _SPECS[cls] = _derive_spec(cls)
    return cached


def _derive_spec(cls: type) -> tuple[_FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        kind = _kind_of(cls, f.name, hints[f.name])
        empty_is_absent = kind is not str or (not required and f.default is None)
        specs.append(_FieldSpec(f.name, f.metadata.get("wire", camel(f.name)), kind, required,
                                empty_is_absent))
    return tuple(specs)


_PARSERS = {int: parse_int, bool: parse_bool, str: parse_str}


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(int(typing.cast(int, value)))


# Per (class, naming): each field's attribute, wire name, parser, whether it is a str field,
# required, empty-is-absent and error prefix; the prefix f-string per field and call was a third
# of the decoding time.
_PLANS: dict[tuple[type, int], tuple[tuple[Any, ...], ...]] = {}


def _plan(cls: type, names: Mapping[str, str] | None) -> tuple[tuple[Any, ...], ...]:
    key = (cls, id(names))  # names: None or a class constant such as V2_NAMES, never freed
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = tuple(
            (s.name, wire, _PARSERS[s.kind], s.kind is str, s.required, s.empty_is_absent,
             f"{cls.__name__}.{wire}")
            for s in _spec(cls) for wire in (names[s.name] if names is not None else s.wire,))
    return plan


def _decode(cls: type[Any], fields: Mapping[str, object], names: Mapping[str, str] | None) -> Any:
    if not isinstance(fields, Mapping):
        raise RemoteProtocolError(f"{cls.__name__}: extFields must be a mapping")
    kwargs: dict[str, Any] = {}
    get = fields.get
    for name, wire_name, parse, is_str, required, empty_is_absent, where in _plan(cls, names):
        raw = get(wire_name)
        if raw is None or (empty_is_absent and isinstance(raw, str)
                           and not (raw if is_str else raw.strip())):
            if required:
                raise RemoteProtocolError(f"{cls.__name__}: missing required field {wire_name!r}")
            continue
        kwargs[name] = raw if is_str and type(raw) is str else parse(raw, where)
    return cls(**kwargs)


def _encode(header: object, names: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in _spec(type(header)):
        value = getattr(header, spec.name)
        if value is not None:
            out[names[spec.name] if names is not None else spec.wire] = _format(value)
    return out
