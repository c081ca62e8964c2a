"""Registration with the name servers, through the transport's RemotingClient (not the SDK).

The broker registers with every name server of ``namesrv_addr`` (a ``;``-separated list) at start,
every ``register_broker_interval_ms``, and soon after any topic change (``request``: several
changes in a row coalesce into one registration). Name servers are asked in parallel; one that
is down is logged and retried at the next round, the others are not held up.

A slave learns its master's addresses from the answers (``masterAddr``, ``haServerAddr``). While
no answer of a round names a master (the slave started first, or its master is gone), it
registers again after ``MASTERLESS_RETRY_MIN_S``, doubling up to ``MASTERLESS_RETRY_MAX_S`` (or
the interval, when shorter): a slave started next to its master replicates within a second or
two, and one whose master comes back at another address hears of it within seconds, not a whole
interval (30 s) later.

A name server that answers with a refusal (it knows another live broker under this broker's name
and id, see namesrv.route_table) is a different matter: at start the broker must not serve as
someone else's twin, so ``start`` raises and the broker exits with one line; a refusal at a later
round (the other broker came up while this one was running) is logged as an error at every round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from orbitmq.config import BrokerConfig
from orbitmq.errors import BrokerError, OrbitMQError
from orbitmq.protocol.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from orbitmq.transport.client import RemotingClient

__all__ = ["RegisterService", "parse_namesrv_addr"]

log = logging.getLogger(__name__)

MASTERLESS_RETRY_MIN_S = 0.5  # a slave without a master registers again this soon, then doubling
MASTERLESS_RETRY_MAX_S = 5.0  # ... up to this


def parse_namesrv_addr(value: str) -> list[str]:
    """``"a:9876;b:9876"`` -> ``["a:9876", "b:9876"]`` (blanks and duplicates dropped)."""
    seen: list[str] = []
    for part in value.replace(",", ";").split(";"):
        addr = part.strip()
        if addr and addr not in seen:
            seen.append(addr)
    return seen


class RegisterService:
    """Keeps this broker registered with every name server.

    Args:
        config: broker identity, name server list, interval and timeout.
        client: the broker's RemotingClient.
        broker_addr: the address clients must use ("ip:port"); a callable, as the port is only
            known once the server listens.
        topics: the topic table to report, called at each registration.
    """

    def __init__(self, config: BrokerConfig, client: RemotingClient, broker_addr: Callable[[], str],
                 topics: Callable[[], TopicConfigSerializeWrapper], *,
                 ha_addr: Callable[[], str] = lambda: "",
                 broker_id: Callable[[], int] | None = None,
                 on_answer: Callable[[str, str], None] | None = None,
                 master_epoch: Callable[[], int] = lambda: 0) -> None:
        self.config = config
        self.client = client
        self.namesrvs = parse_namesrv_addr(config.namesrv_addr)
        self._broker_addr = broker_addr
        self._topics = topics
        self._ha_addr = ha_addr  # the HA server's address ("" when it does not listen)
        self._broker_id = broker_id or (lambda: config.broker_id)
        self._on_answer = on_answer  # (masterAddr, haServerAddr) of each accepting answer
        self._master_epoch = master_epoch  # controller mode: the epoch a master registers with
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []  # for the next round's end
        self.registrations = 0  # successful registrations, all name servers counted
        self._master_named = False  # an answer of the last round named a master address

    async def start(self) -> None:
        """Register once with every name server, then keep registering in the background.

        Raises:
            BrokerError: a name server refused the registration (the code and remark are the
                name server's, the remark names it); nothing runs in the background then.
        """
        if not self.namesrvs:
            return
        refusals = [r for r in await self._register_round() if isinstance(r, BrokerError)]
        if refusals:
            raise refusals[0]
        self._task = asyncio.get_running_loop().create_task(self._loop(first_done=True))

    def request(self) -> None:
        """Register again soon (a topic appeared or changed); safe to call often."""
        self._wakeup.set()

    def registered_after_now(self) -> asyncio.Future[None]:
        """Done when a registration round that starts after this call has ended (every name
        server answered or failed); done at once when there is nothing to register with."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._task is None or self._task.done():
            future.set_result(None)
            return future
        self._waiters.append(future)
        self.request()
        return future

    async def stop(self) -> None:
        """Stop the periodic registration and unregister from every name server."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._release_waiters(self._waiters)
        if self.namesrvs and self.registrations:  # a refused broker has nothing to take back
            await asyncio.gather(*(self._unregister(a) for a in self.namesrvs), return_exceptions=True)

    async def _loop(self, *, first_done: bool = False) -> None:
        interval = self.config.register_broker_interval_ms / 1000
        masterless_wait = MASTERLESS_RETRY_MIN_S
        while True:
            if first_done:
                first_done = False
            else:
                self._wakeup.clear()
                waiters, self._waiters = self._waiters, []
                try:
                    await self.register_all()
                finally:
                    self._release_waiters(waiters)
            wait = interval
            if self._on_answer is not None and self._broker_id() != 0 and not self._master_named:
                wait = min(interval, masterless_wait)
                masterless_wait = min(masterless_wait * 2, MASTERLESS_RETRY_MAX_S)
            else:
                masterless_wait = MASTERLESS_RETRY_MIN_S
            try:
                await asyncio.wait_for(self._wakeup.wait(), wait)
            except TimeoutError:
                pass

    @staticmethod
    def _release_waiters(waiters: list[asyncio.Future[None]]) -> None:
        for future in waiters:
            if not future.done():
                future.set_result(None)
        waiters.clear()

    async def register_all(self) -> int:
        """Register with every name server now; returns how many accepted (refusals logged as
        errors: this broker runs while a name server routes its name elsewhere)."""
        results = await self._register_round()
        for result in results:
            if isinstance(result, BrokerError):
                log.error("%s; clients of that name server do not reach this broker", result.remark)
        return sum(1 for r in results if r is True)

    async def _register_round(self) -> list[bool | BrokerError]:
        """One registration with every name server: True for each that accepted, False for each
        that could not be reached (logged, tried again next round), the refusal of the others."""
        if not self.namesrvs:
            return []
        body = RegisterBrokerBody(self._topics()).to_json()
        self._master_named = False  # set by an answer that names one
        results = await asyncio.gather(*(self._register(a, body) for a in self.namesrvs))
        self.registrations += sum(1 for r in results if r is True)
        return results

    def _header_fields(self) -> dict[str, str]:
        cfg = self.config
        return RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=self._broker_addr(),
            cluster_name=cfg.broker_cluster_name, ha_server_addr=self._ha_addr(),
            broker_id=self._broker_id(), compressed=False,
            master_epoch=self._master_epoch() or None,
        ).to_ext_fields()

    async def _register(self, namesrv: str, body: bytes) -> bool | BrokerError:
        """True when accepted, False when unreachable (logged), the refusal otherwise."""
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, self._header_fields(), body)
        try:
            resp = await self.client.invoke(namesrv, cmd, self.config.register_broker_timeout_ms / 1000)
        except OrbitMQError as e:
            log.warning("register broker failed namesrv=%s err=%s", namesrv, e)
            return False
        if resp.code != ResponseCode.SUCCESS:
            cfg = self.config
            return BrokerError(resp.code, (
                f"name server {namesrv} refused broker {cfg.broker_name} id {self._broker_id()} "
                f"at {self._broker_addr()}: {resp.remark or ResponseCode(resp.code).name}"))
        if self._on_answer is not None:
            try:
                answer = RegisterBrokerResponseHeader.from_ext_fields(resp.ext_fields)
            except OrbitMQError as e:
                log.warning("register broker: name server %s answered a malformed header: %s",
                            namesrv, e)
            else:
                self._master_named |= bool(answer.master_addr)
                self._on_answer(answer.master_addr or "", answer.ha_server_addr or "")
        return True

    async def _unregister(self, namesrv: str) -> None:
        cfg = self.config
        fields = UnregisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=self._broker_addr(),
            cluster_name=cfg.broker_cluster_name, broker_id=self._broker_id(),
        ).to_ext_fields()
        try:
            await self.client.invoke(namesrv, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), 3.0)
        except OrbitMQError as e:
            log.warning("unregister broker failed namesrv=%s err=%s", namesrv, e)
