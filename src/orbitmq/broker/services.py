"""The broker's parts that start and stop, in one ordered list.

A :class:`Service` names a part and how it loads (reads its files), starts and stops. The
controller keeps them in one :class:`ServiceList`: loaded first (every load, in order), then
started in order, and stopped in the reverse order. A part that only a master runs (delayed
delivery, transaction checks, timers, POP revival) is ``masters_only``: a slave loads it but does
not start it, and a change of role starts or pauses it (:meth:`ServiceList.apply_role`).

Adding a background part is one entry at the right place of the list: what it needs started
before it comes earlier, what needs it comes later.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

__all__ = ["Front", "Service", "ServiceList"]

log = logging.getLogger(__name__)

Step = Callable[[], Awaitable[None] | None]


def _nothing() -> None:
    return None


async def _run(step: Step) -> None:
    result = step()
    if inspect.isawaitable(result):
        await result


class Front(Protocol):
    """A front mounted on the broker from outside (the gRPC endpoint): it starts and stops."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclasses.dataclass(frozen=True)
class Service:
    """One part the controller starts and stops.

    Attributes:
        name: what it is, for logs and for finding it in the list.
        start: begin its work (may be a coroutine function); raises when it cannot.
        stop: end its work and save what it keeps; called for a part that loaded or started,
            once, in the reverse order.
        load: read its files before anything starts (None: nothing to read).
        masters_only: run on a master only (a slave loads it and stops it at the end).
        pause: how a master demoted to a slave ends its work while the broker runs on (files
            kept open); ``stop`` when None.
    """

    name: str
    start: Step = _nothing
    stop: Step = _nothing
    load: Callable[[], None] | None = None
    masters_only: bool = False
    pause: Step | None = None


class ServiceList:
    """The services in their order; started forward, stopped in reverse.

    A service whose load failed is not stopped (what it opened it closes itself); one that
    loaded is stopped even when its start failed, and so is every one before it.
    """

    def __init__(self, services: list[Service]) -> None:
        self._services = list(services)
        names = [s.name for s in self._services]
        assert len(set(names)) == len(names), f"service names repeat: {names}"
        self._loaded: set[str] = set()
        self._started: set[str] = set()

    @property
    def names(self) -> list[str]:
        """The services' names in start order."""
        return [s.name for s in self._services]

    def insert_before(self, name: str, service: Service) -> None:
        """Add ``service`` just before the service ``name`` (before anything starts)."""
        assert not self._loaded and not self._started, "the services are running"
        assert service.name not in self.names, f"service {service.name} already listed"
        self._services.insert(self.names.index(name), service)

    def is_started(self, name: str) -> bool:
        return name in self._started

    @property
    def running(self) -> bool:
        """True while any service is loaded or started (until :meth:`stop` ends them)."""
        return bool(self._loaded or self._started)

    async def start(self, *, master: bool) -> None:
        """Load every service, then start them in order (``masters_only`` ones when
        ``master``). On a failure, stops what loaded or started, in reverse, and raises."""
        try:
            for service in self._services:
                if service.load is not None:
                    service.load()
                    self._loaded.add(service.name)
            for service in self._services:
                if service.masters_only and not master:
                    continue
                await _run(service.start)
                self._started.add(service.name)
        except BaseException:
            with contextlib.suppress(Exception):  # logged; the start's failure is the news
                await self.stop()
            raise

    async def stop(self) -> None:
        """Stop, in reverse order, every service that loaded or started. One that fails does
        not keep the others from stopping; the first failure is raised at the end."""
        failure: Exception | None = None
        for service in reversed(self._services):
            if service.name not in self._started and service.name not in self._loaded:
                continue
            self._started.discard(service.name)
            self._loaded.discard(service.name)
            try:
                await _run(service.stop)
            except Exception as e:
                log.exception("service %s failed to stop", service.name)
                failure = failure or e
        if failure is not None:
            raise failure

    async def apply_role(self, *, master: bool) -> None:
        """Start the ``masters_only`` services in order (``master``), or pause the running
        ones in reverse (a slave now)."""
        if master:
            for service in self._services:
                if service.masters_only and service.name not in self._started:
                    await _run(service.start)
                    self._started.add(service.name)
            return
        for service in reversed(self._services):
            if service.masters_only and service.name in self._started:
                self._started.discard(service.name)
                await _run(service.pause or service.stop)
