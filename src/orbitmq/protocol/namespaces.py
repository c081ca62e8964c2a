"""Namespaces: RocketMQ's ``NAMESPACE%name`` resource names, wrapped and unwrapped in one place.

A namespace separates tenants that share brokers: the topic ``orders`` of namespace ``shop`` is
stored, routed, authorized and shown as ``shop%orders``; its group ``billing`` as
``shop%billing``, whose retry and dead letter topics are ``%RETRY%shop%billing`` and
``%DLQ%shop%billing`` (the prefix stays in front, as RocketMQ's NamespaceUtil writes them).
System topics and groups (``RMQ_SYS_*``, ``rmq_sys_*``, ``TBW102``, ``SCHEDULE_TOPIC_XXXX``,
``CID_RMQ_SYS_*`` ...) belong to no namespace and are never wrapped.

The rules are NamespaceUtil's:

- :func:`wrap` leaves a system resource, or one already wrapped with the same namespace, as it
  is; otherwise it puts ``NAMESPACE%`` after any retry or DLQ prefix;
- :func:`unwrap` removes ``NAMESPACE%`` only when the name carries that namespace;
- :func:`namespace_of` reads the namespace back from a stored name (text before the first ``%``
  after the prefixes; none for system resources).

Sans-I/O and shared by every side: the gRPC endpoint applies a call's namespace, the SDK wraps
names for a client configured with one, the console groups names by it. A namespace is checked
where it is parsed (:func:`check_namespace`): 1 to :data:`NAMESPACE_CHARS_MAX` characters of
``[a-zA-Z0-9_-]``, since the wrapped name must still be a valid topic name and ``%`` separates.
"""

from __future__ import annotations

import re

from orbitmq.protocol.topics import (
    DLQ_GROUP_TOPIC_PREFIX,
    NOT_ALLOWED_SEND_TOPICS,
    RETRY_GROUP_TOPIC_PREFIX,
    SYSTEM_GROUP_PREFIX,
    SYSTEM_TOPIC_PREFIXES,
)

__all__ = ["NAMESPACE_SEPARATOR", "NAMESPACE_CHARS_MAX", "NamespaceError", "check_namespace",
           "is_system_resource", "wrap", "unwrap", "namespace_of", "strip_retry_and_dlq",
           "is_already_wrapped"]

NAMESPACE_SEPARATOR = "%"
NAMESPACE_CHARS_MAX = 64  # an instance id such as MQ_INST_1234567890_BXjaUcvM is 27
_NAMESPACE = re.compile(r"^[a-zA-Z0-9_-]+$")
# RocketMQ's TopicValidator.SYSTEM_TOPIC_SET (and OrbitMQ's metadata log).
_SYSTEM_NAMES = NOT_ALLOWED_SEND_TOPICS


class NamespaceError(ValueError):
    """A namespace that cannot be one (empty, too long, or a character outside the set)."""


def check_namespace(namespace: str) -> str:
    """``namespace`` when it is one (module docstring); NamespaceError saying why otherwise."""
    if not namespace or len(namespace) > NAMESPACE_CHARS_MAX or not _NAMESPACE.match(namespace):
        raise NamespaceError(f"namespace {namespace[:NAMESPACE_CHARS_MAX]!r} is empty, longer "
                             f"than {NAMESPACE_CHARS_MAX} characters or not of "
                             f"{_NAMESPACE.pattern}")
    return namespace


def is_system_resource(name: str) -> bool:
    """A system topic or group: in no namespace (RocketMQ's TopicValidator.isSystemTopic and
    MixAll.isSysConsumerGroup)."""
    return (name in _SYSTEM_NAMES or name.startswith(SYSTEM_TOPIC_PREFIXES)
            or name.startswith(SYSTEM_GROUP_PREFIX))


def _prefix(name: str) -> str:
    if name.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return RETRY_GROUP_TOPIC_PREFIX
    if name.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return DLQ_GROUP_TOPIC_PREFIX
    return ""


def strip_retry_and_dlq(name: str) -> str:
    """``name`` without a leading ``%RETRY%`` or ``%DLQ%``."""
    return name[len(_prefix(name)):]


def is_already_wrapped(name: str, namespace: str) -> bool:
    """Whether ``name`` (past any retry/DLQ prefix) starts with ``namespace%``."""
    if not namespace or not name or is_system_resource(name):
        return False
    return strip_retry_and_dlq(name).startswith(namespace + NAMESPACE_SEPARATOR)


def wrap(namespace: str | None, name: str) -> str:
    """``name`` in ``namespace``: ``ns%name``, ``%RETRY%ns%group``, ``%DLQ%ns%group``.

    No namespace, an empty name, a system resource or a name already in ``namespace`` come back
    unchanged (NamespaceUtil.wrapNamespace). ``namespace`` is trusted: check it where parsed.
    """
    if not namespace or not name or is_system_resource(name) or is_already_wrapped(name, namespace):
        return name
    prefix = _prefix(name)
    return f"{prefix}{namespace}{NAMESPACE_SEPARATOR}{name[len(prefix):]}"


def unwrap(name: str, namespace: str | None) -> str:
    """``name`` without ``namespace%`` when it carries that namespace, else unchanged
    (NamespaceUtil.withoutNamespace(resource, namespace))."""
    if not namespace or not is_already_wrapped(name, namespace):
        return name
    prefix = _prefix(name)
    return prefix + name[len(prefix) + len(namespace) + 1:]


def namespace_of(name: str) -> str:
    """The namespace a stored name carries ("" for none, a system resource, or a leading ``%``)
    (NamespaceUtil.getNamespaceFromResource)."""
    if not name or is_system_resource(name):
        return ""
    bare = strip_retry_and_dlq(name)
    index = bare.find(NAMESPACE_SEPARATOR)
    return bare[:index] if index > 0 else ""
