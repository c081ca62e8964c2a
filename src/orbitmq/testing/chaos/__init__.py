"""The chaos harness (docs/chaos.md): a seeded schedule of faults against real servers
(:mod:`.schedule`, :mod:`.clusters`), writers and readers that record a history
(:mod:`.workload`), and one checker that judges it (:mod:`.checker`). ``make chaos`` runs it
through ``chaos/run.py``; ``tests/chaos/test_chaos.py`` runs a short seeded slice of it.

Only the checker is imported here: it is pure, and its unit tests should not pay for the rest.
"""

from orbitmq.testing.chaos.checker import (
    SYNC_FLUSH,
    SYNC_MASTER,
    Outcome,
    Promise,
    Read,
    Send,
    Verdict,
    check,
)

__all__ = ["SYNC_FLUSH", "SYNC_MASTER", "Outcome", "Promise", "Read", "Send", "Verdict", "check"]
