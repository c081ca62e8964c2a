"""The one exception hierarchy of OrbitMQ.

Expected outcomes (a pull that found nothing, a put that hit a full disk) are status enums, not
exceptions; these classes are for misuse, for a peer's bad answer and for broken invariants at I/O.
"""

from __future__ import annotations

__all__ = [
    "OrbitMQError",
    "ClientError",
    "BrokerError",
    "RemoteProtocolError",
    "StoreError",
    "TimeoutError",
    "ConnectionClosedError",
]


class OrbitMQError(Exception):
    """Root of every error OrbitMQ raises on purpose."""

    retriable: bool = False


class ClientError(OrbitMQError):
    """The caller used the API wrongly (bad argument, wrong state)."""


class BrokerError(OrbitMQError):
    """A server answered with a non-success response code.

    Attributes:
        code: the RocketMQ response code.
        remark: the server's explanation.
        retriable: whether trying again (maybe on another broker) may succeed.
    """

    def __init__(self, code: int, remark: str | None = None, retriable: bool = False) -> None:
        self.code = int(code)
        self.remark = remark or ""
        self.retriable = retriable
        super().__init__(f"code={self.code} remark={self.remark!r}")


class RemoteProtocolError(OrbitMQError):
    """The peer sent bytes that are not a valid frame, command or stored message."""


class StoreError(OrbitMQError):
    """The message store met a broken invariant or an I/O failure."""


class TimeoutError(OrbitMQError):  # noqa: A001 - deliberately shadows the builtin in this namespace
    """A request got no answer in time."""

    retriable = True


class ConnectionClosedError(OrbitMQError):
    """The connection closed before the request was answered."""

    retriable = True
