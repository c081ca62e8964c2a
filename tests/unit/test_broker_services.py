"""The broker's service list (broker/services.py): loads first, starts in order, stops in
reverse; masters-only services follow the role; a failed start stops what started."""

from __future__ import annotations

import asyncio

import pytest

from orbitmq.broker.services import Service, ServiceList


def _services(log: list[str], *, fail_start: str = "") -> list[Service]:
    def step(what: str) -> object:
        def run() -> None:
            if what == fail_start:
                raise OSError(what)
            log.append(what)
        return run

    async def stop_c() -> None:
        await asyncio.sleep(0)
        log.append("stop c")

    return [
        Service("a", start=step("start a"), stop=step("stop a"), load=step("load a")),
        Service("b", start=step("start b"), stop=step("stop b")),
        Service("m", start=step("start m"), stop=step("stop m"), pause=step("pause m"),
                load=step("load m"), masters_only=True),
        Service("c", start=step("start c"), stop=stop_c),
    ]


def test_loaded_then_started_in_order_and_stopped_in_reverse() -> None:
    log: list[str] = []
    services = ServiceList(_services(log))

    async def go() -> None:
        await services.start(master=True)
        await services.stop()
    asyncio.run(go())
    assert log == ["load a", "load m", "start a", "start b", "start m", "start c",
                   "stop c", "stop m", "stop b", "stop a"]
    assert not services.running


def test_a_slave_loads_masters_only_services_and_the_role_starts_or_pauses_them() -> None:
    log: list[str] = []
    services = ServiceList(_services(log))

    async def go() -> None:
        await services.start(master=False)
        assert not services.is_started("m")
        await services.apply_role(master=True)
        await services.apply_role(master=False)
        await services.stop()
    asyncio.run(go())
    assert log == ["load a", "load m", "start a", "start b", "start c", "start m", "pause m",
                   "stop c", "stop m", "stop b", "stop a"]


def test_a_failed_start_stops_what_started_and_raises() -> None:
    log: list[str] = []
    services = ServiceList(_services(log, fail_start="start m"))
    with pytest.raises(OSError):
        asyncio.run(services.start(master=True))
    assert log == ["load a", "load m", "start a", "start b", "stop m", "stop b", "stop a"]
    assert not services.running


def test_a_front_goes_before_the_named_service() -> None:
    services = ServiceList(_services([]))
    services.insert_before("c", Service("front"))
    assert services.names == ["a", "b", "m", "front", "c"]
