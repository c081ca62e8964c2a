"""What the broker counts and how it is exported: the traffic counters (always on: the runtime
info's rates need them) and, with ``metrics_exporter_type = PROM``, the sampled request timings,
the group-commit sync timings and the ``/metrics`` endpoint.

With DISABLE nothing of prometheus_client is imported and the transport times nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from orbitmq.broker.observability.broker_stats import BrokerStats
from orbitmq.config import BrokerConfig, MetricsExporterType
from orbitmq.metrics.rpc import RpcLatency
from orbitmq.security.tls import ServerTls
from orbitmq.store.message_store import MessageStore
from orbitmq.transport.server import RemotingServer

__all__ = ["BrokerObservability", "TICK_INTERVAL_S"]

log = logging.getLogger(__name__)

TICK_INTERVAL_S = 1.0  # the runtime info's rates are over 10 s, 1 min and 10 min of 1 s samples


class BrokerObservability:
    """The broker's counters and, when configured, its metrics endpoint.

    Args:
        config: the broker's settings (metrics fields, identity labels, listen host).
        stats: the counters the send and pull handlers update.
        server: the broker's RemotingServer (its requests are sampled for rpc latency).
        store: the message store (group-commit sync timings, storage figures).
        collector_parts: the tables the Prometheus collector reads, by keyword (see
            BrokerMetricsCollector): topics, offsets, clients, held_pulls, replication, audit.
    """

    def __init__(self, config: BrokerConfig, stats: BrokerStats, server: RemotingServer,
                 store: MessageStore, **collector_parts: Any) -> None:
        self.config = config
        self.stats = stats
        self.store = store
        self._parts = collector_parts
        self._task: asyncio.Task[None] | None = None
        self.exporter: Any = None  # MetricsExporter once started with PROM
        self.rpc: RpcLatency | None = None
        if config.metrics_exporter_type == MetricsExporterType.PROM:
            self.rpc = RpcLatency(config.metrics_rpc_latency_sample_every)
            server.sample_requests(self.rpc.sample_every, self.rpc.record)
            store.group_commit.on_sync = self._synced

    def _synced(self, seconds: float) -> None:
        self.stats.flush_latency.observe(seconds * 1000.0)

    async def start(self) -> None:
        """Start sampling, and serving ``/metrics`` when configured (OSError: port taken)."""
        self._task = asyncio.get_running_loop().create_task(self._ticks())
        if self.rpc is None:
            return
        from orbitmq.broker.observability.metrics_collector import BrokerMetricsCollector
        from orbitmq.metrics.exporter import MetricsExporter

        cfg = self.config
        self.exporter = MetricsExporter(cfg.metrics_prom_exporter_host or cfg.listen_host,
                                        cfg.metrics_prom_exporter_port, token=cfg.metrics_token,
                                        tls=ServerTls.of(cfg))
        collector = BrokerMetricsCollector(cfg, self.stats, self.store, rpc=self.rpc,
                                           **self._parts)
        self.exporter.add_source(collector.collect)
        try:
            await self.exporter.start()
        except BaseException:
            await self._stop_ticks()
            raise

    def add_source(self, collect: Callable[[], Any]) -> None:
        """More families on this broker's endpoint (standalone: the name server's)."""
        if self.exporter is not None:
            self.exporter.add_source(collect)

    async def stop(self) -> None:
        await self._stop_ticks()
        if self.exporter is not None:
            await self.exporter.stop()

    async def _stop_ticks(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(TICK_INTERVAL_S)
            try:
                self.stats.tick()
            except Exception:
                log.exception("stats sampling failed")
