"""How the console shows a server's refusal: in words with the code's name (``The topic exists
already (TOPIC_EXIST_ALREADY): ...``), never as a bare number, and with the HTTP status that says
whose fault it is: 4xx for what the request asked (a missing topic, a refused value, a rule),
503 for a server that is busy or not ready, 502 only for a server that failed."""

from __future__ import annotations

import dataclasses

from orbitmq.client import response_name
from orbitmq.errors import AccessDeniedError, BrokerError

__all__ = ["Refusal", "refusal_of", "WORDS", "HTTP_STATUS"]

# What each refusal means to an operator; a code not listed is shown by its name alone.
WORDS = {
    "SYSTEM_ERROR": "The server failed",
    "SYSTEM_BUSY": "The server is busy; try again",
    "NOT_SUPPORTED": "The server does not support this request",
    "TRANSACTION_FAILED": "The transaction failed",
    "FLUSH_DISK_TIMEOUT": "The message was stored but not flushed to disk in time",
    "SLAVE_NOT_AVAILABLE": "No replica is available",
    "FLUSH_SLAVE_TIMEOUT": "The message was stored but not copied to a replica in time",
    "MESSAGE_ILLEGAL": "The message or a name in it is not allowed",
    "SERVICE_NOT_AVAILABLE": "The service is not available now",
    "VERSION_NOT_SUPPORTED": "The server does not support this client version",
    "NO_PERMISSION": "Not allowed",
    "TOPIC_NOT_EXIST": "No such topic",
    "TOPIC_EXIST_ALREADY": "The topic exists already",
    "QUERY_NOT_FOUND": "Nothing found",
    "SUBSCRIPTION_PARSE_FAILED": "The subscription expression does not parse",
    "SUBSCRIPTION_NOT_EXIST": "No such subscription",
    "SUBSCRIPTION_GROUP_NOT_EXIST": "No such consumer group",
    "INVALID_PARAMETER": "A value of the request is not allowed",
    "CONSUMER_NOT_ONLINE": "The consumer is not online",
    "CONSUME_MSG_TIMEOUT": "The consumer did not answer in time",
    "NO_MESSAGE": "No such message",
    "FLOW_CONTROL": "The server is limiting requests; try again",
    "ILLEGAL_OPERATION": "Not allowed in the server's current state",
    "FILTER_NOT_SUPPORTED": "The broker has property filtering off",
    "LIMIT_EXCEEDED": "A limit of the broker is reached",
}
_NOT_FOUND = ("TOPIC_NOT_EXIST", "QUERY_NOT_FOUND", "SUBSCRIPTION_NOT_EXIST",
              "SUBSCRIPTION_GROUP_NOT_EXIST", "NO_MESSAGE", "CONSUMER_NOT_ONLINE")
_BAD_REQUEST = ("MESSAGE_ILLEGAL", "SUBSCRIPTION_PARSE_FAILED", "INVALID_PARAMETER",
                "FILTER_NOT_SUPPORTED", "VERSION_NOT_SUPPORTED", "NOT_SUPPORTED")
_CONFLICT = ("TOPIC_EXIST_ALREADY", "ILLEGAL_OPERATION", "LIMIT_EXCEEDED", "TRANSACTION_FAILED")
_UNAVAILABLE = ("SYSTEM_BUSY", "FLOW_CONTROL", "SERVICE_NOT_AVAILABLE", "SLAVE_NOT_AVAILABLE",
                "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "CONSUME_MSG_TIMEOUT")
HTTP_STATUS = {
    **{n: 404 for n in _NOT_FOUND}, **{n: 400 for n in _BAD_REQUEST},
    **{n: 409 for n in _CONFLICT}, **{n: 503 for n in _UNAVAILABLE}, "NO_PERMISSION": 403,
}
SERVER_FAILED_HTTP_STATUS = 502  # SYSTEM_ERROR and codes the console does not know


@dataclasses.dataclass(frozen=True)
class Refusal:
    """An error page's HTTP status, title and one-line reason."""

    http_status: int
    title: str
    reason: str


def refusal_of(error: BrokerError, who: str) -> Refusal:
    """The page for ``error``; ``who`` names the user the cluster refused (for NO_PERMISSION)."""
    name = response_name(error.code) or f"code {error.code}"
    words = WORDS.get(name)
    what = f"{words} ({name})" if words else name
    reason = f"{what}: {error.remark}" if error.remark else what
    status = HTTP_STATUS.get(name, SERVER_FAILED_HTTP_STATUS)
    if isinstance(error, AccessDeniedError) or status == 403:  # the user's rules
        return Refusal(403, "Not allowed", f"The cluster refused this to {who}: {reason}")
    return Refusal(status, _TITLES.get(status, "The cluster refused"), reason)


_TITLES = {404: "Not found", 503: "The cluster cannot do it now",
           SERVER_FAILED_HTTP_STATUS: "The cluster failed"}
