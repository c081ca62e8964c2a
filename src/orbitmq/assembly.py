"""The server assembly: a broker with the fronts its settings ask for.

The broker (orbitmq.broker) serves the remoting protocol and does not import its other
fronts; the gRPC endpoint (orbitmq.grpc) builds on the broker's context and services. This
module, above both, builds a :class:`~orbitmq.broker.controller.BrokerController` and mounts
the gRPC endpoint on it when ``grpc_listen_port`` is 0 or more. grpcio and protobuf are
imported only then. The CLI's server commands, the embedded test cluster and the benchmarks
build their brokers here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orbitmq.broker.controller import BrokerController
from orbitmq.broker.fronts import GRPC_FRONT
from orbitmq.config import BrokerConfig
from orbitmq.security.registry import AuthRegistry

if TYPE_CHECKING:
    from orbitmq.grpc.endpoint import GrpcEndpoint

__all__ = ["GRPC", "build_broker", "grpc_endpoint", "mount_grpc"]

GRPC = GRPC_FRONT  # the gRPC endpoint's name among the broker's services and fronts


def build_broker(config: BrokerConfig, *,
                 auth_registry: AuthRegistry | None = None) -> BrokerController:
    """A broker (not started) with the gRPC endpoint mounted when ``config.grpc_listen_port``
    is 0 or more. ``auth_registry``: as BrokerController's."""
    broker = BrokerController(config, auth_registry=auth_registry)
    if broker.config.grpc_listen_port >= 0:
        mount_grpc(broker)
    return broker


def mount_grpc(broker: BrokerController) -> GrpcEndpoint:
    """Build the gRPC endpoint over ``broker``'s context and services, and run it with the
    broker (started after the broker's parts, stopped before them)."""
    from orbitmq.grpc.endpoint import GrpcEndpoint
    from orbitmq.grpc.produce import Producing

    parts = broker.front_parts()
    producing = Producing(parts.ctx, parts.timer, parts.to_half, parts.end_transaction)
    endpoint = GrpcEndpoint(parts.ctx, parts.pop, producing, parts.guard, parts.lite)
    broker.mount(GRPC, endpoint, scan_clients=endpoint.expire_clients)
    return endpoint


def grpc_endpoint(broker: BrokerController) -> GrpcEndpoint | None:
    """The gRPC endpoint mounted on ``broker`` (None: gRPC off)."""
    front = broker.fronts.get(GRPC)
    if front is None:
        return None
    from orbitmq.grpc.endpoint import GrpcEndpoint

    return front if isinstance(front, GrpcEndpoint) else None
