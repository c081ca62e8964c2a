"""A slave's copy of its master's tables, every ``slave_sync_interval_ms`` (RocketMQ's
SlaveSynchronize: every 10 s).

Four requests to the master's remoting address (the name server's ``masterAddr``):
GET_ALL_TOPIC_CONFIG (the topics, replaced whole when the master's data version differs; asked
in pages of ``split_metadata_size`` topics, RocketMQ 5's way, so that a table of any size is
copied: broker/tables/topic_pages.py; the first page's version equal to the one held ends the
copy there),
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
from orbitmq.protocol.bodies import (
    DataVersion,
    TopicConfig,
    TopicConfigSerializeWrapper,
    loads_lenient,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import GetAllTopicConfigRequestHeader, GetAllTopicConfigResponseHeader
from orbitmq.security.access_table import AuthRequestCode
from orbitmq.security.registry import AuthRegistry

__all__ = ["SlaveSynchronize"]

log = logging.getLogger(__name__)

Invoke = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]
SYNC_TIMEOUT_S = 3.0
FIRST_ROUND_DELAY_S = 0.5
# A copy in pages starts again when the master's table changes under it; after this many
# starts in a row the round gives up on the topics (the next round tries again).
TOPIC_COPY_STARTS_MAX = 3


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
                 auth: AuthRegistry | None = None, *, topic_page_max: int = 2000) -> None:
        self._invoke = invoke
        self.topic_page_max = topic_page_max  # maxTopicNum of a page (split_metadata_size)
        self.topic_pages = 0  # pages of the topic table read so far (tests, stats)
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
            (RequestCode.GET_ALL_CONSUMER_OFFSET, "consumer offsets", self._offsets),
            (RequestCode.GET_ALL_DELAY_OFFSET, "delay offsets", self._delay_offsets),
            (RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, "subscription groups", self._groups),
        ) + (((AuthRequestCode.GET_AUTH_METADATA, "users and ACLs", self._auth),)
             if self.auth is not None else ())
        done = 0
        try:
            await self._copy_topics(master)
            done += 1
        except (OrbitMQError, ValueError, TypeError) as e:
            log.warning("slave sync of topics from master %s failed: %s", master, e)
        for code, what, apply in steps:
            try:
                resp = await self._call(master, RemotingCommand.request(code))
                apply(bytes(resp.body))
                done += 1
            except (OrbitMQError, ValueError, TypeError) as e:
                log.warning("slave sync of %s from master %s failed: %s", what, master, e)
        steps_all = len(steps) + 1
        if done == steps_all:
            self.rounds += 1
            self.last_sync_ms = int(time.time() * 1000)
        return done == steps_all

    async def _call(self, master: str, request: RemotingCommand) -> RemotingCommand:
        resp = await self._invoke(master, request, SYNC_TIMEOUT_S)
        if resp.code != ResponseCode.SUCCESS:
            raise OrbitMQError(f"code {resp.code}: {resp.remark}")
        return resp

    async def _copy_topics(self, master: str) -> None:
        """The master's topics into this slave's table, when its version differs. A table
        that moved during the copy (a change of the master applied from the commit log's
        metadata records, which brings the master's newer version) is not replaced with the
        older copy: the next round compares again."""
        held = self.topics.data_version
        wrapper = await self.fetch_topics(master)
        if wrapper is None:
            return
        now = self.topics.data_version
        if (now.timestamp, now.counter) != (held.timestamp, held.counter):
            log.info("topics changed during the copy from the master: left to the next round")
            return
        self.topics.replace_from_master(wrapper)

    async def fetch_topics(self, master: str) -> TopicConfigSerializeWrapper | None:
        """The master's whole topic table, read in pages (RocketMQ 5's getAllTopicConfig); None
        when its first page shows the version this slave holds (nothing to copy). A master that
        answers without ``totalTopicNum`` (an older broker) sent its whole table at once.

        Raises:
            OrbitMQError: a refusal or a body or header that does not parse, or the table
                changed under ``TOPIC_COPY_STARTS_MAX`` copies in a row.
        """
        held = self.topics.data_version
        for _ in range(TOPIC_COPY_STARTS_MAX):
            table: dict[str, TopicConfig] = {}
            version: DataVersion | None = None
            while True:
                header = GetAllTopicConfigRequestHeader(
                    topic_seq=len(table), max_topic_num=self.topic_page_max,
                    data_version=None if version is None else version.to_json().decode())
                resp = await self._call(master, RemotingCommand.request(
                    RequestCode.GET_ALL_TOPIC_CONFIG, header.to_ext_fields()))
                self.topic_pages += 1
                page = TopicConfigSerializeWrapper.from_json(bytes(resp.body))
                total = GetAllTopicConfigResponseHeader.from_ext_fields(
                    resp.ext_fields).total_topic_num
                if total is None:  # an older master: its whole table
                    return page
                now = page.data_version
                if version is None:
                    version = now
                    if (now.timestamp, now.counter) == (held.timestamp, held.counter):
                        return None
                elif (now.timestamp, now.counter) != (version.timestamp, version.counter):
                    log.info("master's topics changed during the copy, starting again "
                             "version=%d copied=%d", now.counter, len(table))
                    break
                before = len(table)
                table.update(page.topic_config_table)
                if len(table) >= total:
                    return TopicConfigSerializeWrapper(table, version)
                if len(table) == before:  # an empty page (or one of names held) before the end
                    raise OrbitMQError(f"the master's page from topic {before} of {total} "
                                       "brought no new topic")
        raise OrbitMQError(f"the master's topics changed during {TOPIC_COPY_STARTS_MAX} "
                           "copies in a row")

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
