"""The name server: request handlers over a :class:`RouteTable`, and its lifecycle.

A REGISTER_BROKER of a broker name and id that another live address holds is refused with
ILLEGAL_OPERATION and a remark naming the holder (see route_table); malformed requests are
answered INVALID_PARAMETER naming the field, by the transport. One topic at a time and the
data version check: topic_registration. A compressed body (RocketMQ's ``compressed`` flag) is
inflated up to ``register_body_decompressed_max_bytes`` (LIMIT_EXCEEDED past it), and a body whose
``bodyCrc32`` differs is answered SYSTEM_ERROR "crc32 not match" (protocol/register_body.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from orbitmq.config import NamesrvConfig
from orbitmq.namesrv.admin_handlers import NamesrvAdminHandlers
from orbitmq.namesrv.observability import NamesrvObservability
from orbitmq.namesrv.route_table import RouteTable, TopicQueues
from orbitmq.namesrv.topic_registration import TopicRegistrationHandlers
from orbitmq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    QueueData,
    RegisterBrokerBody,
    TopicConfigSerializeWrapper,
    TopicList,
    TopicRouteData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from orbitmq.protocol.register_body import RegisterBodyTooLarge, body_crc32, decode_compressed
from orbitmq.security.registry import AuthRegistry
from orbitmq.security.server_access import build_server_access, check_exposure
from orbitmq.security.tls import ServerTls
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.limits import ConnectionLimits
from orbitmq.transport.server import RemotingServer

__all__ = ["NameServer"]

log = logging.getLogger(__name__)


def _wall_ms() -> int:
    return int(time.time() * 1000)


class NameServer:
    """Broker registry and topic routes, rebuilt from broker registrations (memory only)."""

    def __init__(self, config: NamesrvConfig | None = None, *, clock: Callable[[], int] = _wall_ms,
                 auth_registry: AuthRegistry | None = None) -> None:
        """``auth_registry``: users and ACLs shared with a broker of this process (standalone);
        otherwise the name server keeps its own in ``auth_config_path``."""
        self.config = config or NamesrvConfig()
        self.routes = RouteTable()
        self._clock = clock
        self.server = RemotingServer(
            self.config.listen_host, self.config.listen_port, name="namesrv",
            limits=ConnectionLimits.of(self.config), tls=ServerTls.of(self.config),
        )
        self.server.on_discount(self.routes.discount)  # a pause or a clock step: no silence
        self._broker_conns: dict[RemotingConnection, str] = {}
        self._scan_task: asyncio.Task[None] | None = None
        s = self.server
        s.register(RequestCode.REGISTER_BROKER, self._register_broker)
        s.register(RequestCode.UNREGISTER_BROKER, self._unregister_broker)
        s.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._get_route)
        s.register(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        s.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._topic_list)
        self.topic_registration = TopicRegistrationHandlers(self.routes, self._clock,
                                                            self._note_broker_conn)
        self.topic_registration.register(s)  # 216, 217 and 322 (incremental registration)
        NamesrvAdminHandlers(self.routes).register(s)
        cfg = self.config
        self.access = build_server_access(
            cfg, cluster_name="",
            registry=auth_registry if auth_registry is not None
            else AuthRegistry(cfg.auth_config_path or None))
        self.access.load()  # StoreError: the users file cannot be read
        if cfg.authentication_enabled:
            s.set_guard(self.access.guard.check)
        if auth_registry is None and cfg.auth_config_path:  # one place to administer users
            for code, handler in self.access.admin.table().items():
                s.register(code, handler)
        s.on_connection_closed(self._connection_closed)
        self.observability = NamesrvObservability(self.config, s, self.routes,
                                                  audit=self.access.guard.audit,
                                                  registrations=self.topic_registration.counts)

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        check_exposure(self.config, self.config.listen_host, "the name server")
        await self.server.start()
        try:
            await self.observability.start()  # OSError: the metrics port is taken
        except BaseException:
            await self.server.stop()
            raise
        self._scan_task = asyncio.create_task(self._scan_loop())
        log.info("orbitmq namesrv ready on %s", self.address)

    async def stop(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            await asyncio.gather(self._scan_task, return_exceptions=True)
        await self.observability.stop()
        await self.server.stop()

    async def _scan_loop(self) -> None:
        interval = self.config.scan_not_active_broker_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            self.server.check_stall()  # a stall's time counts for no broker's silence
            self.routes.expire(self._clock(), self.config.broker_expire_ms)

    # -- handlers ---------------------------------------------------------------------------
    def _register_broker(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        if h.body_crc32 != 0 and body_crc32(cmd.body) != h.body_crc32:  # RocketMQ's check
            log.warning("REGISTER_BROKER from %s: body crc32 does not match its header's",
                        h.broker_addr)
            return cmd.response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        try:
            wrapper = (decode_compressed(cmd.body, self.config.register_body_decompressed_max_bytes)[0]
                       if h.compressed and cmd.body else _parse_register_body(cmd.body))
        except RegisterBodyTooLarge as e:  # a small frame must not inflate without bound
            log.warning("REGISTER_BROKER from %s refused: %s", h.broker_addr, e)
            return cmd.response(ResponseCode.LIMIT_EXCEEDED, str(e))
        topics = {
            name: TopicQueues(tc.read_queue_nums, tc.write_queue_nums, tc.perm, tc.topic_sys_flag)
            for name, tc in wrapper.topic_config_table.items()
        }
        result = self.routes.register_broker(
            cluster=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr,
            topics=topics,
            now_ms=self._clock(),
            expire_ms=self.config.broker_expire_ms,
            master_epoch=h.master_epoch or 0,
            data_version=(wrapper.data_version.timestamp, wrapper.data_version.counter),
        )  # BrokerError (ILLEGAL_OPERATION) when another live broker holds this name and id
        self.topic_registration.counts["broker"] += 1
        self._broker_conns[conn] = h.broker_addr
        resp = RegisterBrokerResponseHeader(
            ha_server_addr=result.ha_server_addr, master_addr=result.master_addr
        )
        return cmd.response(ResponseCode.SUCCESS, ext_fields=resp.to_ext_fields())

    def _unregister_broker(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = UnregisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        self.routes.unregister_broker(
            broker_addr=h.broker_addr, broker_name=h.broker_name, broker_id=h.broker_id
        )
        self._broker_conns.pop(conn, None)
        return cmd.response(ResponseCode.SUCCESS)

    def _get_route(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        found = self.routes.topic_route(h.topic)
        if found is None:
            return cmd.response(
                ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {h.topic}"
            )
        queues, brokers = found
        route = TopicRouteData(
            queue_datas=[
                QueueData(name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag)
                for name, q in sorted(queues.items())
            ],
            broker_datas=[
                BrokerData(cluster, name, addrs) for name, (cluster, addrs) in sorted(brokers.items())
            ],
        )
        return cmd.response(ResponseCode.SUCCESS, body=route.to_json())

    def _cluster_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        brokers, clusters = self.routes.cluster_info()
        info = ClusterInfo(
            broker_addr_table={n: BrokerData(c, n, a) for n, (c, a) in brokers.items()},
            cluster_addr_table={c: sorted(names) for c, names in clusters.items()},
        )
        return cmd.response(ResponseCode.SUCCESS, body=info.to_json())

    def _topic_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, body=TopicList(self.routes.topics()).to_json())

    def _note_broker_conn(self, conn: RemotingConnection, broker_addr: str) -> None:
        self._broker_conns[conn] = broker_addr

    def _connection_closed(self, conn: RemotingConnection) -> None:
        addr = self._broker_conns.pop(conn, None)
        if addr is not None:
            log.info("broker connection closed addr=%s; removing its routes", addr)
            self.routes.remove_broker_addr(addr)


def _parse_register_body(body: bytes | memoryview) -> TopicConfigSerializeWrapper:
    """REGISTER_BROKER bodies come as RegisterBrokerBody (Java 4.x) or a bare wrapper."""
    if not body:
        return TopicConfigSerializeWrapper()
    reg = RegisterBrokerBody.from_json(bytes(body))
    if reg.topic_config_serialize_wrapper.topic_config_table:
        return reg.topic_config_serialize_wrapper
    return TopicConfigSerializeWrapper.from_json(bytes(body))
