"""Statuses of the RocketMQ 5 API: the one mapping from broker outcomes to ``Code`` values.

Every answer carries a ``Status`` (code and message). A refusal's message says what was wrong
with the request; an unexpected failure inside the broker is logged and answered
INTERNAL_SERVER_ERROR with a fixed message, never the exception's text.
"""

from __future__ import annotations

from orbitmq.grpc._generated import definition_pb2 as pb
from orbitmq.protocol.codes import ResponseCode
from orbitmq.store.status import PutMessageStatus

__all__ = ["Code", "ApiError", "status", "OK", "from_response_code", "from_put_status",
           "INTERNAL_MESSAGE"]

Code = pb.Code
INTERNAL_MESSAGE = "internal error in the broker (logged there)"


class ApiError(Exception):
    """A request refused with an API code and a message (an expected outcome)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))  # type: ignore[arg-type]


OK = status(Code.OK, "OK")

_RESPONSE: dict[int, int] = {
    ResponseCode.SUCCESS: Code.OK,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.NO_MESSAGE: Code.INVALID_RECEIPT_HANDLE,
    ResponseCode.FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
}


def from_response_code(code: int) -> int:
    """The API code of a remoting response code (INTERNAL_SERVER_ERROR when unknown)."""
    return _RESPONSE.get(code, Code.INTERNAL_SERVER_ERROR)


_PUT: dict[PutMessageStatus, int] = {
    PutMessageStatus.PUT_OK: Code.OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutMessageStatus.OS_PAGECACHE_BUSY: Code.TOO_MANY_REQUESTS,
}


def from_put_status(put: PutMessageStatus) -> int:
    return _PUT.get(put, Code.INTERNAL_SERVER_ERROR)
