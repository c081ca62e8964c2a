"""``rocketmq_rpc_latency``: how long a server takes to answer, by request and response code.

The transport times one request in ``sample_every`` (``RemotingServer.sample_requests``) and
hands each timing here; a sampled request stands for ``sample_every`` requests, so the
histogram's counts estimate all requests while the hot path pays for one clock read in
``sample_every``. Codes are labelled as RocketMQ labels them: the lower-case name of the
request code and of the response code (``send_message_v2``, ``success``), the number for a code
without a name. A handler that writes its own answer (a pull sends the stored bytes itself) is
labelled ``response_code="unknown"``: the transport does not see that answer.
"""

from __future__ import annotations

import enum
import functools

from orbitmq.metrics.buckets import RPC_LATENCY_BOUNDS_MS, Buckets
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode

__all__ = ["RpcLatency", "request_code_label", "response_code_label", "RPC_SERIES_MAX"]

RPC_SERIES_MAX = 2048  # (request code, response code) pairs kept; later pairs are not recorded


@functools.lru_cache(maxsize=1024)
def request_code_label(code: int) -> str:
    """RocketMQ's label for a request code: its name in lower case, else the number."""
    for kind in (RequestCode, OrbitMQRequestCode):
        try:
            return kind(code).name.lower()
        except ValueError:
            continue
    return str(code)


@functools.lru_cache(maxsize=256)
def response_code_label(code: int | None) -> str:
    """RocketMQ's label for a response code; ``unknown`` when the handler answered itself."""
    if code is None:
        return "unknown"
    try:
        member: enum.IntEnum = ResponseCode(code)
    except ValueError:
        return str(code)
    return member.name.lower()


class RpcLatency:
    """Sampled request timings by (request code, response code), in milliseconds.

    Args:
        sample_every: the transport times one request in this many; each timing counts for
            this many requests.
    """

    def __init__(self, sample_every: int) -> None:
        if sample_every < 1:
            raise ValueError("sample_every must be at least 1")
        self.sample_every = sample_every
        self.series: dict[tuple[int, int | None], Buckets] = {}
        self.dropped = 0  # timings of pairs past RPC_SERIES_MAX

    def record(self, request_code: int, response_code: int | None, seconds: float) -> None:
        """One sampled request (called by the transport on the event loop)."""
        key = (request_code, response_code)
        buckets = self.series.get(key)
        if buckets is None:
            if len(self.series) >= RPC_SERIES_MAX:
                self.dropped += 1
                return
            buckets = self.series[key] = Buckets(RPC_LATENCY_BOUNDS_MS)
        buckets.observe(seconds * 1000.0, self.sample_every)
