"""CheckAnswers.close: answers under way go out, for a bounded time; later checks are left to the
broker's next round (the wire side is tests/integration/test_transactions.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from orbitmq.client.producer.transaction_checks import CheckAnswers
from orbitmq.client.producer.transaction_state import TransactionListener


def test_close_waits_for_an_answer_under_way() -> None:
    answers = CheckAnswers("g", TransactionListener())
    sent: list[str] = []

    async def answer() -> None:
        await asyncio.sleep(0.05)  # the listener deciding
        sent.append("commit")

    async def scenario() -> None:
        answers._spawn(answer())
        await answers.close()

    asyncio.run(scenario())
    assert sent == ["commit"]


def test_close_cancels_what_outlasts_the_drain_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    answers = CheckAnswers("g", TransactionListener())
    stuck = asyncio.Event()

    async def answer() -> None:
        await stuck.wait()  # a listener that never returns

    async def scenario() -> None:
        answers._spawn(answer())
        await answers.close(drain_max_s=0.05)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert "1 transaction check answers still under way after 0.1 s" in caplog.text


def test_a_check_arriving_while_closing_is_left_to_the_broker() -> None:
    answers = CheckAnswers("g", TransactionListener())
    ran: list[str] = []

    async def answer() -> None:
        ran.append("answered")

    async def scenario() -> None:
        await answers.close()
        answers._spawn(answer())  # closed, not left pending (warnings are errors here)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert ran == []
