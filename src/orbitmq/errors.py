"""The one exception hierarchy of OrbitMQ.

Expected outcomes (a pull that found nothing, a put that hit a full disk) are status enums, not
exceptions; these classes are for misuse, for a peer's bad answer and for broken invariants at I/O.

Two classes also derive from the builtin exception a Python programmer catches for that case:
:class:`TimeoutError` is a builtin ``TimeoutError`` and :class:`ConnectionClosedError` (a refused,
reset or closed connection) a builtin ``ConnectionError``, so ``except TimeoutError`` and
``except ConnectionError`` work with or without importing ours.
"""

from __future__ import annotations

import builtins

__all__ = [
    "OrbitMQError",
    "MetadataRecordError",
    "ClientError",
    "ExpressionError",
    "TopicExistsError",
    "QueuesNotDrainedError",
    "BrokerError",
    "TopicNotFoundError",
    "AccessDeniedError",
    "broker_error",
    "RemoteProtocolError",
    "StoreError",
    "TimeoutError",
    "ConnectionClosedError",
    "SparkError",
    "SparkOptionError",
    "SparkSchemaError",
    "SparkDataLossError",
    "SparkCommitError",
]

_TOPIC_NOT_EXIST = 17  # ResponseCode.TOPIC_NOT_EXIST (protocol.codes imports this module)
_NO_PERMISSION = 16  # ResponseCode.NO_PERMISSION


class OrbitMQError(Exception):
    """Root of every error OrbitMQ raises on purpose."""

    retriable: bool = False


class ClientError(OrbitMQError):
    """The caller used the API wrongly (bad argument, wrong state)."""


class ExpressionError(ClientError):
    """A subscription expression (TAG or SQL92) that does not parse.

    The SDK raises it before anything is sent; a broker answers such an expression with
    SUBSCRIPTION_PARSE_FAILED and this message as the remark.

    Attributes:
        reason: what is wrong, naming the character where.
        expression: the expression as given.
        position: 0-based character where the problem is, when known.
    """

    def __init__(self, reason: str, expression: str = "", position: int | None = None) -> None:
        self.reason = reason
        self.expression = expression
        self.position = position
        super().__init__(reason)


class TopicExistsError(ClientError):
    """``create_topic`` found the topic on a broker it was to create it on: creating would
    silently rewrite its queues and permission, so it is left alone (``update_topic`` changes it).

    Attributes:
        topic: the topic.
        brokers: the brokers (names or addresses) that have it.
    """

    def __init__(self, topic: str, brokers: list[str]) -> None:
        self.topic = topic
        self.brokers = brokers
        super().__init__(f"topic {topic} exists on {', '.join(brokers)}: change it with "
                         f"update_topic (CLI: orbitmq topic update)")


class QueuesNotDrainedError(ClientError):
    """``update_topic`` would lower the read queue count below queues whose messages some consumer
    group has not consumed yet: those messages would be hidden from every consumer until the count
    goes up again. Lower the write queue count first, wait until the extra queues are drained,
    then lower the read count; or pass ``force=True``.

    Attributes:
        topic: the topic.
        queues: (broker name, queue id, unconsumed messages) of each queue that would be hidden.
    """

    def __init__(self, topic: str, queues: list[tuple[str, int, int]], reason: str) -> None:
        self.topic = topic
        self.queues = queues
        super().__init__(f"{reason}; lower the write queues first, wait until the extra queues "
                         f"are drained, then lower the read queues (or force it)")


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


class TopicNotFoundError(BrokerError):
    """The topic does not exist (TOPIC_NOT_EXIST, 17): no name server knows a route for it, or
    the broker has no such topic."""

    def __init__(self, remark: str | None = None, retriable: bool = False) -> None:
        super().__init__(_TOPIC_NOT_EXIST, remark, retriable)


class AccessDeniedError(BrokerError):
    """A request refused by access control (NO_PERMISSION, 16): no or bad credentials, an unknown
    or disabled user, or no rule that allows it. ``reason`` is a short label (``unsigned``,
    ``bad_signature``, ``unknown_user``, ``no_rule``, ...) for logs and metrics; a client sees it
    only through the remark."""

    def __init__(self, remark: str | None = None, reason: str = "denied",
                 retriable: bool = False) -> None:
        super().__init__(_NO_PERMISSION, remark, retriable)
        self.reason = reason


def broker_error(code: int, remark: str | None = None, retriable: bool = False) -> BrokerError:
    """The BrokerError of a response code: the subclass for the codes that have one."""
    if int(code) == _TOPIC_NOT_EXIST:
        return TopicNotFoundError(remark, retriable)
    if int(code) == _NO_PERMISSION:
        return AccessDeniedError(remark, retriable=retriable)
    return BrokerError(code, remark, retriable)


class RemoteProtocolError(OrbitMQError):
    """The peer sent bytes that are not a valid frame, command or stored message."""


class StoreError(OrbitMQError):
    """The message store met a broken invariant or an I/O failure."""


class MetadataRecordError(StoreError):
    """A record of the metadata log (broker/metadata_log.py) that this broker cannot apply: an
    unknown kind (written by a newer broker) or a field out of range. Never applied in part."""


class TimeoutError(OrbitMQError, builtins.TimeoutError):  # noqa: A001 - shadows on purpose
    """A request got no answer in time (also a builtin ``TimeoutError``)."""

    retriable = True


class ConnectionClosedError(OrbitMQError, builtins.ConnectionError):
    """The connection could not be made (refused, unreachable), was reset, or closed before the
    request was answered (also a builtin ``ConnectionError``)."""

    retriable = True


class SparkError(OrbitMQError):
    """The Spark connector (``orbitmq.spark``) cannot go on; the query fails with this message.

    Raised in Spark's driver or its Python workers, so the message says all there is to say:
    Spark shows it, not the object.
    """


class SparkOptionError(SparkError, ClientError, ValueError):
    """An option of the ``orbitmq`` data source is missing, unknown in combination, or malformed
    (``orbitmq.spark.OptionError``). Also a ``ValueError``, as Spark's own option errors are.

    The message always starts with the option's name as a user writes it (camelCase).

    Attributes:
        option: that name.
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"orbitmq option '{option}': {problem}")
        self.option = option


class SparkSchemaError(SparkError, ClientError, ValueError):
    """The DataFrame given to the sink lacks a column, has one of the wrong type, or a row lacks
    a required value (``orbitmq.spark.SinkSchemaError``).

    Attributes:
        column: the column's name.
    """

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"orbitmq sink column '{column}': {problem}")
        self.column = column


class SparkDataLossError(SparkError):
    """Messages a query must read are no longer stored (retention, a deleted topic or queue) and
    ``failOnDataLoss`` is true (``orbitmq.spark.DataLossError``)."""


class SparkCommitError(SparkError):
    """A batch of the exactly-once sink could not be committed: its half messages were not all
    committed (the query must stop and be restarted to finish it), or it was too large to list
    (``orbitmq.spark.CommitError``)."""
