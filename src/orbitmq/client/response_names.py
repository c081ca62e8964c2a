"""The names of response codes, for tools that show a server's refusal to a person
(``TOPIC_EXIST_ALREADY`` says more than ``18``) without speaking the wire protocol themselves."""

from __future__ import annotations

from orbitmq.protocol.codes import ResponseCode

__all__ = ["response_name"]


def response_name(code: int) -> str | None:
    """RocketMQ's (or OrbitMQ's) name of a response code; None for a code neither defines."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return None
