"""What a slave copies and what tools ask of replication: GET_ALL_DELAY_OFFSET (45, the delay
offsets, in delayOffset.json's shape) and GET_BROKER_HA_STATUS (907, RocketMQ 5: the HA
status as JSON)."""

from __future__ import annotations

import orjson

from orbitmq.broker.replication import ReplicationService
from orbitmq.broker.schedule_service import ScheduleService
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport.connection import RemotingConnection

__all__ = ["ReplicaProcessor"]


class ReplicaProcessor:
    """The two handlers over the delay-level service and the replication service."""

    def __init__(self, schedule: ScheduleService, replication: ReplicationService) -> None:
        self.schedule = schedule
        self.replication = replication

    def get_all_delay_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_ALL_DELAY_OFFSET (45): the delay offsets, in delayOffset.json's shape."""
        return cmd.response(ResponseCode.SUCCESS, body=self.schedule.encode())

    def get_broker_ha_status(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """GET_BROKER_HA_STATUS (907, RocketMQ 5): the replication's ``ha_status`` as JSON."""
        return cmd.response(ResponseCode.SUCCESS, body=orjson.dumps(self.replication.ha_status()))
