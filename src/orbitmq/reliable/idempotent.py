"""``@idempotent(log)``: a push-consumer listener that applies each message's effect once.

The wrapped function is a *per-message handler* ``handler(msg, tx)``: ``msg`` a MessageExt, ``tx``
an :class:`~orbitmq.reliable.db.SqlHandle` in an open transaction on the consume log's database.
Make the business change through ``tx``: it commits together with the row that says "done", so a
crash at any point leaves either both or neither. Raise (or return RECONSUME_LATER) to fail.

For every message of a delivered batch, in order:

========================== =================================================================
the consume log says        the listener
========================== =================================================================
new, or failed before       runs the handler; acknowledges on success; on failure asks for a
                            redelivery, or acknowledges once ``max_attempts`` starts failed
                            (the row is PARKED for a person: ``orbitmq consumelog``)
done                        acknowledges without running the handler (a duplicate)
processing elsewhere        asks for a redelivery (RECONSUME_LATER): the other consumer may
                            still fail; once its lease ran out the next delivery takes over
parked                      acknowledges
========================== =================================================================
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.client import ConsumeContext, ConsumeResult
from orbitmq.protocol.message import MessageExt
from orbitmq.reliable.consume_log import Claim, ClaimResult, ConsumeLog, ConsumeStatus, KeyFunction
from orbitmq.reliable.db import SqlHandle

__all__ = ["idempotent", "Outcome", "consume_once"]

log = logging.getLogger(__name__)

Handler = Callable[[MessageExt, SqlHandle], Any]


class Outcome:
    """What happened to one message (strings, for logs and tests)."""

    APPLIED = "applied"  # the handler ran and its change committed
    DUPLICATE = "duplicate"  # done before: skipped
    PARKED = "parked"  # given up on: acknowledged, left for a person
    RETRY = "retry"  # failed or busy elsewhere: redeliver later


class _LostClaim(Exception):
    """Our claim was taken over (lease expired) before we committed: undo the business change."""


def consume_once(store: ConsumeLog, msg: MessageExt, group: str, handler: Handler,
                 key: KeyFunction | None = None) -> str:
    """Handle one delivery of ``msg`` for ``group``; returns an :class:`Outcome` value."""
    claim = store.claim(msg, group, key)
    if claim.result is ClaimResult.DUPLICATE:
        log.debug("duplicate skipped group=%s topic=%s msg=%s", group, msg.topic, msg.msg_id)
        return Outcome.DUPLICATE
    if claim.result is ClaimResult.PARKED:
        return Outcome.PARKED
    if claim.result is ClaimResult.BUSY:
        return Outcome.RETRY
    try:
        with store.database.transaction() as tx:
            answer = handler(msg, tx)
            if answer is ConsumeResult.RECONSUME_LATER:
                raise RuntimeError("handler answered RECONSUME_LATER")
            if not store.complete(tx, claim):
                raise _LostClaim()
    except _LostClaim:
        log.warning("claim lost while handling group=%s msg=%s: rolled back", group, msg.msg_id)
        return Outcome.RETRY
    except Exception as e:  # the handler failed: count it
        return _failed(store, claim, msg, e)
    return Outcome.APPLIED


def _failed(store: ConsumeLog, claim: Claim, msg: MessageExt, error: Exception) -> str:
    text = f"{type(error).__name__}: {' '.join(str(error).split())}"[:2000]
    try:
        status = store.fail(claim, text)
    except Exception:  # the database itself is failing: the lease will free the row
        log.exception("could not record a failure msg=%s", msg.msg_id)
        store.database.discard()
        return Outcome.RETRY
    if status is ConsumeStatus.PARKED:
        log.error("message parked after %d attempts topic=%s msg=%s: %s", claim.consume_times,
                  msg.topic, msg.msg_id, text)
        return Outcome.PARKED
    log.warning("handler failed attempt=%d topic=%s msg=%s: %s", claim.consume_times, msg.topic,
                msg.msg_id, text)
    return Outcome.RETRY


def idempotent(store: ConsumeLog, *, key: KeyFunction | None = None
               ) -> Callable[[Handler], Callable[[list[MessageExt], ConsumeContext], ConsumeResult]]:
    """Turn ``handler(msg, tx)`` into a push-consumer listener that deduplicates through ``store``.

    ``key`` overrides the store's business-key function for this listener. The listener keeps
    the handler as ``listener.handler`` and the store as ``listener.store``.
    """

    def wrap(handler: Handler) -> Callable[[list[MessageExt], ConsumeContext], ConsumeResult]:
        @functools.wraps(handler)
        def listener(messages: list[MessageExt], context: ConsumeContext) -> ConsumeResult:
            group = store.group or context.group
            for index, msg in enumerate(messages):
                if consume_once(store, msg, group, handler, key) != Outcome.RETRY:
                    continue
                if context.orderly:
                    return ConsumeResult.SUSPEND_CURRENT_QUEUE_A_MOMENT
                if index == 0:
                    return ConsumeResult.RECONSUME_LATER
                context.ack_index = index - 1  # the ones before are handled; the rest come again
                return ConsumeResult.SUCCESS
            return ConsumeResult.SUCCESS

        listener.handler = handler  # type: ignore[attr-defined]
        listener.store = store  # type: ignore[attr-defined]
        return listener

    return wrap
