"""LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): orderly consumers' queue locks, kept by the
lock table (tables/queue_lock_manager.py, which says how locks live and when they go)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable

from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.broker.tables.queue_lock_manager import QueueLockManager
from orbitmq.protocol.bodies import (
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.transport.connection import HandlerResult, RemotingConnection
from orbitmq.transport.server import Handler

__all__ = ["LockProcessor"]


class LockProcessor:
    """The lock handlers over the broker's lock table and client tables."""

    def __init__(self, locks: QueueLockManager, clients: ClientManager) -> None:
        self.locks = locks
        self.clients = clients

    def releasing(self, handler: Handler) -> Handler:
        """``handler`` (UNREGISTER_CLIENT), followed by the release of the locks of every client
        it took out of a group."""

        def run(cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
            members = self.locks.members_on(conn, self.clients)
            result = handler(cmd, conn)
            if inspect.isawaitable(result):
                return finish(result, members)
            self.locks.release_departed(members, self.clients)
            return result

        async def finish(pending: Awaitable[RemotingCommand | None],
                         members: list[tuple[str, str]]) -> RemotingCommand | None:
            answer = await pending
            self.locks.release_departed(members, self.clients)
            return answer

        return run

    def lock_batch_mq(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        if not cmd.body:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "LOCK_BATCH_MQ without a body")
        body = LockBatchRequestBody.from_json(cmd.body)
        refused = self.locks.refusal(body.consumer_group, body.client_id, body.mq_set)
        if refused is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, refused)
        if self.locks.broadcasting(body.consumer_group):
            held = list(body.mq_set)
        else:
            held = self.locks.try_lock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(ResponseCode.SUCCESS, body=LockBatchResponseBody(held).to_json())

    def unlock_batch_mq(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        if not cmd.body:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "UNLOCK_BATCH_MQ without a body")
        body = UnlockBatchRequestBody.from_json(cmd.body)
        refused = self.locks.refusal(body.consumer_group, body.client_id, body.mq_set)
        if refused is not None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, refused)
        self.locks.unlock(body.consumer_group, body.mq_set, body.client_id)
        return cmd.response(ResponseCode.SUCCESS)
