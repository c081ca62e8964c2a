"""The admin client's shared core: its connections and the routing every admin area builds on.

:class:`AdminCore` owns the client instance (name server and broker connections, signing, TLS)
and answers the questions each area asks before it sends anything: which masters a cluster has,
which brokers serve a topic, what address a broker name stands for. The per-area modules
(topics, groups, queues, browsing, dead letters, operations, users and ACLs) take an AdminCore;
:class:`~orbitmq.client.AsyncAdmin` holds one and delegates to them. Nothing here
imports an area module, so the areas and the client that assembles them form no circle.

Package-public: the SDK's own admin modules use it; applications use ``orbitmq.client.AsyncAdmin``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orbitmq.client.instance import ClientInstance, check_response
from orbitmq.client.route import MASTER_ID
from orbitmq.client.validation import check_topic
from orbitmq.errors import ClientError, TopicNotFoundError
from orbitmq.protocol.bodies import ClusterInfo, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.signature import Credentials
from orbitmq.security.tls import ClientTls

__all__ = ["AdminCore"]


class AdminCore:
    """Connections and routing of one admin client (asyncio).

    Args: ``namesrv`` addresses, ``timeout`` per request in seconds, ``credentials`` every
    request is signed with (None: unsigned), ``tls`` for every connection (True: the system's
    roots; None: ``ORBITMQ_TLS_*``).
    """

    def __init__(self, namesrv: str | Sequence[str] | None = None, *, timeout: float = 5.0,
                 credentials: Credentials | None = None,
                 tls: ClientTls | bool | None = None) -> None:
        self.timeout = timeout
        self.instance = ClientInstance(namesrv, rpc_timeout=timeout, credentials=credentials,
                                       tls=tls)

    async def start(self) -> None:
        await self.instance.start()

    async def shutdown(self) -> None:
        await self.instance.shutdown()

    # -- requests ------------------------------------------------------------------------------
    async def namesrv_call(self, code: int, header: Any = None) -> RemotingCommand:
        """One request to a name server; the answer unchecked."""
        fields = header.to_ext_fields() if header is not None else None
        return await self.instance.invoke_namesrv(RemotingCommand.request(code, fields))

    async def invoke(self, addr: str, cmd: RemotingCommand) -> RemotingCommand:
        """Send ``cmd`` to the server at ``addr``; the answer unchecked."""
        return await self.instance.remoting.invoke(addr, cmd, self.timeout)

    async def broker_call(self, addr: str, code: int, header: Any = None, *, body: bytes = b"",
                          ok: Sequence[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        """One request to the broker at ``addr``; the answer, whose code must be in ``ok``.

        Raises:
            BrokerError: any other answer code.
        """
        fields = header.to_ext_fields() if header is not None else None
        return check_response(await self.invoke(addr, RemotingCommand.request(code, fields, body)),
                              ok)

    # -- routing -------------------------------------------------------------------------------
    async def cluster_info(self) -> ClusterInfo:
        """Brokers by name and broker names by cluster, as a name server knows them."""
        resp = check_response(await self.namesrv_call(RequestCode.GET_BROKER_CLUSTER_INFO))
        return ClusterInfo.from_json(resp.body)

    async def topic_route(self, topic: str) -> TopicRouteData:
        """The topic's route.

        Raises:
            TopicNotFoundError: there is none.
        """
        route = await self.instance.fetch_route(check_topic(topic))
        if route is None:
            raise TopicNotFoundError(f"no route for topic {topic!r}")
        return route

    async def masters(self, cluster: str | None) -> dict[str, str]:
        """Broker name -> master address, of one cluster or of all.

        Raises:
            ClientError: an unknown ``cluster``.
        """
        info = await self.cluster_info()
        if cluster is not None and cluster not in info.cluster_addr_table:
            raise ClientError(f"no cluster named {cluster!r}; known: "
                              f"{sorted(info.cluster_addr_table)}")
        names = (info.cluster_addr_table[cluster] if cluster is not None
                 else list(info.broker_addr_table))
        masters = {}
        for name in names:
            bd = info.broker_addr_table.get(name)
            if bd is not None and MASTER_ID in bd.broker_addrs:
                masters[name] = bd.broker_addrs[MASTER_ID]
        return masters

    async def write_masters(self, cluster: str | None) -> dict[str, str]:
        """Broker name -> master address of the brokers a change acts on: the masters of
        ``cluster``; with None, those of the only cluster the name servers know. With several
        clusters and none named the change is refused, naming them (mqadmin needs -c or -b):
        a topic or group change meant for one cluster must not land on every cluster.

        Raises:
            ClientError: several clusters and no ``cluster``, or an unknown ``cluster``.
        """
        if cluster is None:
            clusters = sorted((await self.cluster_info()).cluster_addr_table)
            if len(clusters) > 1:
                raise ClientError(f"the name servers know {len(clusters)} clusters "
                                  f"({', '.join(clusters)}): name the one to change "
                                  f"(cluster=..., CLI --cluster)")
        return await self.masters(cluster)

    async def route_masters(self, topic: str) -> tuple[TopicRouteData, dict[str, str]]:
        """The topic's route and its broker name -> master address."""
        route = await self.topic_route(topic)
        masters = {bd.broker_name: bd.broker_addrs[MASTER_ID]
                   for bd in route.broker_datas if MASTER_ID in bd.broker_addrs}
        return route, masters

    async def route_readers(self, topic: str) -> tuple[TopicRouteData, dict[str, str]]:
        """Broker name -> the broker to read from: the master, else the slave of the lowest id
        (a slave holds the master's messages at the same offsets; reads go on while its
        master is gone, as RocketMQ's clients do)."""
        route = await self.topic_route(topic)
        readers = {bd.broker_name: bd.broker_addrs[min(bd.broker_addrs)]
                   for bd in route.broker_datas if bd.broker_addrs}
        return route, readers

    async def broker_address(self, broker: str) -> str:
        """``broker`` as an address: a broker name's master, or ``host:port`` as given.

        Raises:
            ClientError: a name no name server knows, or a broker without a master.
        """
        if ":" in broker:
            return broker
        masters = await self.masters(None)
        if broker not in masters:
            raise ClientError(f"no broker named {broker!r} with a master; known: {sorted(masters)}")
        return masters[broker]
