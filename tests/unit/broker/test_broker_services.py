"""The broker's service list (broker/services.py): loads first, starts in order, stops in
reverse; masters-only services follow the role; a failed start stops what started."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from orbitmq.broker.controller import BrokerController
from orbitmq.broker.services import Service, ServiceList
from orbitmq.config import TEST_MIN_STORE, BrokerConfig


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


@pytest.mark.parametrize("controller_mode", [False, True])
def test_the_brokers_order(tmp_path: Path, controller_mode: bool) -> None:
    """The controller's list keeps the orders its docstring gives reasons for."""
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path))
    broker = BrokerController(BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store,
                                           enable_controller_mode=controller_mode,
                                           broker_id=1 if controller_mode else 0,
                                           controller_addr="etcd://127.0.0.1:1" if controller_mode else ""))
    names = broker.services.names
    at = names.index
    assert names[0] == "store" and names[-1] == "periodic"
    assert at("tables") < at("durable save") < at("remoting server")
    # a SYNC_MASTER send in flight at stop still gets its slaves: replication stops later
    assert at("replication") < at("remoting server close")
    # failover publishes the address the server listens on, and stops after the server closed
    if controller_mode:
        assert at("remoting server") < at("failover") < at("remoting server close")
    else:
        assert "failover" not in names
    assert at("remoting server close") < at("pull") < at("transactions") < at("registration")
    masters = [s.name for s in broker.services._services if s.masters_only]
    assert masters == ["transactions", "transaction checks", "delay levels", "timers", "pop",
                       "lite topics"]
