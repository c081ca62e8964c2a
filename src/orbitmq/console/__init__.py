"""The web console: ``orbitmq console`` (and ``orbitmq standalone``'s console), built on the SDK.

One module per page family (cluster, topics, groups, messages, dead_letters, transactions,
login); :mod:`orbitmq.console.server` assembles them. See docs/console.md.
"""

from orbitmq.console.server import ConsoleServer

__all__ = ["ConsoleServer"]
