"""What OrbitMQ's tests and its users' tests share: servers in-process or as child processes."""

from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.testing.process import ServerProcess, standalone_process

__all__ = ["EmbeddedCluster", "ServerProcess", "standalone_process"]
