"""How a chaos writer counts a send's outcome (orbitmq.testing.chaos.workload.classify): only a
refusal that says nothing was stored is a failure; a timeout or a closed connection may have
stored it, so it is unknown, and the checker does not hold the promise to it."""

from __future__ import annotations

from orbitmq.errors import BrokerError, ClientError, ConnectionClosedError, TimeoutError
from orbitmq.testing.chaos.checker import Outcome
from orbitmq.testing.chaos.workload import classify, describe


def test_refusals_before_storing_failed_and_the_rest_is_unknown() -> None:
    assert classify(None, ClientError("no route")) is Outcome.FAILED
    assert classify(None, BrokerError(14, "not available")) is Outcome.FAILED
    assert classify(None, BrokerError(2, "busy")) is Outcome.FAILED
    assert classify(None, BrokerError(1, "system error")) is Outcome.UNKNOWN
    assert classify(None, TimeoutError("no answer")) is Outcome.UNKNOWN
    assert classify(None, ConnectionClosedError("closed")) is Outcome.UNKNOWN
    assert describe(None, BrokerError(14, "lease lapsed")) == "BrokerError(14: lease lapsed)"
