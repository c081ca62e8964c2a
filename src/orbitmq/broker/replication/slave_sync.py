"""A slave's copy of its master's tables, every ``slave_sync_interval_ms`` (RocketMQ's
SlaveSynchronize: every 10 s).

Four requests to the master's remoting address (the name server's ``masterAddr``):
GET_ALL_TOPIC_CONFIG (the topics, replaced whole when the master's data version differs),
GET_ALL_CONSUMER_OFFSET (merged: the master's value wins for each queue it knows, as RocketMQ's
putAll), GET_ALL_DELAY_OFFSET (replaced), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (replaced when the
version differs) and OrbitMQ's GET_AUTH_METADATA (the users and ACLs, replaced and saved 0600;
the master answers it to Super users only, which the slave's inner credentials are). Each table is copied on its own: one that fails (the master down, a body that
does not parse) is logged and tried at the next round; the others still go. Bodies are checked as
the tables' own files are: nothing the slave could not load itself is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from orbitmq.broker.schedule_service import ScheduleService, load_delay_offsets
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager, parse_offset_table
from orbitmq.broker.tables.subscription_group_manager import (
    SubscriptionGroupManager,
    SubscriptionGroupWrapper,
)
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.errors import OrbitMQError, RemoteProtocolError
from orbitmq.protocol.bodies import TopicConfigSerializeWrapper, loads_lenient
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.security.access_table import AuthRequestCode
from orbitmq.security.registry import AuthRegistry

__all__ = ["SlaveSynchronize"]

log = logging.getLogger(__name__)

Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
SYNC_TIMEOUT_S = 3.0
FIRST_ROUND_DELAY_S = 0.5


class SlaveSynchronize:
    """Copies the master's tables into this slave's (see the module docstring).

    Args:
        invoke: the broker's RemotingClient.invoke.
        master_address: the master's remoting address now ("" while unknown).
        interval_ms: ``slave_sync_interval_ms``.
    """

    def __init__(self, invoke: Invoke, master_address: Callable[[], str], interval_ms: int,
                 topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 schedule: ScheduleService, groups: SubscriptionGroupManager,
                 auth: AuthRegistry | None = None) -> None:
        self._invoke = invoke
        self.auth = auth
        self._address = master_address
        self.interval_s = interval_ms / 1000
        self.topics, self.offsets, self.schedule, self.groups = topics, offsets, schedule, groups
        self.rounds = 0  # rounds in which every table was copied
        self.last_sync_ms = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="orbitmq-slave-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        await asyncio.sleep(FIRST_ROUND_DELAY_S)
        while True:
            try:
                await self.sync_all()
            except Exception:
                log.exception("slave sync round failed")
            await asyncio.sleep(self.interval_s)

    async def sync_all(self) -> bool:
        """One round; True when every table was copied."""
        master = self._address()
        if not master:
            return False
        steps = (
            (RequestCode.GET_ALL_TOPIC_CONFIG, "topics", self._topics),
            (RequestCode.GET_ALL_CONSUMER_OFFSET, "consumer offsets", self._offsets),
            (RequestCode.GET_ALL_DELAY_OFFSET, "delay offsets", self._delay_offsets),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscription groups", self._groups),
        ) + (((AuthRequestCode.GET_AUTH_METADATA, "users and ACLs", self._auth),)
             if self.auth is not None else ())
        done = 0
        for code, what, apply in steps:
            try:
                resp = await self._invoke(master, RemotingCommand.request(code), SYNC_TIMEOUT_S)
                if resp.code != ResponseCode.SUCCESS:
                    raise OrbitMQError(f"code {resp.code}: {resp.remark}")
                apply(bytes(resp.body))
                done += 1
            except (OrbitMQError, ValueError, TypeError) as e:
                log.warning("slave sync of %s from master %s failed: %s", what, master, e)
        if done == len(steps):
            self.rounds += 1
            self.last_sync_ms = int(time.time() * 1000)
        return done == len(steps)

    def _topics(self, body: bytes) -> None:
        self.topics.replace_from_master(TopicConfigSerializeWrapper.from_json(body))

    def _offsets(self, body: bytes) -> None:
        self.offsets.merge_from_master(parse_offset_table(_json(body)))

    def _delay_offsets(self, body: bytes) -> None:
        offsets = load_delay_offsets(_json(body))
        if any(level < 1 or offset < 0 for level, offset in offsets.items()):
            raise ValueError("delay offsets hold a level below 1 or a negative offset")
        self.schedule.replace_offsets(offsets)

    def _groups(self, body: bytes) -> None:
        self.groups.replace_from_master(SubscriptionGroupWrapper.from_json(body))

    def _auth(self, body: bytes) -> None:
        assert self.auth is not None
        users, acls = AuthRegistry.parse(_json(body))
        if self.auth.replace_all(users, acls):
            self.auth.save()  # StoreError (an OrbitMQError): logged, tried at the next round


def _json(body: bytes) -> object:
    try:
        return loads_lenient(body)
    except RemoteProtocolError as e:
        raise ValueError(f"not JSON: {e}") from None
