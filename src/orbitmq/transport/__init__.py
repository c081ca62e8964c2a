"""Thin asyncio shells around the sans-I/O protocol: server, client and connection."""

from orbitmq.transport.client import RemotingClient
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.loop import LoopThread, new_event_loop, run
from orbitmq.transport.server import RemotingServer

__all__ = ["RemotingClient", "RemotingConnection", "RemotingServer", "LoopThread", "new_event_loop", "run"]
