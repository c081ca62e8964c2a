"""A client's namespace (``namespace=`` of producers and consumers), as RocketMQ's 4.x clients
keep one: the names the application gives are wrapped before they go out (``shop%orders``,
``%RETRY%shop%billing``: protocol/namespaces.py) and the topics of what comes back are shown
bare again, so an application moves between namespaces by configuration alone.
"""

from __future__ import annotations

import dataclasses

from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.namespaces import NamespaceError, check_namespace, unwrap, wrap

__all__ = ["client_namespace", "wrap", "unwrap", "unwrap_queue"]


def client_namespace(namespace: str | None) -> str | None:
    """The checked ``namespace=`` option (None or "" for none).

    Raises:
        ClientError: not a namespace (empty after all, too long, or a character outside
            ``[a-zA-Z0-9_-]``).
    """
    if namespace is None or namespace == "":
        return None
    if not isinstance(namespace, str):
        raise ClientError(f"namespace must be a str, not {type(namespace).__name__}")
    try:
        return check_namespace(namespace)
    except NamespaceError as e:
        raise ClientError(str(e)) from None


def unwrap_queue(mq: MessageQueue, namespace: str | None) -> MessageQueue:
    """``mq`` with its topic shown bare (itself without a namespace)."""
    if not namespace:
        return mq
    bare = unwrap(mq.topic, namespace)
    return mq if bare == mq.topic else dataclasses.replace(mq, topic=bare)
