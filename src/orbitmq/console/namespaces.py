"""The topic and group lists by namespace: each name's namespace (RocketMQ's ``NAMESPACE%name``,
protocol/namespaces.py) shown beside it, the namespaces present offered as filters, and
``?namespace=NS`` keeping one of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from orbitmq.console import forms
from orbitmq.protocol.namespaces import NamespaceError, check_namespace, namespace_of

__all__ = ["namespace_of", "chosen_namespace", "namespaces_in", "in_namespace"]


def chosen_namespace(query: Mapping[str, Any]) -> str | None:
    """The ``namespace`` the page is filtered by (None: every name).

    Raises:
        FormError: not a namespace.
    """
    value = forms.text(query, "namespace", required=False)
    if not value:
        return None
    try:
        return check_namespace(value)
    except NamespaceError as e:
        raise forms.FormError(str(e)) from None


def namespaces_in(names: Iterable[str]) -> list[str]:
    """The namespaces ``names`` carry, sorted (none: empty)."""
    return sorted({ns for ns in map(namespace_of, names) if ns})


def in_namespace(name: str, namespace: str | None) -> bool:
    return namespace is None or namespace_of(name) == namespace
