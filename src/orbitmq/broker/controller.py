"""BrokerController: the broker's lifecycle, and the object every processor hangs off.

``start`` opens the store (recovering it if the last run crashed), loads the topic, offset and
subscription group tables, starts the remoting server on ``listen_host:listen_port`` (port 0 picks
a free one), registers with every name server and logs ``orbitmq broker ready on HOST:PORT``.
``stop`` does the reverse: unregister, stop serving, persist the tables, shut the store down.

Request families live in their own modules: send_processor, pull_processor (+ long_poll_service),
consumer_offset_manager (QUERY/UPDATE_CONSUMER_OFFSET), client_processor (heartbeats),
query_processor (offsets by queue, messages by id or key) and admin_processor; delay levels in
schedule_service, retries and dead letters in send_back_processor, orderly queue locks in
queue_lock_manager, consumer connection and running info in consumer_info_processor.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable

from orbitmq.broker.admin_processor import AdminProcessor
from orbitmq.broker.broker_config_processor import BrokerConfigProcessor, permitted_wrapper
from orbitmq.broker.broker_stats import BrokerStats
from orbitmq.broker.client_manager import ClientManager
from orbitmq.broker.client_processor import ClientProcessor
from orbitmq.broker.config_file import TableFile, save_all
from orbitmq.broker.consume_admin_processor import ConsumeAdminProcessor
from orbitmq.broker.consumer_info_processor import ConsumerInfoProcessor
from orbitmq.broker.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.observability import BrokerObservability
from orbitmq.broker.pull_processor import PullProcessor
from orbitmq.broker.query_processor import QueryProcessor
from orbitmq.broker.queue_lock_manager import QueueLockManager
from orbitmq.broker.register_service import RegisterService
from orbitmq.broker.runtime_config import load_overlay
from orbitmq.broker.schedule_service import ScheduleService
from orbitmq.broker.send_back_processor import SendBackProcessor
from orbitmq.broker.send_processor import SendProcessor
from orbitmq.broker.stats_processor import StatsProcessor
from orbitmq.broker.subscription_group_manager import SubscriptionGroupManager
from orbitmq.broker.topic_config_manager import TopicConfigManager
from orbitmq.broker.transaction import TransactionService
from orbitmq.config import BrokerConfig
from orbitmq.errors import ClientError
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.store.message_store import MessageStore
from orbitmq.transport.client import RemotingClient
from orbitmq.transport.connection import HandlerResult, RemotingConnection
from orbitmq.transport.server import Handler, RemotingServer

__all__ = ["BrokerController"]

log = logging.getLogger(__name__)

CLIENT_SCAN_INTERVAL_MAX_MS = 10_000  # RocketMQ scans client channels every 10 s
DISPATCH_WAIT_MAX_S = 0.5  # a read waits at most this long for acknowledged sends to be queued
STOP_SAVE_ATTEMPTS_MAX = 3  # a table that cannot be saved at stop is tried this often...
STOP_SAVE_RETRY_S = 0.2  # ...this far apart


def _ip_of(host: str) -> str:
    """An IP literal for ``host`` (stored messages and message ids need one)."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return socket.gethostbyname(host)


class BrokerController:
    """One broker: store, tables, request processors, remoting server, name server registration.

    Attributes:
        config: the settings it runs with.
        store: the MessageStore (opened by ``start``).
        topics / offsets / sub_groups / clients: the broker's tables.
        server: the RemotingServer (its handlers registered by the processors).
    """

    def __init__(self, config: BrokerConfig) -> None:
        config = load_overlay(config)  # settings changed at runtime (UPDATE_BROKER_CONFIG)
        self.config = config
        self.store = MessageStore(config.store)
        self.topics = TopicConfigManager(config, on_change=self._topics_changed)
        self.offsets = ConsumerOffsetManager(config.store.store_path, self.store)
        self.sub_groups = SubscriptionGroupManager(config)
        self.clients = ClientManager(notify_enabled=config.notify_consumer_ids_changed_enable)
        self.server = RemotingServer(
            config.listen_host, config.listen_port, name="broker",
            max_frame_size=config.max_frame_size,
            max_in_flight_per_connection=config.max_in_flight_per_connection,
        )
        self.remoting_client = RemotingClient(max_frame_size=config.max_frame_size)
        self.registrar = RegisterService(config, self.remoting_client, lambda: self.address,
                                         lambda: permitted_wrapper(self.topics.wrapper(), config))
        self.store_host: tuple[str, int] = (_ip_of(config.broker_ip or config.listen_host),
                                            config.listen_port)
        self.boot_timestamp_ms = int(time.time() * 1000)
        self.stats = BrokerStats(config.broker_cluster_name)  # the send and pull handlers count
        self.send = SendProcessor(self)
        self.pull = PullProcessor(self)
        self.client_processor = ClientProcessor(self)
        self.query = QueryProcessor(self)
        self.admin = AdminProcessor(self)
        for processor in (self.send, self.pull, self.client_processor, self.query, self.admin):
            processor.register(self.server)
        self.transactions = TransactionService(self)  # half messages, END_TRANSACTION, checks
        self.transactions.register(self.server)
        # Delay levels, retries and dead letters, orderly queue locks, consumer info.
        self.schedule = ScheduleService(config, self.store, self.topics, lambda: self.store_host)
        self.send_back = SendBackProcessor(self)
        self.locks = QueueLockManager(config.rebalance_lock_max_live_time_ms, self.clients)
        self.consumer_info = ConsumerInfoProcessor(self)
        for extra in (self.send_back, self.locks, self.consumer_info):
            extra.register(self.server)
        self.server.register(RequestCode.UNREGISTER_CLIENT, self.locks.releasing(
            self.client_processor.unregister_client, self.clients))
        self.server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.offsets.query_consumer_offset)
        self.server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.offsets.update_consumer_offset)
        self._register_ops_processors()
        self.server.on_connection_closed(self._connection_closed)
        self.observability = BrokerObservability(
            config, self.stats, self.server, self.store, topics=self.topics, offsets=self.offsets,
            clients=self.clients, held_pulls=lambda: self.pull.long_poll.held_count)
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False

    def _register_ops_processors(self) -> None:
        """Runtime info and stats, consumer admin, settings (issue 17): explicit dependencies."""
        held = lambda: self.pull.long_poll.held_count  # noqa: E731
        StatsProcessor(self.config, lambda: self.address, lambda: self.boot_timestamp_ms,
                       self.stats, self.store, self.topics, self.offsets, self.sub_groups,
                       self.clients, held).register(self.server)
        ConsumeAdminProcessor(self.config.broker_name, self.store, self.topics, self.offsets,
                              self.clients, lambda: int(time.time() * 1000)).register(self.server)
        BrokerConfigProcessor(self.config, self.registrar.registered_after_now).register(self.server)

    @property
    def address(self) -> str:
        """``host:port`` clients should use: ``broker_ip`` when set, else the listening host."""
        return f"{self.store_host[0]}:{self.server.port}"

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the store, load tables, serve, register. Raises StoreError / OSError, or
        BrokerError when a name server refuses the registration, on failure (after closing what
        was opened)."""
        if self._started:
            raise ClientError("broker already started")
        self.store.start()
        try:
            self.topics.load()
            self.offsets.load()
            self.sub_groups.load()
            self.schedule.load()
            self.pull.long_poll.start()
            self.store.add_arrival_listener(self.pull.long_poll.on_arrival)
            await self.server.start()
        except BaseException:
            await self.pull.long_poll.stop()
            self.store.shutdown()
            raise
        self.store_host = (self.store_host[0], self.server.port)
        self.transactions.start()  # no await since the server started: rebuilt before any request
        self.schedule.start()
        self._started = True
        try:
            await self.observability.start()  # OSError: the metrics port is taken
        except BaseException:
            await self.stop()
            raise
        self.boot_timestamp_ms = int(time.time() * 1000)
        try:
            await self.registrar.start()  # BrokerError: a name server refused this broker
        except BaseException:
            await self.stop()
            raise
        cfg = self.config
        self._tasks = [
            asyncio.create_task(self._every(cfg.flush_consumer_offset_interval_ms, self._persist_tables)),
            asyncio.create_task(self._every(
                min(CLIENT_SCAN_INTERVAL_MAX_MS, max(cfg.client_channel_expire_ms // 4, 50)),
                self._scan_clients)),
        ]
        if cfg.listen_host in ("0.0.0.0", "::", "") and not cfg.broker_ip:
            log.warning("listening on all interfaces without broker_ip: advertising %s", self.address)
        log.info("orbitmq broker ready on %s", self.address)

    async def stop(self) -> None:
        """Unregister, stop serving, persist tables, shut the store down (idempotent)."""
        if not self._started:
            return
        self._started = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.observability.stop()
        await self.transactions.stop()
        await self.registrar.stop()
        await self.pull.stop()
        await self.schedule.stop()
        await self.server.stop(grace=2.0)
        await self.remoting_client.close()
        try:
            await self._save_tables_at_stop()
        finally:
            self.store.shutdown()
        log.info("orbitmq broker stopped on %s", self.address)

    def _tables(self) -> list[TableFile]:
        return [self.offsets.file, self.topics.file, self.sub_groups.file, self.schedule.file]

    async def _save_tables_at_stop(self) -> None:
        """Save every table; one that fails (logged by itself) never keeps the others from being
        saved, and is tried again a few times before the broker gives up on it."""
        unsaved = save_all(self._tables(), force=True)
        for _ in range(STOP_SAVE_ATTEMPTS_MAX - 1):
            if not unsaved:
                return
            await asyncio.sleep(STOP_SAVE_RETRY_S)
            unsaved = save_all(unsaved, force=True)
        if unsaved:
            log.error("stopping with unsaved broker tables: %s",
                      ", ".join(f"{t.what} ({t.path})" for t in unsaved))

    async def __aenter__(self) -> BrokerController:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- read-your-writes -----------------------------------------------------------------------
    async def wait_dispatched(self, timeout_s: float = DISPATCH_WAIT_MAX_S) -> bool:
        """Wait until everything appended so far is in the consume queues and the index.

        The store builds queues on its dispatch thread, a moment after a send is acknowledged; a
        read that follows an acknowledged send (GET_MAX_OFFSET, stats, a pull without long
        polling) waits for that moment so that it sees the send. Bounded; False on timeout.
        """
        store = self.store
        target = store.max_physical_offset()
        deadline = time.monotonic() + timeout_s
        while store.max_physical_offset() - store.dispatch_behind_bytes() < target:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.001)
        return True

    def after_dispatch(self, handler: Handler) -> Handler:
        """``handler`` run once the store has dispatched what was appended before the request
        (directly, without a task, when nothing is pending: the usual case)."""

        def run(cmd: RemotingCommand, conn: RemotingConnection) -> HandlerResult:
            if self.store.dispatch_behind_bytes() <= 0:
                return handler(cmd, conn)
            return self._later(handler, cmd, conn)

        return run

    async def _later(self, handler: Handler, cmd: RemotingCommand,
                     conn: RemotingConnection) -> RemotingCommand | None:
        await self.wait_dispatched()
        result = handler(cmd, conn)
        if inspect.isawaitable(result):
            return await result
        return result

    # -- background work ------------------------------------------------------------------------
    @staticmethod
    async def _every(interval_ms: int, work: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                result = work()
                if result is not None:
                    await result
            except Exception:
                log.exception("periodic broker task failed")

    async def _persist_tables(self) -> None:
        """The changed offsets, and any table whose last save failed (saved again here)."""
        await asyncio.to_thread(save_all, self._tables())

    def _scan_clients(self) -> None:
        self.client_processor.scan_expired()

    def _topics_changed(self) -> None:
        if self._started:
            self.registrar.request()

    def _connection_closed(self, conn: RemotingConnection) -> None:
        self.pull.long_poll.connection_closed(conn)
        try:
            members = self.locks.members_on(conn, self.clients)
            self.client_processor.connection_closed(conn)
            self.locks.release_departed(members, self.clients)
        except Exception:  # a listener must not break the transport's close path
            log.exception("client cleanup failed peer=%s", conn.peer)
