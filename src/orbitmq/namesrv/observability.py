"""The name server's metrics: sampled ``rocketmq_rpc_latency`` and what it knows of the cluster.

Labels start with ``node_type="nameserver"`` and ``node_id`` (the address it listens on); a name
server belongs to no cluster, so it has no ``cluster`` label. Families:

- ``rocketmq_rpc_latency`` (ms, histogram, sampled as the broker's);
- ``orbitmq_namesrv_brokers`` (gauge, label ``cluster``): live broker addresses per cluster;
- ``orbitmq_namesrv_topics`` (gauge): topics with a route;
- ``orbitmq_namesrv_registrations_total`` (counter, label ``kind``): registrations received:
  ``broker`` (whole tables), ``topic`` and ``topic_delete`` (one topic each), ``version_query``
  and ``version_changed`` (the queries answered "changed", each followed by a whole table);
- ``rocketmq_authentication_failures_total``, ``rocketmq_authorization_denials_total``
  (counters, label ``reason``): requests access control refused (the audit log's counters).

A name server with ``metrics_exporter_type = PROM`` serves them on its own endpoint; in
``orbitmq standalone`` they are served by the broker's endpoint (:meth:`export_through`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from orbitmq.config import MetricsExporterType, NamesrvConfig
from orbitmq.metrics.rpc import RpcLatency
from orbitmq.namesrv.route_table import RouteTable
from orbitmq.security.audit import AuditLog
from orbitmq.security.tls import ServerTls
from orbitmq.transport.server import RemotingServer

__all__ = ["NamesrvObservability"]


class NamesrvObservability:
    """Request timings and route figures of one name server, and its endpoint if configured."""

    def __init__(self, config: NamesrvConfig, server: RemotingServer, routes: RouteTable,
                 audit: AuditLog | None = None,
                 registrations: Mapping[str, int] | None = None) -> None:
        self.config = config
        self.registrations = registrations if registrations is not None else {}
        self.server = server
        self.routes = routes
        self.audit = audit
        self.rpc: RpcLatency | None = None
        self.exporter: Any = None
        if config.metrics_exporter_type == MetricsExporterType.PROM:
            self._sample(config.metrics_rpc_latency_sample_every)

    def _sample(self, every: int) -> None:
        self.rpc = RpcLatency(every)
        self.server.sample_requests(every, self.rpc.record)

    def export_through(self, other: Any, sample_every: int) -> None:
        """Serve these families on another server's endpoint (anything with ``add_source``:
        the broker's observability in standalone), sampling one request in ``sample_every``."""
        if self.rpc is None:
            self._sample(sample_every)
        other.add_source(self.collect)

    async def start(self) -> None:
        if self.config.metrics_exporter_type != MetricsExporterType.PROM:
            return
        from orbitmq.metrics.exporter import MetricsExporter

        cfg = self.config
        self.exporter = MetricsExporter(cfg.metrics_prom_exporter_host or cfg.listen_host,
                                        cfg.metrics_prom_exporter_port, token=cfg.metrics_token,
                                        tls=ServerTls.of(cfg))
        self.exporter.add_source(self.collect)
        await self.exporter.start()

    async def stop(self) -> None:
        if self.exporter is not None:
            await self.exporter.stop()

    def collect(self) -> Iterator[Any]:
        from orbitmq.metrics.families import (
            Families,
            access_families,
            limit_families,
            rpc_latency_family,
        )

        f = Families({"node_type": "nameserver", "node_id": self.server.address})
        if self.rpc is not None:
            yield rpc_latency_family(f, self.rpc)
        brokers, clusters = self.routes.cluster_info()
        live = set(self.routes.live_broker_addrs())
        gauge = f.gauge("orbitmq_namesrv_brokers", "live broker addresses by cluster",
                        ["cluster"])
        for cluster, names in sorted(clusters.items()):
            addrs = {a for n in names if n in brokers for a in brokers[n][1].values()}
            f.add(gauge, [cluster], len(addrs & live))
        yield gauge
        topics = f.gauge("orbitmq_namesrv_topics", "topics with a route")
        f.add(topics, [], self.routes.topic_count())
        yield topics
        from orbitmq.namesrv.topic_registration import REGISTRATION_KINDS

        received = f.counter("orbitmq_namesrv_registrations_total",
                             "registrations received, by kind", ["kind"])
        for kind in REGISTRATION_KINDS:
            f.add(received, [kind], self.registrations.get(kind, 0))
        yield received
        if self.audit is not None:
            yield from access_families(f, self.audit)
        yield from limit_families(f, self.server)
