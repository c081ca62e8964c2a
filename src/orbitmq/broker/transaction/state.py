"""The state of each transaction a broker holds half messages for, and its valid transitions.

A transaction is named by its *origin*: the half queue offset of its first half message. The check
service re-stores a half message every time it asks the producer about it (with
TRANSACTION_CHECK_TIMES incremented and TRAN_PREPARED_QUEUE_OFFSET = the origin), so one
transaction may have several copies in the half queue; they all share the origin, and resolving any
copy resolves the transaction. Keying by origin is what keeps a late END_TRANSACTION for an old
copy from delivering the message a second time.

States::

    PENDING --commit--> COMMITTED
    PENDING --rollback--> ROLLED_BACK
    PENDING --check max reached--> DISCARDED

Terminal states have no way out: a second END_TRANSACTION is an attempted transition that
:meth:`ResolutionTable.resolve` refuses, and the caller answers it without touching the store.

Memory stays bounded: every transaction whose origin is below the *floor* is settled (the check
service moved the half queue's progress past all its copies, and each copy it passed was resolved,
discarded or re-stored above the progress). Outcomes below the floor are forgotten once they are
``OUTCOME_KEEP_MS`` old; until then a late verdict still gets the precise answer ("already
committed"), afterwards the generic one ("already settled"). Either way nothing is stored again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["HalfState", "ResolutionTable", "TRANSITIONS", "OUTCOME_KEEP_MS"]

OUTCOME_KEEP_MS = 60_000


class HalfState(enum.Enum):
    """Where one transaction stands on the broker."""

    PENDING = "PENDING"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"
    DISCARDED = "DISCARDED"
    SETTLED = "SETTLED"  # resolved long ago (below the floor): the outcome is no longer kept

    @property
    def terminal(self) -> bool:
        return not TRANSITIONS[self]


TRANSITIONS: dict[HalfState, frozenset[HalfState]] = {
    HalfState.PENDING: frozenset({HalfState.COMMITTED, HalfState.ROLLED_BACK, HalfState.DISCARDED}),
    HalfState.COMMITTED: frozenset(),
    HalfState.ROLLED_BACK: frozenset(),
    HalfState.DISCARDED: frozenset(),
    HalfState.SETTLED: frozenset(),
}


class ResolutionTable:
    """Resolved transactions by origin (rebuilt from the op queue at start; loop-owned).

    Args:
        clock_ms: wall time in ms (when an outcome was recorded).
    """

    def __init__(self, clock_ms: Callable[[], int]) -> None:
        self._resolved: dict[int, tuple[HalfState, int]] = {}
        self._clock_ms = clock_ms
        self.floor = 0

    def __len__(self) -> int:
        return len(self._resolved)

    def state_of(self, origin: int) -> HalfState:
        known = self._resolved.get(origin)
        if known is not None:
            return known[0]
        return HalfState.SETTLED if origin < self.floor else HalfState.PENDING

    def resolve(self, origin: int, new: HalfState) -> bool:
        """Move ``origin`` to ``new``; False (nothing changed) when that is not a valid transition."""
        if new not in TRANSITIONS[self.state_of(origin)]:
            return False
        self._resolved[origin] = (new, self._clock_ms())
        return True

    def load(self, origin: int, state: HalfState) -> None:
        """Record an outcome read back from the op queue (the first one read wins)."""
        assert state.terminal and state is not HalfState.SETTLED
        self._resolved.setdefault(origin, (state, self._clock_ms()))

    def clear(self) -> None:
        self._resolved.clear()
        self.floor = 0

    def raise_floor(self, floor: int, keep_ms: int = OUTCOME_KEEP_MS) -> None:
        """Every origin below ``floor`` is settled (the floor never goes down); outcomes below it
        older than ``keep_ms`` are forgotten."""
        self.floor = max(self.floor, floor)
        oldest = self._clock_ms() - keep_ms
        for origin in [o for o, (_, at) in self._resolved.items() if o < self.floor and at <= oldest]:
            del self._resolved[origin]
