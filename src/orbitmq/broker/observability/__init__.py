"""What the broker tells about itself: its counters (broker_stats.py), the periodic sampling and
the ``/metrics`` endpoint (service.py), and the collector that fills the endpoint
(metrics_collector.py)."""
