"""BrokerController: the broker's lifecycle; it builds the parts and wires them once.

``start`` runs one ordered list of services (services.py; the order and why in
:meth:`BrokerController._service_order`): it opens the store (recovering it if the last run
crashed), loads the topic, offset and subscription group tables, starts the remoting server on
``listen_host:listen_port`` (port 0 picks a free one), registers with every name server and logs
``orbitmq broker ready on HOST:PORT``. ``stop`` stops the list in reverse: unregister, stop
serving, persist the tables, shut the store down.

The controller is the only module that knows every part, and wires them through their
constructors. Processors and services get a :class:`~orbitmq.broker.context.BrokerContext`
(store, tables, config, the durable-save seam, read-your-writes, a few hooks), never the
controller; processor/handlers.py is the one table of request codes; durable_save.py is where
every message is saved; docs/architecture.md walks a send and a pull through them. Fronts other
than remoting (the gRPC endpoint) are mounted from outside (:meth:`BrokerController.mount`, by
orbitmq/assembly.py): the broker never imports them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from orbitmq.broker.config_file import SavedTable, config_path, save_all
from orbitmq.broker.context import BrokerContext, BrokerHost, ip_of
from orbitmq.broker.dispatch_wait import DISPATCH_WAIT_MAX_S, DispatchWaiter
from orbitmq.broker.durable_save import DurableSave, durability_conditions
from orbitmq.broker.failover import FailoverService
from orbitmq.broker.failover.promotion import adopt_stored_topics
from orbitmq.broker.fast_failure import BrokerFastFailure
from orbitmq.broker.fast_path import UNORDERED_CODES, FastPath
from orbitmq.broker.fronts import GRPC_FRONT, FrontParts
from orbitmq.broker.lite.service import LiteService
from orbitmq.broker.metadata_log import MetadataLog, MetadataTables
from orbitmq.broker.observability.broker_stats import BrokerStats
from orbitmq.broker.observability.service import BrokerObservability
from orbitmq.broker.pop.pop_service import PopService
from orbitmq.broker.processor.admin_processor import AdminProcessor
from orbitmq.broker.processor.broker_config_processor import (
    BrokerConfigProcessor,
    permitted_topic,
    permitted_wrapper,
)
from orbitmq.broker.processor.client_processor import ClientProcessor
from orbitmq.broker.processor.consume_admin_processor import ConsumeAdminProcessor
from orbitmq.broker.processor.consumer_info_processor import ConsumerInfoProcessor
from orbitmq.broker.processor.handlers import Processors, auth_handler_table, handler_table
from orbitmq.broker.processor.lock_processor import LockProcessor
from orbitmq.broker.processor.offset_processor import OffsetProcessor
from orbitmq.broker.processor.pull_processor import PullProcessor
from orbitmq.broker.processor.query_processor import QueryProcessor
from orbitmq.broker.processor.recall_processor import RecallProcessor
from orbitmq.broker.processor.replica_processor import ReplicaProcessor
from orbitmq.broker.processor.send_back_processor import SendBackProcessor
from orbitmq.broker.processor.send_processor import SendProcessor
from orbitmq.broker.processor.stats_processor import StatsProcessor
from orbitmq.broker.register_service import RegisterService
from orbitmq.broker.replication import ReplicationService
from orbitmq.broker.role import RoleState
from orbitmq.broker.runtime_config import load_overlay
from orbitmq.broker.schedule_service import ScheduleService
from orbitmq.broker.services import Front, Service, ServiceList
from orbitmq.broker.tables.auth_table import MetadataRegistryStore
from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.broker.tables.consumer_offset_manager import ConsumerOffsetManager
from orbitmq.broker.tables.metadata_table import metadata_db_for
from orbitmq.broker.tables.queue_lock_manager import QueueLockManager
from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupManager
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.broker.timer.timer_service import TimerService
from orbitmq.broker.transaction import (
    EndTransactionProcessor,
    TransactionBatchProcessor,
    TransactionCheckService,
    TransactionService,
)
from orbitmq.broker.transaction.pending_processor import PendingTransactionsProcessor
from orbitmq.config import BrokerConfig, BrokerRole, ConfigError
from orbitmq.errors import ClientError, StoreError
from orbitmq.security.registry import AUTH_FILE_NAME, AuthRegistry
from orbitmq.security.server_access import build_server_access, check_exposure
from orbitmq.security.tls import ClientTls, ServerTls
from orbitmq.store.message_store import MessageStore
from orbitmq.store.metadata_db import MetadataDB
from orbitmq.transport.client import RemotingClient
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.limits import ConnectionLimits, LimitCounters
from orbitmq.transport.server import RemotingServer

__all__ = ["BrokerController"]

log = logging.getLogger(__name__)

CLIENT_SCAN_INTERVAL_MAX_MS = 10_000  # RocketMQ scans client channels every 10 s
STOP_SAVE_ATTEMPTS_MAX = 3  # a table that cannot be saved at stop is tried this often...
STOP_SAVE_RETRY_S = 0.2  # ...this far apart


class BrokerController:
    """One broker: store, tables, request processors, remoting server, name server registration.

    Attributes:
        config: the settings it runs with.
        ctx: what processors and services see of the broker (see context.py).
        store / topics / offsets / sub_groups / clients / saver: the parts ``ctx`` holds.
        processors: the request processors; processor/handlers.py maps request codes onto them.
        services: the parts that start and stop, in order (services.py).
        fronts: the fronts mounted from outside (:meth:`mount`: the gRPC endpoint).
        pull / schedule / transactions / locks: the parts tests and tools look into.
        server: the RemotingServer.
    """

    def __init__(self, config: BrokerConfig, *, auth_registry: AuthRegistry | None = None) -> None:
        """``auth_registry``: users and ACLs shared with a name server of this process
        (standalone); otherwise the broker's own, in its metadata store
        (``STORE/config/metadata.db``)."""
        config = load_overlay(config)  # settings changed at runtime (UPDATE_BROKER_CONFIG)
        config.check_whole()  # ConfigError: broker_role and broker_id disagree
        self.config = config
        # Controller mode: every member starts as a slave; etcd decides (broker/failover/).
        self.role = (RoleState(BrokerRole.SLAVE, config.broker_id) if config.enable_controller_mode
                     else RoleState(config.broker_role, config.broker_id))
        self.store = MessageStore(config.store)
        self.host = BrokerHost(ip_of(config.broker_ip or config.listen_host), config.listen_port)
        # What each limit refused (transport/limits.py): the server's, the tables' and SYSTEM_BUSY.
        self.limit_counters = LimitCounters()
        # Topics, groups, offsets, users and ACLs, saved change by change (store/metadata_db.py);
        # standalone's registry (shared with its name server) brings the store it was read from.
        shared = auth_registry.store if auth_registry is not None else None
        self.metadata = (shared.db if isinstance(shared, MetadataRegistryStore)
                         else metadata_db_for(config))
        self.topics = TopicConfigManager(config, on_change=self._topics_changed,
                                         counters=self.limit_counters, db=self.metadata)
        self.offsets = ConsumerOffsetManager(config.store.store_path, self.store, db=self.metadata)
        self.store.unread_floor = self.offsets.unread_floor
        self.sub_groups = SubscriptionGroupManager(config, counters=self.limit_counters,
                                                   db=self.metadata)
        self.clients = ClientManager(notify_enabled=config.notify_consumer_ids_changed_enable)
        self.saver = DurableSave(self.store, [])  # its conditions once replication is built
        self.dispatched = DispatchWaiter(self.store)
        self.server = RemotingServer(
            config.listen_host, config.listen_port, name="broker",
            max_frame_size=config.max_frame_size,
            max_in_flight_per_connection=config.max_in_flight_per_connection,
            limits=ConnectionLimits.of(config), tls=ServerTls.of(config),
            limit_counters=self.limit_counters,
        )
        # Access control (orbitmq.security): checked by the server before any handler; the
        # broker signs its own requests (registration, a slave's copies) with the inner
        # credentials.
        self.access = build_server_access(
            config, cluster_name=config.broker_cluster_name,
            registry=auth_registry if auth_registry is not None
            else self.auth_registry_for(config, self.metadata))
        if config.authentication_enabled:
            self.server.set_guard(self.access.guard.check)
        self.remoting_client = RemotingClient(max_frame_size=config.max_frame_size,
                                              credentials=self.access.inner,
                                              tls=ClientTls.of(config))
        self.registrar = RegisterService(
            config, self.remoting_client, lambda: self.address,
            lambda: permitted_wrapper(self.topics.wrapper(), config),
            topic_config=lambda topic: permitted_topic(self.topics.get(topic), config),
            data_version=lambda: self.topics.data_version,
            ha_addr=lambda: self.replication.ha_address(), broker_id=lambda: self.role.broker_id,
            on_answer=None if config.enable_controller_mode else
            lambda master, ha: self.replication.on_registered(master, ha),
            master_epoch=lambda: self.role.epoch)
        self.stats = BrokerStats(config.broker_cluster_name)  # the send and pull handlers count
        # Topic, group and offset changes carried to the slaves by the commit log, so that an
        # answered change crosses a failover (metadata_log.py).
        self.metadata_log = MetadataLog(
            self.store, self.saver, self.role,
            MetadataTables(self.topics, self.sub_groups, self.offsets), self.metadata,
            self._metadata_replicated, lambda: self.host.store_host)
        self.ctx = ctx = BrokerContext(
            config=config, host=self.host, store=self.store, saver=self.saver,
            dispatched=self.dispatched, topics=self.topics, offsets=self.offsets,
            sub_groups=self.sub_groups, clients=self.clients, stats=self.stats,
            route_published=self.registrar.published_after_now, role=self.role,
            read_bound=(self._read_bound if config.enable_controller_mode or self.store.sync_flush
                        else None),
            authorize_found=self.access.guard.authorize_found,
            metadata_log=self.metadata_log,
        )
        self.schedule = ScheduleService(ctx)  # delay levels
        self.replication = ReplicationService(
            config, self.store, self.role, self.remoting_client.invoke, lambda: self.address,
            topics=self.topics, offsets=self.offsets, schedule=self.schedule,
            groups=self.sub_groups,
            auth=self.access.registry if config.authentication_enabled else None,
            inner=self.access.inner,
            audit=self.access.guard.audit)
        self.replication.extra_info.append(self.metadata_log.runtime_info)
        self.failover: FailoverService | None = None  # controller mode (docs/failover.md)
        if config.enable_controller_mode:
            self.failover = FailoverService(
                config, self.store, self.role, self.replication, self.change_role,
                lambda: self.address, on_promoted=self._promoted)
        self._apply_durability()
        self.saver.on_appended(self.replication.pump)
        self.transactions = TransactionService(ctx)  # half messages and their outcomes
        self.tx_checker = TransactionCheckService(self.transactions)
        self.timer = TimerService(ctx)  # timer messages, any delivery time (broker/timer)
        self.schedule.recalled = self.timer.is_recalled  # recall covers delay levels too
        self.schedule.recall_lock = self.timer.recall_lock
        self.pop = PopService(ctx)  # POP consumption (broker/pop)
        self.lite = LiteService(ctx, self.pop)  # lite topics (broker/lite)
        self.pull = PullProcessor(ctx, self.pop.group_active)  # one consumption model per group
        held_pulls = lambda: self.pull.long_poll.held_count  # noqa: E731
        # A read of one plain send to a topic pulls wait on dispatches it in its own callback,
        # before its answer: the held pulls leave first (DurableSave.deliver_first).
        self.saver.pulls_waiting = self.pull.long_poll.waits_on
        if self.failover is not None:  # consumers waiting on the confirm offset
            self.failover.on_confirm(self.pull.long_poll.confirmed)
            self.failover.on_confirm(lambda end: self.pop.wake_all())
        if self.store.sync_flush:  # consumers waiting on a sync (_read_bound)
            self.store.add_flush_listener(self.pull.long_poll.bound_moved)
            self.store.add_flush_listener(self.pop.bound_moved)
        self.locks = QueueLockManager(config.rebalance_lock_max_live_time_ms, self.clients,
                                      check_stall=self.server.check_stall)
        self.client_processor = ClientProcessor(ctx)
        send_back = SendBackProcessor(ctx)  # retries and dead letters
        self.end_transaction = EndTransactionProcessor(self.transactions)
        # SYSTEM_BUSY for sends that waited too long in the broker (broker/fast_failure.py).
        self.fast_failure = (BrokerFastFailure(
            config.wait_time_mills_in_send_queue, config.os_page_cache_busy_time_out_mills,
            self.server.limit_counters) if config.broker_fast_failure_enable else None)
        send = SendProcessor(ctx, self.transactions.to_half, send_back,
                             park_timer=self.timer.park, recall_handle=self.timer.recall_handle,
                             fast_failure=self.fast_failure)
        send.lite_store_topic = self.lite.store_topic_for_send
        self.processors = Processors(
            send=send,
            pull=self.pull,
            clients=self.client_processor,
            query=QueryProcessor(ctx),
            admin=AdminProcessor(ctx),
            offsets=OffsetProcessor(ctx),
            send_back=send_back,
            locks=LockProcessor(self.locks, self.clients),
            consumer_info=ConsumerInfoProcessor(self.clients),
            pending_transactions=PendingTransactionsProcessor(self.transactions),
            end_transaction=self.end_transaction,
            stats=StatsProcessor(ctx, held_pulls, self.replication.runtime_info),
            consume_admin=ConsumeAdminProcessor(ctx, lambda: int(time.time() * 1000)),
            broker_config=BrokerConfigProcessor(config, self.registrar.registered_after_now),
            replica=ReplicaProcessor(self.schedule, self.replication),
            transaction_batches=TransactionBatchProcessor(ctx, self.transactions),
            recall=RecallProcessor(self.timer),
        )
        for code, handler in handler_table(self.processors, self.dispatched.after,
                                           self.role).items():
            self.server.register(code, handler)
        for code, handler in auth_handler_table(self.access.admin, self.role).items():
            self.server.register(code, handler)
        # None: off by config, or no C speedups; with authentication on, it checks signatures
        # and rules itself and declines the rest to the guard (broker/fast_path.py).
        self.fast_path = FastPath.create(ctx, self.server.note_answered, self.access,
                                         self.fast_failure)
        if self.fast_path is not None:
            self.server.set_fast_reader(self.fast_path, UNORDERED_CODES)
        self.server.on_connection_closed(self._connection_closed)
        # A pause or a clock step is no client's silence: heartbeats and lock renewals.
        self.server.on_discount(self.clients.discount)
        self.server.on_discount(self.locks.discount)
        self.observability = BrokerObservability(
            config, self.stats, self.server, self.store, topics=self.topics, offsets=self.offsets,
            clients=self.clients, held_pulls=held_pulls, replication=self.replication,
            audit=self.access.guard.audit, limits=self.server)
        self._client_scans: list[Callable[[], object]] = [self.client_processor.scan_expired]
        self.fronts: dict[str, Front] = {}  # mounted from outside (mount)
        self._tasks: list[asyncio.Task[None]] = []
        self._announcing = False  # topic changes go to the name servers (once the core runs)
        self.services = ServiceList(self._service_order())
        self._started = False

    def _service_order(self) -> list[Service]:
        """Every part that starts and stops, in start order (stopped in reverse; see
        services.py). Why this order:

        - the store first and last: opened as the first load (its lock taken and its file modes
          set before any table is read), the tables saved just before it shuts down, after
          everything that changes them stopped;
        - replication before the remoting server and after it: a SYNC_MASTER send in flight at
          stop still gets its slaves during the server's grace;
        - the server opens before failover (which publishes the broker's address, known once
          the server listens) and closes before failover stops (a master stops taking sends
          before it gives its lease up);
        - from the server's opening to the first front, no await: every part that answers
          requests (held pulls, transactions rebuilt) is running before the first request;
        - lite topics after the POP service (their receives are its own) and, like it, on a
          master only; they find their queues again from the store at start;
        - fronts (the gRPC endpoint, :meth:`mount`), metrics and the name servers last.
        """
        ff = self.fast_failure
        fp = self.fast_path
        services = [
            # Opened as a load: before any table or file is read (the store's lock and modes).
            Service("store", load=self._open_store, stop=self.store.shutdown),
            Service("tables", load=self._load_tables, stop=self._save_tables_at_stop),
            Service("durable save", start=self.saver.start, stop=self.saver.stop),
            Service("dispatch wait", start=self.dispatched.start, stop=self.dispatched.stop),
            # Records a replica holds but has not applied, applied before anything is served.
            Service("metadata log", load=self.metadata_log.load, start=self.metadata_log.start,
                    stop=self.metadata_log.stop),
            Service("remoting client", stop=self.remoting_client.close),
            Service("replication", start=self.replication.start, stop=self.replication.stop),
            Service("remoting server", start=self._open_server),
            Service("failover", start=self.failover.start, stop=self.failover.stop)
            if self.failover is not None else None,
            Service("fast failure", start=ff.start, stop=ff.stop) if ff is not None else None,
            # SYNC_MASTER sends in flight still get their slaves: replication stops after this.
            Service("remoting server close", stop=lambda: self.server.stop(grace=2.0)),
            Service("pull", start=self._start_pulls, stop=self.pull.stop),
            Service("fast path", start=fp.start) if fp is not None else None,  # store host known
            # A slave neither ends transactions nor delivers delays, timers or POP revivals.
            Service("transactions", start=self.transactions.start, stop=self.transactions.stop,
                    masters_only=True),  # rebuilt before any request: no await since the server
            Service("transaction checks", start=self.tx_checker.start, stop=self.tx_checker.stop,
                    masters_only=True),
            Service("delay levels", start=self.schedule.start, stop=self.schedule.stop,
                    masters_only=True),
            Service("timers", load=self.timer.load, start=self.timer.start, stop=self.timer.stop,
                    pause=self.timer.pause, masters_only=True),
            Service("pop", load=self.pop.load, start=self.pop.start, stop=self.pop.stop,
                    pause=self.pop.pause, masters_only=True),
            Service("lite topics", load=self.lite.load, start=self.lite.start,
                    stop=self.lite.stop, masters_only=True),
            Service("route updates", start=self._announce, stop=self._quiet),
            Service("observability", start=self.observability.start,
                    stop=self.observability.stop),  # OSError: the metrics port is taken
            # BrokerError: a name server refused this broker.
            Service("registration", start=self.registrar.start, stop=self.registrar.stop),
            Service("periodic", start=self._start_periodic, stop=self._stop_periodic),
        ]
        return [s for s in services if s is not None]

    def mount(self, name: str, front: Front, *,
              scan_clients: Callable[[], object] | None = None) -> None:
        """Run ``front`` (another front over this broker, e.g. the gRPC endpoint, which the
        server assembly builds from :meth:`front_parts`) with the broker, as the service
        ``name``: started after the broker's own parts, before metrics and registration, and
        stopped before them. ``scan_clients``: called at each scan for expired clients.
        Before :meth:`start` only."""
        self.services.insert_before("observability", Service(name, start=front.start,
                                                             stop=front.stop))
        self.fronts[name] = front
        if scan_clients is not None:
            self._client_scans.append(scan_clients)

    def front_parts(self) -> FrontParts:
        """What another front serves from: the context and the services it shares."""
        return FrontParts(ctx=self.ctx, pop=self.pop, lite=self.lite, timer=self.timer,
                          to_half=self.transactions.to_half,
                          end_transaction=self.end_transaction, guard=self.access.guard)

    @staticmethod
    def auth_registry_for(config: BrokerConfig, db: MetadataDB | None = None) -> AuthRegistry:
        """The broker's users and ACLs, kept in its metadata store (``db``, else one of its
        own for ``config``: what standalone shares between its name server and its broker,
        which then uses that store), not yet loaded; an ``auth.json`` of an earlier broker is
        imported at the load (tables/auth_table.py)."""
        return AuthRegistry(store=MetadataRegistryStore(
            db if db is not None else metadata_db_for(config),
            config_path(config.store.store_path, AUTH_FILE_NAME)))

    @property
    def address(self) -> str:
        """``host:port`` clients should use: ``broker_ip`` when set, else the listening host."""
        return self.host.address

    @property
    def store_host(self) -> tuple[str, int]:
        """(ip, port) written into stored messages."""
        return self.host.store_host

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Open the store, load tables, serve, register: the services in order (services.py).
        Raises StoreError / OSError, or BrokerError when a name server refuses the
        registration, on failure (after stopping what was started)."""
        if self._started:
            raise ClientError("broker already started")
        if self.config.grpc_listen_port >= 0 and GRPC_FRONT not in self.fronts:
            # The broker does not import its gRPC front: never serve without the port asked for.
            raise ConfigError("grpc_listen_port", (
                f"grpc_listen_port is {self.config.grpc_listen_port} but no gRPC endpoint is "
                "mounted: build the broker with orbitmq.assembly.build_broker, or set -1"))
        check_exposure(self.config, self.config.listen_host, "the broker")
        self._started = True
        try:
            await self.services.start(master=self.role.accepts_writes)
        except BaseException:
            self._started = False
            raise
        cfg = self.config
        if cfg.listen_host in ("0.0.0.0", "::", "") and not cfg.broker_ip:
            log.warning("listening on all interfaces without broker_ip: advertising %s", self.address)
        log.info("orbitmq broker ready on %s", self.address)

    async def stop(self) -> None:
        """Stop the services in reverse: unregister, stop serving, persist tables, shut the
        store down (idempotent)."""
        if not self._started:
            return
        self._started = False
        await self.services.stop()
        log.info("orbitmq broker stopped on %s", self.address)

    def _open_store(self) -> None:
        self.replication.prepare_store()  # a slave's store takes its master's bytes only
        self.store.start()

    def _load_tables(self) -> None:
        self.metadata.open()  # StoreError: the metadata store cannot be opened
        try:
            self.access.load()  # the users and ACLs (auth.json imported), the init user
            self.topics.load()
            self.offsets.load()
            self.sub_groups.load()
            self.schedule.load()
        except BaseException:  # StoreError: a table refused; the start stops here
            self.metadata.close()
            raise

    async def _open_server(self) -> None:
        await self.server.start()
        self.host.listening_on(self.server.port)

    def _start_pulls(self) -> None:
        self.pull.long_poll.start()
        self.store.add_arrival_listener(self.pull.long_poll.on_arrival)

    def _announce(self) -> None:
        self._announcing = True

    def _quiet(self) -> None:
        self._announcing = False

    def _start_periodic(self) -> None:
        cfg = self.config
        self._tasks = [
            asyncio.create_task(self._every(cfg.flush_consumer_offset_interval_ms, self._persist_tables)),
            asyncio.create_task(self._every(
                min(CLIENT_SCAN_INTERVAL_MAX_MS, max(cfg.client_channel_expire_ms // 4, 50)),
                self._scan_clients)),
        ]

    async def _stop_periodic(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def _tables(self) -> list[SavedTable]:
        tables: list[SavedTable] = [self.offsets.file, self.topics.file, self.sub_groups.file,
                                    self.schedule.file]
        store = self.access.registry.store
        if isinstance(store, MetadataRegistryStore) and store.db is self.metadata:
            tables.append(store.table)  # users and ACLs whose save failed: written again
        return tables

    async def _save_tables_at_stop(self) -> None:
        """Save every table; one that fails (logged by itself) never keeps the others from being
        saved, and is tried again a few times before the broker gives up on it. Then the
        metadata store is closed."""
        unsaved = save_all(self._tables(), force=True)
        for _ in range(STOP_SAVE_ATTEMPTS_MAX - 1):
            if not unsaved:
                break
            await asyncio.sleep(STOP_SAVE_RETRY_S)
            unsaved = save_all(unsaved, force=True)
        if unsaved:
            log.error("stopping with unsaved broker tables: %s",
                      ", ".join(f"{t.what} ({t.path})" for t in unsaved))
        await asyncio.gather(*self.offsets.pending_rounds(), return_exceptions=True)
        self.metadata.close()

    async def __aenter__(self) -> BrokerController:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- role -----------------------------------------------------------------------------------
    def _apply_durability(self) -> None:
        """What "durable" means in the current role (durable_save.durability_conditions)."""
        self.saver.set_conditions(durability_conditions(
            self.config, self.store, self.role.role, self.replication.ack))

    async def change_role(self, role: BrokerRole, broker_id: int) -> None:
        """Take another role while running (the seam a failover design uses): durability,
        the replication parts, the delay and transaction services, and the next registration
        follow. A master has broker id 0, a slave above 0 (ConfigError otherwise)."""

        if (role is BrokerRole.SLAVE) != (broker_id > 0):
            raise ConfigError("broker_role", f"{role.value} with broker_id {broker_id}")
        was_master = self.role.accepts_writes
        self.role.change(role, broker_id)
        self._apply_durability()
        await self.replication.apply_role()
        if was_master != self.role.accepts_writes:
            # The masters-only services: started in order, or paused in reverse (a timer
            # restarts from its checkpoint: timers a master fired may fire again).
            await self.services.apply_role(master=self.role.accepts_writes)
        self.registrar.request()

    # -- read-your-writes -----------------------------------------------------------------------
    async def wait_dispatched(self, timeout_s: float = DISPATCH_WAIT_MAX_S) -> bool:
        """Wait until everything appended so far is in the consume queues and the index
        (signalled by the store's dispatch, see dispatch_wait.py); False on timeout."""
        return await self.dispatched.wait(timeout_s)

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
        """The changed offsets, and any table whose last save failed (saved again here); then
        the metadata store's log is copied back into its file (its background compaction)."""
        await asyncio.to_thread(self._save_and_checkpoint)

    def _save_and_checkpoint(self) -> None:
        save_all(self._tables())
        self.metadata_log.save_applied()
        try:
            self.metadata.checkpoint()
        except StoreError as e:  # the log keeps the pages (and stays bounded: metadata_db.py)
            log.warning("metadata store checkpoint failed, tried again next round: %s", e)

    def _scan_clients(self) -> None:
        self.server.check_stall()  # a stall's time counts for no client's silence
        for scan in self._client_scans:
            scan()

    def _metadata_replicated(self) -> bool:
        """True when this master's metadata changes must reach slaves: controller mode (any
        member may be elected), a SYNC_MASTER (its slaves are its durability), or an
        ASYNC_MASTER while a slave is connected."""
        return (self.config.enable_controller_mode
                or self.role.role is BrokerRole.SYNC_MASTER
                or self.replication.progress.connected > 0)

    def _promoted(self) -> None:
        """Controller mode, elected: the metadata records first (the tables as the old master
        answered them), then the topics stored without a config (promotion.py)."""
        self.metadata_log.promoted()
        adopt_stored_topics(self.store, self.topics)

    def _read_bound(self) -> int | None:
        """The commit log end consumers are served up to. Under SYNC_FLUSH what is synced: a
        power cut takes what is not, and the offset of a message a consumer read could then
        hold another one. In controller mode also the confirm offset (FailoverService)."""
        bound = self.failover.read_bound() if self.failover is not None else None
        if self.store.sync_flush:
            flushed = self.store.commit_log.flushed_offset
            return flushed if bound is None else min(bound, flushed)
        return bound

    def _topics_changed(self, topic: str) -> None:
        tc = self.topics.get(topic)
        if tc is not None:  # its queues that hold nothing yet need no look at the disk
            self.store.note_new_queues(topic, tc.write_queue_nums)
        if self.fast_path is not None:
            self.fast_path.topic_changed(topic)
        if self._announcing:
            self.registrar.topic_changed(topic)

    def _connection_closed(self, conn: RemotingConnection) -> None:
        self.pull.long_poll.connection_closed(conn)
        try:
            members = self.locks.members_on(conn, self.clients)
            self.client_processor.connection_closed(conn)
            self.locks.release_departed(members, self.clients)
        except Exception:  # a listener must not break the transport's close path
            log.exception("client cleanup failed peer=%s", conn.peer)
