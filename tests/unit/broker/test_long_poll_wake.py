"""A held pull is answered from the dispatch of its message, in that call (issue 41): the
store's arrival listener, called on the loop, resumes it without a loop iteration in between,
and the dispatch round's end writes each answered connection once. From a store thread the
arrival is handed over to the loop instead."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from processor_support import Peer

from orbitmq.broker.processor.long_poll_service import HeldPull, LongPollService
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader

TOPIC = "WakeT"


class FakeStore:
    """What the long-poll service asks of the store: queue ends and a progress listener."""

    def __init__(self) -> None:
        self.max_offset = 0
        self.progress: list[Callable[[int], None]] = []

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.max_offset

    def add_dispatch_listener(self, listener: Callable[[int], None]) -> None:
        self.progress.append(listener)


def _held(peer: Peer, queue_id: int = 0) -> HeldPull:
    header = PullMessageRequestHeader("WakeG", TOPIC, queue_id, 0, 32, 2, -1, 10_000)
    cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext_fields())
    return HeldPull(cmd, peer, header, None)  # type: ignore[arg-type]


def _service(resumed: list[HeldPull]) -> tuple[LongPollService, FakeStore]:
    store = FakeStore()
    return LongPollService(store, resumed.append, 1000), store  # type: ignore[arg-type]


def test_an_arrival_on_the_loop_resumes_the_held_pulls_in_that_call() -> None:
    async def go() -> None:
        resumed: list[HeldPull] = []
        service, store = _service(resumed)
        service.start()
        peer = Peer()
        pulls = [_held(peer, 0), _held(peer, 1)]
        for held in pulls:
            assert service.hold(held, 10_000)
        assert service.waits_on(TOPIC) and not service.waits_on("Other")
        store.max_offset = 1
        service.on_arrival(TOPIC, 0, 1, 0)
        service.on_arrival(TOPIC, 1, 1, 0)
        assert resumed == pulls  # no loop iteration in between
        assert peer.flushes == 0  # written once, at the round's end
        for listener in store.progress:
            listener(100)
        assert peer.flushes == 1
        assert not service.waits_on(TOPIC)
        await service.stop()

    asyncio.run(go())


def test_an_arrival_from_a_store_thread_is_handed_over_to_the_loop() -> None:
    async def go() -> None:
        resumed: list[HeldPull] = []
        service, store = _service(resumed)
        service.start()
        held = _held(Peer())
        assert service.hold(held, 10_000)
        store.max_offset = 1
        thread = threading.Thread(target=service.on_arrival, args=(TOPIC, 0, 1, 0))
        thread.start()
        thread.join()
        assert resumed == []  # not on the dispatch thread
        for _ in range(3):
            await asyncio.sleep(0)
        assert resumed == [held]
        await service.stop()

    asyncio.run(go())


