"""The name server: broker registry and topic routes."""

from orbitmq.namesrv.route_table import RouteTable
from orbitmq.namesrv.server import NameServer

__all__ = ["NameServer", "RouteTable"]
