"""What a front other than the remoting server (the gRPC endpoint) serves from.

The broker does not import its other fronts: the server assembly (orbitmq/assembly.py) builds
one from :class:`FrontParts` and runs it with the broker (``BrokerController.mount``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from orbitmq.broker.context import BrokerContext
from orbitmq.broker.lite.service import LiteService
from orbitmq.broker.pop.pop_service import PopService
from orbitmq.broker.timer.timer_service import TimerService
from orbitmq.broker.transaction.end_transaction_processor import EndTransactionProcessor
from orbitmq.security.guard import AccessGuard
from orbitmq.store.message_inner import MessageInner

__all__ = ["FrontParts", "GRPC_FRONT"]

GRPC_FRONT = "grpc"  # the front ``grpc_listen_port`` asks for, mounted under this name


@dataclasses.dataclass(frozen=True)
class FrontParts:
    """The context and the services a front shares with the remoting front.

    Attributes:
        ctx: the broker's context (store, tables, config, the durable-save seam).
        pop: POP consumption (receive, ack, change invisible time).
        lite: lite topics (their registry, subscriptions and receives).
        timer: timer messages (a send with a delivery time).
        to_half: the transaction service's hook for a transactional send.
        end_transaction: commits and rollbacks.
        guard: access control (authentication and ACLs).
    """

    ctx: BrokerContext
    pop: PopService
    lite: LiteService
    timer: TimerService
    to_half: Callable[[MessageInner, str], MessageInner]
    end_transaction: EndTransactionProcessor
    guard: AccessGuard
