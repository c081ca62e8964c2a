"""Master/slave replication (docs/replication.md): the HA stream, the SYNC_MASTER condition, a
slave's table copy. :class:`ReplicationService` is what the broker runs."""

from orbitmq.broker.replication.progress import ReplicaProgress, SlaveLink
from orbitmq.broker.replication.replica_ack import ReplicaAck
from orbitmq.broker.replication.service import ReplicationService

__all__ = ["ReplicationService", "ReplicaProgress", "SlaveLink", "ReplicaAck"]
