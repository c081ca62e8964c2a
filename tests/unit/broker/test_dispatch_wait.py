"""Read-your-writes on the broker's loop, signalled by the store's dispatch (no polling): a
waiter is released when the dispatch reaches the end appended before it asked, lowest target
first, and hears False when its bound passes first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.broker.dispatch_wait import DispatchWaiter
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.store import MessageStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(config(tmp_path), run_threads=False) as s:  # dispatch only when told
        yield s


def test_a_waiter_is_released_by_the_dispatch_signal(store: MessageStore) -> None:
    async def go() -> None:
        waiter = DispatchWaiter(store)
        waiter.start()
        assert await waiter.wait(0.1) is True  # nothing appended: at once
        store.put([msg("T", 0, b"a")])
        first = waiter.wait(30)
        store.put([msg("T", 0, b"b")])
        second = waiter.wait(30)
        await asyncio.sleep(0)
        assert not first.done() and not second.done()
        store.dispatcher.dispatch_available(1)  # the first message only: the first waiter
        await asyncio.wait_for(asyncio.shield(first), 5)
        assert first.result() is True and not second.done()
        store.wake()  # the rest, in this thread, as the broker's loop does
        assert await asyncio.wait_for(second, 5) is True
        assert store.get_max_offset_in_queue("T", 0) == 2

    asyncio.run(go())


def test_a_stalled_dispatch_ends_the_wait_false(store: MessageStore) -> None:
    async def go() -> None:
        waiter = DispatchWaiter(store)
        waiter.start()
        store.put([msg()])
        assert await waiter.wait(0.05) is False  # nobody dispatched within the bound
        assert waiter._waiters == []
        late = waiter.wait(30)
        waiter.stop()
        assert await late is False

    asyncio.run(go())


def test_after_runs_the_handler_once_the_dispatch_caught_up(store: MessageStore) -> None:
    async def go() -> None:
        waiter = DispatchWaiter(store)
        waiter.start()
        seen: list[int] = []

        def handler(cmd: RemotingCommand, conn: object) -> RemotingCommand:
            seen.append(store.get_max_offset_in_queue("T", 0))
            return cmd.response(ResponseCode.SUCCESS)

        wrapped = waiter.after(handler)  # type: ignore[arg-type]
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {})
        assert isinstance(wrapped(cmd, None), RemotingCommand)  # type: ignore[arg-type]
        store.put([msg()])
        pending = wrapped(cmd, None)  # type: ignore[arg-type]
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0)
        assert seen == [0]  # still waiting for the dispatch
        store.wake()
        await asyncio.wait_for(task, 5)
        assert seen == [0, 1]

    asyncio.run(go())
