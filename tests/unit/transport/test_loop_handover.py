"""call_soon_from_any_thread: a hand-over to the loop from its own thread writes no wake-up.

The store's dispatch runs on the event loop once per iteration, and its listeners (held pulls,
replication, timers) hand over to the loop. From the loop's own thread a ``call_soon_threadsafe``
writes the loop's self-pipe (uvloop: its eventfd) for nothing: one syscall and one more loop
iteration per call, which a lone producer's every send paid. Checked on asyncio's selector loop,
whose ``_write_to_self`` is that write.
"""

from __future__ import annotations

import asyncio
import threading

from orbitmq.transport.loop import call_soon_from_any_thread


class _CountingLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.self_writes = 0

    def _write_to_self(self) -> None:
        self.self_writes += 1
        super()._write_to_self()


def test_from_the_loop_thread_it_is_call_soon_in_order_without_a_wake_up() -> None:
    loop = _CountingLoop()
    try:
        ran: list[str] = []

        async def main() -> None:
            loop.call_soon(ran.append, "first")
            before = loop.self_writes
            call_soon_from_any_thread(loop, ran.append, "second")
            assert loop.self_writes == before
            assert ran == []  # soon, not now
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        loop.run_until_complete(main())
        assert ran == ["first", "second"]
    finally:
        loop.close()


def test_from_another_thread_it_wakes_the_loop() -> None:
    loop = _CountingLoop()
    try:
        done = asyncio.Event()
        seen: list[int] = []

        def other() -> None:
            call_soon_from_any_thread(loop, done.set)
            seen.append(threading.get_ident())

        async def main() -> int:
            before = loop.self_writes
            thread = threading.Thread(target=other)
            thread.start()
            await asyncio.wait_for(done.wait(), 5)
            thread.join(5)
            return loop.self_writes - before

        assert loop.run_until_complete(main()) >= 1
        assert seen and seen[0] != threading.get_ident()
    finally:
        loop.close()
