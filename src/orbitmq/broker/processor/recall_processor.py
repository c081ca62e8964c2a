"""RECALL_MESSAGE (370, RocketMQ 5.3): cancel a timer message that has not been delivered yet.

Header RecallMessageRequestHeader (``topic``, ``recallHandle``, optional ``producerGroup``); the
answer carries ``msgId`` (the recalled message's id) on SUCCESS, or RocketMQ's code and remark
for a refusal (the timer service's :meth:`~orbitmq.broker.timer.timer_service.TimerService.recall`
decides; e.g. ILLEGAL_OPERATION "recall failed, timestamp invalid" for a message whose time has
come). Access control: Pub on the topic (security/access_table.py).
"""

from __future__ import annotations

from orbitmq.broker.timer.timer_service import TimerService
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RecallMessageRequestHeader, RecallMessageResponseHeader
from orbitmq.transport.connection import RemotingConnection

__all__ = ["RecallProcessor"]


class RecallProcessor:
    """The RECALL_MESSAGE handler, over the timer service.

    Args:
        timer: the broker's timer service (which parks timer messages and recalls them).
    """

    def __init__(self, timer: TimerService) -> None:
        self.timer = timer

    async def recall_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = RecallMessageRequestHeader.from_ext_fields(cmd.ext_fields)  # RemoteProtocolError: INVALID_PARAMETER
        ip, _, port = conn.peer.rpartition(":")
        try:
            msg_id = await self.timer.recall(h.topic, h.recall_handle, h.producer_group,
                                             (ip or "127.0.0.1", int(port) if port.isdigit() else 0))
        except BrokerError as e:
            return cmd.response(e.code, e.remark)
        return cmd.response(ResponseCode.SUCCESS, None,
                            RecallMessageResponseHeader(msg_id=msg_id).to_ext_fields())
