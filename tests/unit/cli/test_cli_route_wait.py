"""`orbitmq consume` waits a moment for a topic the name servers do not know yet."""

from __future__ import annotations

import asyncio

import pytest

from orbitmq.cli import consume_cmd
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode


class RouteAppearsLater:
    """A consumer whose topic the name servers learn after ``misses`` lookups."""

    def __init__(self, misses: int, code: int = ResponseCode.TOPIC_NOT_EXIST) -> None:
        self.misses = misses
        self.code = code
        self.lookups = 0

    async def fetch_queues(self, topic: str) -> list[str]:
        self.lookups += 1
        if self.lookups <= self.misses:
            raise BrokerError(self.code, f"no route for topic {topic!r}")
        return [f"{topic}-q0"]


def test_a_topic_registered_a_moment_later_is_found() -> None:
    consumer = RouteAppearsLater(misses=3)
    assert asyncio.run(consume_cmd._fetch_queues(consumer, "T", 10.0)) == ["T-q0"]
    assert consumer.lookups == 4


def test_an_unknown_topic_fails_within_the_wait() -> None:
    consumer = RouteAppearsLater(misses=10**9)
    with pytest.raises(BrokerError) as err:
        asyncio.run(consume_cmd._fetch_queues(consumer, "T", 0.2))  # --timeout 0.2 bounds it
    assert err.value.code == ResponseCode.TOPIC_NOT_EXIST and 2 <= consumer.lookups <= 10


def test_other_errors_are_not_retried() -> None:
    consumer = RouteAppearsLater(misses=1, code=ResponseCode.NO_PERMISSION)
    with pytest.raises(BrokerError):
        asyncio.run(consume_cmd._fetch_queues(consumer, "T", 10.0))
    assert consumer.lookups == 1
