"""Metrics shared by the broker and the name server.

- :mod:`~orbitmq.metrics.buckets`: histograms as plain integers, updated on hot paths;
- :mod:`~orbitmq.metrics.rpc`: the sampled ``rocketmq_rpc_latency`` recorder;
- :mod:`~orbitmq.metrics.families`: turns counters into Prometheus metric families at scrape
  time (imports prometheus_client);
- :mod:`~orbitmq.metrics.exporter`: the ``/metrics`` HTTP endpoint on the server's event loop.

Nothing here is imported by a server whose ``metrics_exporter_type`` is DISABLE except the
first two, which are pure Python.
"""

from orbitmq.metrics.buckets import Buckets
from orbitmq.metrics.rpc import RpcLatency

__all__ = ["Buckets", "RpcLatency"]
