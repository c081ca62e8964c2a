"""Running the asyncio SDK from plain code, on the event loop the SDK's own threads use.

``run(main())`` runs a coroutine that uses the async clients (``AsyncProducer``,
``AsyncPullConsumer``, ...) to completion on a fresh loop: uvloop's when installed (the clients
spend most of their time in the loop's socket machinery, where uvloop is several times cheaper),
asyncio's otherwise. ``new_event_loop()`` makes such a loop for code that runs its own (Spark's
session threads do). Both are the transport's, re-exported so that tools built on the SDK (the
CLI, the Spark connector) need not reach below it.
"""

from __future__ import annotations

from orbitmq.transport.loop import new_event_loop, run

__all__ = ["run", "new_event_loop"]
