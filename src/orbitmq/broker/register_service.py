"""Registration with the name servers, through the transport's RemotingClient (not the SDK).

The broker registers with every name server of ``namesrv_addr`` (a ``;``-separated list) at start,
every ``register_broker_interval_ms``, and soon after any topic change (``request``: several
changes in a row coalesce into one registration). Name servers are asked in parallel; one that
is down is logged and retried at the next round, the others are not held up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from orbitmq.config import BrokerConfig
from orbitmq.errors import OrbitMQError
from orbitmq.protocol.bodies import RegisterBrokerBody, TopicConfigSerializeWrapper
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader
from orbitmq.transport.client import RemotingClient

__all__ = ["RegisterService", "parse_namesrv_addr"]

log = logging.getLogger(__name__)


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
                 topics: Callable[[], TopicConfigSerializeWrapper]) -> None:
        self.config = config
        self.client = client
        self.namesrvs = parse_namesrv_addr(config.namesrv_addr)
        self._broker_addr = broker_addr
        self._topics = topics
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []  # for the next round's end
        self.registrations = 0  # successful registrations, all name servers counted

    def start(self) -> None:
        if self.namesrvs:
            self._task = asyncio.get_running_loop().create_task(self._loop())

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
        if self.namesrvs:
            await asyncio.gather(*(self._unregister(a) for a in self.namesrvs), return_exceptions=True)

    async def _loop(self) -> None:
        interval = self.config.register_broker_interval_ms / 1000
        while True:
            self._wakeup.clear()
            waiters, self._waiters = self._waiters, []
            try:
                await self.register_all()
            finally:
                self._release_waiters(waiters)
            try:
                await asyncio.wait_for(self._wakeup.wait(), interval)
            except TimeoutError:
                pass

    @staticmethod
    def _release_waiters(waiters: list[asyncio.Future[None]]) -> None:
        for future in waiters:
            if not future.done():
                future.set_result(None)
        waiters.clear()

    async def register_all(self) -> int:
        """Register with every name server now; returns how many accepted."""
        if not self.namesrvs:
            return 0
        body = RegisterBrokerBody(self._topics()).to_json()
        results = await asyncio.gather(*(self._register(a, body) for a in self.namesrvs))
        ok = sum(results)
        self.registrations += ok
        return ok

    def _header_fields(self) -> dict[str, str]:
        cfg = self.config
        addr = self._broker_addr()
        host, _, port = addr.rpartition(":")
        return RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=addr, cluster_name=cfg.broker_cluster_name,
            ha_server_addr=f"{host}:{int(port) + 1}", broker_id=cfg.broker_id, compressed=False,
        ).to_ext_fields()

    async def _register(self, namesrv: str, body: bytes) -> bool:
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, self._header_fields(), body)
        try:
            resp = await self.client.invoke(namesrv, cmd, self.config.register_broker_timeout_ms / 1000)
        except OrbitMQError as e:
            log.warning("register broker failed namesrv=%s err=%s", namesrv, e)
            return False
        if resp.code != ResponseCode.SUCCESS:
            log.warning("register broker refused namesrv=%s code=%d remark=%s", namesrv, resp.code, resp.remark)
            return False
        return True

    async def _unregister(self, namesrv: str) -> None:
        cfg = self.config
        fields = UnregisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=self._broker_addr(),
            cluster_name=cfg.broker_cluster_name, broker_id=cfg.broker_id,
        ).to_ext_fields()
        try:
            await self.client.invoke(namesrv, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), 3.0)
        except OrbitMQError as e:
            log.warning("unregister broker failed namesrv=%s err=%s", namesrv, e)
