"""Prometheus metric families built at scrape time from OrbitMQ's plain counters.

Every family carries the server's identity labels first (RocketMQ 5's ``cluster``,
``node_type``, ``node_id``), then its own. Imports prometheus_client: only servers that export
metrics import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from orbitmq.metrics.buckets import Buckets
from orbitmq.metrics.rpc import RpcLatency, request_code_label, response_code_label
from orbitmq.security.audit import AuditLog

__all__ = ["Families", "rpc_latency_family", "access_families", "limit_families",
           "PROTOCOL_REMOTING"]

PROTOCOL_REMOTING = "remoting"  # RocketMQ's protocol_type label for the TCP remoting protocol


class Families:
    """Makes families whose first labels are ``identity`` (label -> value, same for all)."""

    def __init__(self, identity: Mapping[str, str]) -> None:
        self.names = tuple(identity)
        self.values = tuple(identity.values())

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=[*self.names, *labels])

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=[*self.names, *labels])

    def histogram(self, name: str, doc: str, labels: Sequence[str] = ()) -> HistogramMetricFamily:
        return HistogramMetricFamily(name, doc, labels=[*self.names, *labels])

    def add(self, family: CounterMetricFamily | GaugeMetricFamily, labels: Sequence[str],
            value: float) -> None:
        family.add_metric([*self.values, *labels], value)

    def add_buckets(self, family: HistogramMetricFamily, labels: Sequence[str],
                    buckets: Buckets) -> None:
        """One labelled histogram from ``buckets`` (its ``+Inf`` count is the sample count)."""
        cumulative = [(floatToGoString(le), n) for le, n in buckets.cumulative()]
        family.add_metric([*self.values, *labels], cumulative, buckets.sum)


def rpc_latency_family(families: Families, rpc: RpcLatency) -> HistogramMetricFamily:
    """``rocketmq_rpc_latency`` (ms) with RocketMQ's ``protocol_type``, ``request_code`` and
    ``response_code`` labels (see :mod:`orbitmq.metrics.rpc` for the sampling)."""
    family = families.histogram(
        "rocketmq_rpc_latency",
        f"time to answer a request in ms (sampled: 1 request in {rpc.sample_every})",
        ["protocol_type", "request_code", "response_code"])
    for (request, response), buckets in list(rpc.series.items()):
        families.add_buckets(family, [PROTOCOL_REMOTING, request_code_label(request),
                                      response_code_label(response)], buckets)
    return family


def access_families(families: Families, audit: AuditLog) -> Iterator[CounterMetricFamily]:
    """``rocketmq_authentication_failures_total`` and ``rocketmq_authorization_denials_total``,
    by ``reason`` (``bad_signature``, ``unknown_user``, ``no_rule``, ...: the audit log's
    labels; never a user name or a secret)."""
    for name, doc, counts in (
            ("rocketmq_authentication_failures_total",
             "requests refused because their credentials did not hold", audit.authentication_failures),
            ("rocketmq_authorization_denials_total",
             "requests of an authenticated user refused by the access rules",
             audit.authorization_denials)):
        family = families.counter(name, doc, ["reason"])
        for reason, count in sorted(counts.items()):
            families.add(family, [reason], count)
        yield family


def limit_families(families: Families, server: LimitedServer) -> Iterator[Any]:
    """``orbitmq_limit_hits_total`` by ``limit`` (transport/limits.py's names: what each limit
    refused or closed), and the gauges ``orbitmq_remoting_connections`` and
    ``orbitmq_frame_buffer_bytes`` (what partial frames hold) of one remoting server."""
    hits = families.counter("orbitmq_limit_hits_total",
                            "connections, frames or requests a limit refused or closed "
                            "(docs/limits.md)", ["limit"])
    for name, count in list(server.limit_counters.counts.items()):
        families.add(hits, [name], count)
    yield hits
    connections = families.gauge("orbitmq_remoting_connections",
                                 "connections open on the remoting port")
    families.add(connections, [], server.gate.total)
    yield connections
    held = families.gauge("orbitmq_frame_buffer_bytes",
                          "bytes partial frames hold (bounded by frame_buffer_budget_mb)")
    families.add(held, [], server.budget.held_bytes)
    yield held


class _Counts(Protocol):
    @property
    def counts(self) -> Mapping[str, int]: ...


class _Gate(Protocol):
    @property
    def total(self) -> int: ...


class _Budget(Protocol):
    @property
    def held_bytes(self) -> int: ...


class LimitedServer(Protocol):
    """What limit_families reads of a RemotingServer (transport/server.py), by shape: metrics
    know nothing of the transport."""

    @property
    def limit_counters(self) -> _Counts: ...

    @property
    def gate(self) -> _Gate: ...

    @property
    def budget(self) -> _Budget: ...


class CallbackCollector(Collector):
    """A prometheus_client collector whose families come from a callable (run per scrape)."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()

    def describe(self) -> list[Metric]:
        return []  # nothing is collected at registration
