"""A client instance: the connections, name servers, routes and heartbeats one SDK object uses.

Every Producer, PullConsumer and Admin owns one. It keeps

- a client id unique per process *and* per object (``ip@pid#random``): containers that share an
  address and a pid (pid 1 everywhere) still get distinct ids, which the broker needs to tell
  consumers of one group apart;
- the name server list (``"host:port;host:port"``), using one at a time and failing over to the
  next when it does not answer;
- a route cache refreshed every ``poll_name_server_interval`` seconds and on demand (a failed send
  asks for a refresh at once, so a dead broker leaves the producer's choices quickly);
- heartbeats to every broker of the known routes every ``heartbeat_broker_interval`` seconds (and
  at once to a broker seen for the first time), carrying the producer and consumer groups; and
  UNREGISTER_CLIENT to each of them at shutdown;
- the handlers of requests the brokers send us (NOTIFY_CONSUMER_IDS_CHANGED now,
  CHECK_TRANSACTION_STATE for the transactional producer later);
- where to read a broker set from (:meth:`read_address`): the broker id the last pull answer
  suggested (RocketMQ's suggestWhichBrokerId), else the master, else a slave; a broker that
  just failed a request is passed over for ``BROKER_DOWN_S``, and while a set is read from a
  slave because its master is missing from the route, the route is fetched again every
  ``MASTER_RECHECK_S`` so that reads (and offset commits) go back to the master once it
  returns. Sends go to masters only.

It is asyncio code bound to the loop it was started on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import secrets
import socket
import time
from collections.abc import Awaitable, Callable, Sequence

from orbitmq.client.route import MASTER_ID, derive_route_from_default
from orbitmq.client.validation import DEFAULT_TOPIC
from orbitmq.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    TimeoutError,
    broker_error,
)
from orbitmq.protocol.bodies import ConsumerData, HeartbeatData, ProducerData, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    NotifyConsumerIdsChangedRequestHeader,
    UnregisterClientRequestHeader,
)
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls
from orbitmq.transport.client import RemotingClient
from orbitmq.transport.connection import HandlerResult, RemotingConnection

__all__ = ["ClientInstance", "parse_namesrv_addrs", "check_response", "local_ip", "RETRIABLE_CODES"]

log = logging.getLogger(__name__)

# Broker answers after which trying again (on another broker) may succeed: the message was not
# stored. RocketMQ's producer retries on the same codes (plus SYSTEM_BUSY, its flow control).
RETRIABLE_CODES = frozenset({
    ResponseCode.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY,
    ResponseCode.SERVICE_NOT_AVAILABLE,
    ResponseCode.TOPIC_NOT_EXIST,
    ResponseCode.NO_PERMISSION,
    ResponseCode.NO_BUYER_ID,
    ResponseCode.NOT_IN_CURRENT_UNIT,
    ResponseCode.FLOW_CONTROL,
})
_NAMESRV_ENV = ("ORBITMQ_NAMESRV_ADDR", "NAMESRV_ADDR")
_UNREGISTER_TIMEOUT_S = 3.0
BROKER_DOWN_S = 5.0  # a broker that failed a request is passed over for reads this long
MASTER_RECHECK_S = 5.0  # the route of a set read from a slave (its master gone) is fetched again

GroupChanged = Callable[[str], None]
ConnectionLost = Callable[[str], None]


class _WatchedRemotingClient(RemotingClient):
    """A RemotingClient that tells its owner the address of every connection it loses (closed by
    the peer, reset, or closed by us), so that state tied to that server can be dropped at once:
    an orderly consumer's queue locks do not survive a broker restart."""

    def __init__(self, on_lost: ConnectionLost, credentials: Credentials | None,
                 tls: ClientTls | None = None) -> None:
        super().__init__(credentials=credentials, tls=tls)
        self._on_lost = on_lost

    def connection_lost(self, conn: RemotingConnection) -> None:
        addrs = [addr for addr, c in self._conns.items() if c is conn]
        super().connection_lost(conn)
        for addr in addrs:
            self._on_lost(addr)


def parse_namesrv_addrs(namesrv: str | Sequence[str] | None) -> list[str]:
    """Name server addresses from ``"a:9876;b:9876"``, a list, or the environment
    (ORBITMQ_NAMESRV_ADDR, then RocketMQ's NAMESRV_ADDR) when None.

    Raises:
        ClientError: no address, or one that is not ``host:port``.
    """
    if namesrv is None:
        namesrv = next((os.environ[k] for k in _NAMESRV_ENV if os.environ.get(k)), None)
        if namesrv is None:
            raise ClientError("no name server: pass namesrv='host:port' or set ORBITMQ_NAMESRV_ADDR")
    items = namesrv.split(";") if isinstance(namesrv, str) else list(namesrv)
    addrs = [a.strip() for a in items if a and a.strip()]
    if not addrs:
        raise ClientError(f"no name server address in {namesrv!r}")
    for addr in addrs:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise ClientError(f"name server address {addr!r} is not host:port")
    return addrs


def local_ip(towards: str | None = None) -> str:
    """This host's IPv4 address as peers see it: the source address of a route ``towards``
    host:port (a UDP connect sends nothing), 127.0.0.1 when that fails."""
    host = towards.rpartition(":")[0] if towards else "8.8.8.8"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            ip = s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    return ip if isinstance(ip, str) and ip.count(".") == 3 else "127.0.0.1"


def check_response(
    resp: RemotingCommand, ok: Sequence[int] = (ResponseCode.SUCCESS,)
) -> RemotingCommand:
    """Returns ``resp`` when its code is one of ``ok``.

    Raises:
        BrokerError: any other code; ``retriable`` set for RETRIABLE_CODES.
    """
    if resp.code in ok:
        return resp
    raise broker_error(resp.code, resp.remark, retriable=resp.code in RETRIABLE_CODES)


@dataclasses.dataclass
class _CachedRoute:
    route: TopicRouteData
    from_default: bool  # TBW102's brokers until the topic gets a route of its own


class ClientInstance:
    """Connections, routes and heartbeats of one SDK object (see the module docstring).

    Args:
        namesrv: name server addresses (``"a:9876;b:9876"`` or a list; None: environment).
        poll_name_server_interval: seconds between route refreshes (RocketMQ: 30).
        heartbeat_broker_interval: seconds between heartbeats (RocketMQ: 30).
        rpc_timeout: seconds to wait for name servers and for heartbeats.
        credentials: what every request to the name servers and brokers is signed with (None:
            unsigned). An instance belongs to one SDK object, so clients with different
            credentials never share a connection.
        tls: TLS for every connection (:class:`orbitmq.ClientTls`; True: the system's roots;
            False: plaintext; None: the environment, ``ORBITMQ_TLS_ENABLE`` and
            ``ORBITMQ_TLS_CLIENT_*``).
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None,
        *,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        rpc_timeout: float = 3.0,
        credentials: Credentials | None = None,
        tls: ClientTls | bool | None = None,
    ) -> None:
        if credentials is not None and not isinstance(credentials, Credentials):
            raise ClientError("credentials must be an orbitmq.Credentials(access_key, secret_key)")
        self.namesrv_addrs = parse_namesrv_addrs(namesrv)
        self.credentials = credentials
        self.ip = local_ip(self.namesrv_addrs[0])
        self.client_id = f"{self.ip}@{os.getpid()}#{secrets.token_hex(6)}"
        self.tls = ClientTls.coerce(tls)
        self.remoting: RemotingClient = _WatchedRemotingClient(self._connection_lost, credentials,
                                                               self.tls)
        self.poll_name_server_interval = poll_name_server_interval
        self.heartbeat_broker_interval = heartbeat_broker_interval
        self.rpc_timeout = rpc_timeout
        self.producer_groups: set[str] = set()
        self.consumers: dict[str, Callable[[], ConsumerData]] = {}
        self._ns_index = random.randrange(len(self.namesrv_addrs))
        self._routes: dict[str, _CachedRoute] = {}
        self._broker_addrs: dict[str, dict[int, str]] = {}
        self._heartbeat_addrs: set[str] = set()  # brokers that know us: unregister there at the end
        self._group_listeners: dict[str, list[GroupChanged]] = {}
        self._lost_listeners: list[ConnectionLost] = []
        self._tasks: set[asyncio.Task[object]] = set()
        self._refreshing: dict[str, asyncio.Task[TopicRouteData | None]] = {}
        self._down: dict[str, float] = {}  # broker address -> monotonic time it is tried again
        self._recheck_at: dict[str, float] = {}  # topic -> when its route may be fetched again
        self._started = False
        self._closed = False
        self.remoting.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the route refresh and heartbeat timers (idempotent)."""
        if self._closed:
            raise ClientError("client instance was shut down; create a new client")
        if self._started:
            return
        self._started = True
        self.schedule_periodic(self.poll_name_server_interval, self.refresh_all_routes)
        self.schedule_periodic(self.heartbeat_broker_interval, self.send_heartbeat_to_all)

    async def shutdown(self) -> None:
        """Unregister from every broker that got a heartbeat, stop timers, close connections."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._unregister_everywhere()
        tasks = list(self._tasks) + list(self._refreshing.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.remoting.close()

    @property
    def running(self) -> bool:
        return self._started and not self._closed

    def _spawn(self, coro: Awaitable[object]) -> asyncio.Task[object]:
        task: asyncio.Task[object] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def schedule_periodic(self, interval: float, action: Callable[[], Awaitable[object]]) -> None:
        """Run ``action`` every ``interval`` seconds until shutdown (failures are logged)."""
        self._spawn(self._every(interval, action))

    async def _every(self, interval: float, action: Callable[[], Awaitable[object]]) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except Exception as e:  # a timer must survive a bad round; the next one retries
                log.warning("client=%s periodic %s failed: %r", self.client_id, action.__name__, e)

    # -- name servers ------------------------------------------------------------------------
    async def invoke_namesrv(self, cmd: RemotingCommand, timeout: float | None = None) -> RemotingCommand:
        """Send ``cmd`` to the current name server, failing over to the next ones in turn.

        Raises:
            ConnectionClosedError or TimeoutError: no name server answered.
        """
        timeout = self.rpc_timeout if timeout is None else timeout
        last: Exception | None = None
        for _ in range(len(self.namesrv_addrs)):
            addr = self.namesrv_addrs[self._ns_index % len(self.namesrv_addrs)]
            try:
                return await self.remoting.invoke(addr, _fresh(cmd), timeout)
            except (ConnectionClosedError, TimeoutError) as e:
                log.warning("name server %s failed: %s; trying the next one", addr, e)
                last = e
                self._ns_index += 1
        assert last is not None
        raise last

    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        """Ask a name server for ``topic``'s route; None when the topic does not exist."""
        cmd = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic).to_ext_fields()
        )
        resp = await self.invoke_namesrv(cmd)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        check_response(resp)
        return TopicRouteData.from_json(resp.body)

    # -- the route cache ---------------------------------------------------------------------
    def cached_route(self, topic: str) -> TopicRouteData | None:
        cached = self._routes.get(topic)
        return cached.route if cached else None

    def is_default_route(self, topic: str) -> bool:
        cached = self._routes.get(topic)
        return bool(cached and cached.from_default)

    async def update_route(self, topic: str) -> TopicRouteData | None:
        """Fetch ``topic``'s route now and cache it; returns the cached route (the old one is kept
        when the name server no longer knows the topic, as RocketMQ does, so a name server that
        restarts empty does not stop the producers)."""
        running = self._refreshing.get(topic)
        if running is None:
            running = asyncio.ensure_future(self._update_route(topic))
            self._refreshing[topic] = running
            running.add_done_callback(lambda task: self._refresh_done(topic, task))
        return await asyncio.shield(running)

    def _refresh_done(self, topic: str, task: asyncio.Task[TopicRouteData | None]) -> None:
        self._refreshing.pop(topic, None)
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter may have been cancelled

    async def _update_route(self, topic: str) -> TopicRouteData | None:
        route = await self.fetch_route(topic)
        if route is not None:
            self._store_route(topic, route, from_default=False)
        return self.cached_route(topic)

    def refresh_route_soon(self, topic: str) -> None:
        """Refresh ``topic``'s route in the background (after a send failed on a broker)."""
        if self.running and topic not in self._refreshing:
            self._spawn(self._quiet(self.update_route(topic)))

    async def route_for_publish(self, topic: str, default_topic_queue_nums: int) -> TopicRouteData | None:
        """The route to send ``topic`` over: its own, or else TBW102's brokers with at most
        ``default_topic_queue_nums`` queues each (the broker then creates the topic)."""
        cached = self._routes.get(topic)
        if cached is not None:
            return cached.route
        route = await self.update_route(topic)
        if route is not None:
            return route
        default = await self.fetch_route(DEFAULT_TOPIC)
        if default is None:
            return None
        derived = derive_route_from_default(default, default_topic_queue_nums)
        self._store_route(topic, derived, from_default=True)
        return derived

    def _store_route(self, topic: str, route: TopicRouteData, *, from_default: bool) -> None:
        old = self._routes.get(topic)
        if old is not None and old.route == route and old.from_default == from_default:
            return
        self._routes[topic] = _CachedRoute(route, from_default)
        self._rebuild_broker_addrs()

    def _rebuild_broker_addrs(self) -> None:
        table: dict[str, dict[int, str]] = {}
        for cached in self._routes.values():
            for bd in cached.route.broker_datas:
                table.setdefault(bd.broker_name, {}).update(bd.broker_addrs)
        self._broker_addrs = table
        new = {a for addrs in table.values() for a in addrs.values()} - self._heartbeat_addrs
        if new and self.running and (self.producer_groups or self.consumers):
            self._spawn(self._quiet(self.send_heartbeat_to_all()))  # brokers new to us

    async def refresh_all_routes(self) -> None:
        """Refresh every cached topic (the periodic task)."""
        for topic in list(self._routes):
            try:
                await self.update_route(topic)
            except (ConnectionClosedError, TimeoutError, BrokerError) as e:
                log.warning("route refresh topic=%s failed: %s", topic, e)

    def broker_addr(self, broker_name: str, *, master_only: bool = True) -> str | None:
        """The address of ``broker_name``'s master (or of any of its nodes when not
        ``master_only`` and the master is unknown), from the cached routes."""
        addrs = self._broker_addrs.get(broker_name)
        if not addrs:
            return None
        if MASTER_ID in addrs:
            return addrs[MASTER_ID]
        return None if master_only else addrs[min(addrs)]

    async def find_broker_addr(self, broker_name: str, topic: str, *, master_only: bool = True) -> str:
        """Like :meth:`broker_addr`, refreshing ``topic``'s route once when the broker is unknown.

        Raises:
            ClientError: the broker is still unknown.
        """
        addr = self.broker_addr(broker_name, master_only=master_only)
        if addr is None:
            await self.update_route(topic)
            addr = self.broker_addr(broker_name, master_only=master_only)
        if addr is None:
            raise ClientError(f"broker {broker_name!r} of topic {topic!r} is not in any route")
        return addr

    # -- reading from masters and slaves ---------------------------------------------------
    def broker_failed(self, addr: str) -> None:
        """A request to ``addr`` failed (connection lost, refused, timed out): reads pass it
        over for BROKER_DOWN_S."""
        self._down[addr] = _now() + BROKER_DOWN_S

    def _reachable(self, addr: str) -> bool:
        until = self._down.get(addr)
        if until is None:
            return True
        if _now() >= until:
            del self._down[addr]
            return True
        return False

    def read_address(self, broker_name: str, prefer_id: int = MASTER_ID) -> tuple[str, int] | None:
        """(address, broker id) to read ``broker_name`` from: ``prefer_id`` (a pull answer's
        suggestion), else the master, else the lowest slave id, passing over brokers that just
        failed (any known node when all did); None when the set is unknown."""
        addrs = self._broker_addrs.get(broker_name)
        if not addrs:
            return None
        for bid in (prefer_id, MASTER_ID, *sorted(addrs)):
            addr = addrs.get(bid)
            if addr is not None and self._reachable(addr):
                return addr, bid
        bid = prefer_id if prefer_id in addrs else (MASTER_ID if MASTER_ID in addrs else min(addrs))
        return addrs[bid], bid

    async def find_read_address(self, broker_name: str, topic: str,
                                prefer_id: int = MASTER_ID) -> tuple[str, int]:
        """Like :meth:`read_address`, refreshing ``topic``'s route once when the set is unknown;
        a set read without its master gets its route fetched again now and then (its master
        may come back).

        Raises:
            ClientError: the broker set is still unknown.
        """
        found = self.read_address(broker_name, prefer_id)
        if found is None:
            await self.update_route(topic)
            found = self.read_address(broker_name, prefer_id)
        if found is None:
            raise ClientError(f"broker {broker_name!r} of topic {topic!r} is not in any route")
        if found[1] != MASTER_ID:
            self._recheck_master(broker_name, topic)
        return found

    def _recheck_master(self, broker_name: str, topic: str) -> None:
        now = _now()
        if now < self._recheck_at.get(topic, 0.0):
            return
        self._recheck_at[topic] = now + min(MASTER_RECHECK_S, self.poll_name_server_interval)
        if MASTER_ID not in self._broker_addrs.get(broker_name, {}):
            self.refresh_route_soon(topic)

    # -- heartbeats --------------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            self.client_id,
            [ProducerData(g) for g in sorted(self.producer_groups)],
            [provide() for provide in self.consumers.values()],
        )

    async def send_heartbeat_to_all(self) -> None:
        """HEART_BEAT to every known broker: masters, and slaves too when we consume."""
        if not (self.producer_groups or self.consumers):
            return
        addrs = {
            addr
            for by_id in self._broker_addrs.values()
            for bid, addr in by_id.items()
            if bid == MASTER_ID or self.consumers
        }
        if not addrs:
            return
        body = self.heartbeat_data().to_json()
        results = await asyncio.gather(
            *(self._heartbeat(addr, body) for addr in sorted(addrs)), return_exceptions=True
        )
        for addr, result in zip(sorted(addrs), results, strict=True):
            if isinstance(result, BaseException):
                log.info("heartbeat to broker %s failed: %r", addr, result)

    async def _heartbeat(self, addr: str, body: bytes) -> None:
        cmd = RemotingCommand.request(RequestCode.HEART_BEAT, body=body)
        check_response(await self.remoting.invoke(addr, cmd, self.rpc_timeout))
        self._heartbeat_addrs.add(addr)

    async def _unregister_everywhere(self) -> None:
        # Only brokers still in our routes: one that left them is gone or has forgotten us, and
        # a hung one would hold shutdown for the whole timeout.
        known = {a for by_id in self._broker_addrs.values() for a in by_id.values()}
        calls = []
        for addr in sorted(self._heartbeat_addrs & known):
            for group in sorted(self.producer_groups):
                calls.append(self._unregister(addr, UnregisterClientRequestHeader(
                    self.client_id, producer_group=group)))
            for group in sorted(self.consumers):
                calls.append(self._unregister(addr, UnregisterClientRequestHeader(
                    self.client_id, consumer_group=group)))
        await asyncio.gather(*calls, return_exceptions=True)

    async def _unregister(self, addr: str, header: UnregisterClientRequestHeader) -> None:
        cmd = RemotingCommand.request(RequestCode.UNREGISTER_CLIENT, header.to_ext_fields())
        try:
            check_response(await self.remoting.invoke(addr, cmd, _UNREGISTER_TIMEOUT_S))
        except Exception as e:  # the broker drops us after its idle timeout anyway
            log.info("unregister from %s failed: %r", addr, e)

    # -- requests from brokers ---------------------------------------------------------------
    def register_request_handler(
        self, code: int, handler: Callable[[RemotingCommand, RemotingConnection], HandlerResult]
    ) -> None:
        """Answer requests with ``code`` that brokers send us (CHECK_TRANSACTION_STATE, ...)."""
        self.remoting.register(code, handler)

    def on_connection_lost(self, listener: ConnectionLost) -> None:
        """Call ``listener(addr)`` when the connection to a server (``host:port``) is lost."""
        self._lost_listeners.append(listener)

    def _connection_lost(self, addr: str) -> None:
        for listener in self._lost_listeners:
            try:
                listener(addr)
            except Exception:
                log.exception("connection lost listener failed addr=%s", addr)

    def on_consumer_ids_changed(self, group: str, listener: GroupChanged) -> None:
        """Call ``listener(group)`` when a broker says ``group``'s membership changed."""
        self._group_listeners.setdefault(group, []).append(listener)

    def _on_ids_changed(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        header = NotifyConsumerIdsChangedRequestHeader.from_ext_fields(cmd.ext_fields)
        log.info("consumer ids changed group=%s from=%s", header.consumer_group, conn.peer)
        for listener in self._group_listeners.get(header.consumer_group, ()):
            try:
                listener(header.consumer_group)
            except Exception:
                log.exception("consumer ids listener failed group=%s", header.consumer_group)
        return cmd.response(ResponseCode.SUCCESS)  # dropped by the connection when oneway

    @staticmethod
    async def _quiet(aw: Awaitable[object]) -> None:
        try:
            await aw
        except Exception as e:
            log.info("background client task failed: %r", e)


def _now() -> float:
    return time.monotonic()


def _fresh(cmd: RemotingCommand) -> RemotingCommand:
    """A copy of ``cmd`` to resend: each send gets its own opaque and flag bits."""
    return RemotingCommand(
        cmd.code, flag=0, language=cmd.language, version=cmd.version, remark=cmd.remark,
        ext_fields=dict(cmd.ext_fields), body=cmd.body, serialize_type=cmd.serialize_type,
    )
