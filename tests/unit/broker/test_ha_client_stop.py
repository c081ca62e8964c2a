"""A slave's HA client stops even when a cancellation is swallowed on its way: Python 3.11's
asyncio.wait_for returns instead of raising when the cancellation meets its timeout, and a
client whose task ran on made a failover's stop_following wait for ever (a controller-mode
member's failover tick stopped; found by the chaos run's seed 406)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from orbitmq.broker.replication import slave
from orbitmq.config import BrokerConfig
from orbitmq.config.store_config import StoreConfig
from orbitmq.store.message_store import MessageStore

STOP_BOUND_S = slave.STOP_WAIT_S + 5.0


async def _silent_master() -> tuple[asyncio.Server, str]:
    """A master that accepts the HA connection and never says a word."""
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()
    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}"


def test_a_swallowed_cancellation_does_not_keep_the_ha_client_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_wait_for = asyncio.wait_for
    swallowed: list[str] = []

    async def racy_wait_for(aw: Any, timeout: float | None) -> Any:
        """wait_for as 3.11 behaves when a cancellation meets the timeout: the first
        cancellation is lost (the awaited thing is given up as if timed out)."""
        try:
            return await real_wait_for(aw, timeout)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append("lost")
            raise TimeoutError from None

    store = MessageStore(StoreConfig(store_path=str(tmp_path)), run_threads=False)
    store.start()

    async def scenario() -> float:
        server, address = await _silent_master()
        client = slave.HAClient(BrokerConfig(), store, lambda: address)
        monkeypatch.setattr(asyncio, "wait_for", racy_wait_for)  # every wait of the client
        client.start()
        deadline = time.monotonic() + 10
        while not client.connected:
            assert time.monotonic() < deadline, "the HA client never connected"
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await real_wait_for(client.stop(), STOP_BOUND_S)  # a swallowed one is ours to bear
        took = time.monotonic() - started
        server.close()
        return took

    try:
        took = asyncio.run(scenario())
    finally:
        store.shutdown()
    # Before the stop's flag, the swallowed cancellation left the task running and the stop
    # waiting for it past STOP_BOUND_S; now it ends by the loops' own flag, not by the bound.
    assert took < slave.STOP_WAIT_S, (took, swallowed)
