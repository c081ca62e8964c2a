"""The broker's role in its broker set, as the broker runs now (it starts as configured).

Everything that behaves differently on a master and on a slave asks this object at the time it
acts, never a copy taken at start: the handler table's refusals (handlers.py), the store's
replica mode, the pull processor, the replication service. A later failover (an elected master,
a demoted one) changes it through :meth:`RoleState.change`; listeners hear every change.

A fast path that cannot take part in a slave's refusals or a SYNC_MASTER's waits (the native
send path) reads :attr:`RoleState.accepts_writes` and the durable-save seam's
``DurableSave.answers_at_once`` before it takes a send, and leaves the send to the Python path
otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from orbitmq.config import BrokerRole

__all__ = ["RoleState", "RoleListener"]

log = logging.getLogger(__name__)

RoleListener = Callable[[BrokerRole, int], None]


class RoleState:
    """``role`` and ``broker_id`` now; ``accepts_writes`` is False on a slave (read per send)."""

    __slots__ = ("role", "broker_id", "accepts_writes", "epoch", "_listeners")

    def __init__(self, role: BrokerRole, broker_id: int) -> None:
        self.role = role
        self.broker_id = broker_id
        self.epoch = 0  # controller mode: the epoch this broker is master of (SEND_OK shows it)
        self.accepts_writes = role is not BrokerRole.SLAVE
        self._listeners: list[RoleListener] = []

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    def on_change(self, listener: RoleListener) -> None:
        """``listener(role, broker_id)`` after every change."""
        self._listeners.append(listener)

    def change(self, role: BrokerRole, broker_id: int) -> None:
        """Take a new role (a master has id 0, a slave above 0: the caller checked)."""
        if (role, broker_id) == (self.role, self.broker_id):
            return
        log.warning("broker role changes from %s (id %d) to %s (id %d)", self.role.value,
                    self.broker_id, role.value, broker_id)
        self.role, self.broker_id = role, broker_id
        self.accepts_writes = role is not BrokerRole.SLAVE
        for listener in list(self._listeners):
            listener(role, broker_id)

    def describe(self) -> str:
        return f"{self.role.value} (broker id {self.broker_id})"
