"""Replication as the broker runs it: the HA server on a master, the HA client and the table copy
on a slave, the SYNC_MASTER condition, and what is shown of them (runtime info, the HA status of
GET_BROKER_HA_STATUS, ``orbitmq cluster list``, metrics).

The parts follow the broker's :class:`~orbitmq.broker.role.RoleState`: a master listens on its
HA port and streams to its slaves (master.py); a slave keeps its store in replica mode, follows
its master (slave.py) and copies its tables (slave_sync.py). A slave learns its master's
addresses from the name server's answer to its registration (``masterAddr``, ``haServerAddr``),
unless ``ha_master_address`` names the HA address. :meth:`ReplicationService.apply_role` moves
the parts to a new role (a failover design changes roles at runtime through it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from orbitmq.broker.durable_save import DurabilityCondition
from orbitmq.broker.replication.ha_auth import HAAuth
from orbitmq.broker.replication.master import HAServer
from orbitmq.broker.replication.progress import ReplicaProgress, SlaveLink
from orbitmq.broker.replication.replica_ack import ReplicaAck
from orbitmq.broker.replication.slave import HAClient
from orbitmq.broker.replication.slave_sync import Invoke, SlaveSynchronize
from orbitmq.broker.role import RoleState
from orbitmq.config import BrokerConfig
from orbitmq.security.audit import AuditLog
from orbitmq.security.signature import Credentials
from orbitmq.store.message_store import MessageStore
from orbitmq.transport.loop import call_soon_from_any_thread

__all__ = ["ReplicationService", "lag_ms"]

log = logging.getLogger(__name__)


class ReplicaCondition(DurabilityCondition, Protocol):
    """A replica durability condition the service stops when the broker stops being master."""

    def stop(self) -> None: ...


def lag_ms(store: MessageStore, held: int, now_ms: int) -> int:
    """How old the oldest message a slave lacks is (0 when it lacks none): the slave is that
    far behind in time. ``held``: where the slave's copy ends."""
    if held >= store.max_physical_offset():
        return 0
    size = store.config.mapped_file_size_commitlog
    at = held
    for _ in range(2):  # the entry there, or the next segment's first after a blank entry
        stamp = store.commit_log.store_timestamp_at(at)
        if stamp > 0:
            return max(0, now_ms - stamp)
        at = at - at % size + size
    return 0


class ReplicationService:
    """The replication parts of one broker (see the module docstring).

    Args:
        config: the broker's settings.
        store: its store.
        role: its role now.
        invoke: the broker's RemotingClient.invoke (table copies from the master).
        host: the address the broker advertises (the HA address uses its host).
        tables: topics, offsets, schedule, groups (a slave copies them).
        auth: the broker's users (a slave copies them; the HA handshake checks its peer's
            proof against them when ``authentication_enabled`` is on).
        inner: what the broker proves itself with on the HA port (its inner credentials).
        audit: where refused HA handshakes are counted and logged.
    """

    def __init__(self, config: BrokerConfig, store: MessageStore, role: RoleState, invoke: Invoke,
                 host: Callable[[], str], *, topics: Any, offsets: Any, schedule: Any,
                 groups: Any, auth: Any = None, inner: Credentials | None = None,
                 audit: AuditLog | None = None) -> None:
        self.config = config
        self.store = store
        self.role = role
        self._host = host
        self.progress = ReplicaProgress()
        # With authentication on, a slave proves it holds a Super user's secret before the
        # master sends or counts anything, and the master proves the same back (ha_auth.py).
        self.ha_auth = (HAAuth(auth, inner, audit if audit is not None else AuditLog())
                        if config.authentication_enabled and auth is not None else None)
        self.server = HAServer(config, store, self.progress, self.ha_auth)
        # SYNC_MASTER's condition: one slave suffices here; controller mode puts its own
        # (broker/failover/in_sync_ack.py: every in-sync member) in its place.
        self.ack: ReplicaCondition = ReplicaAck(
            self.progress, config.store.sync_flush_timeout_ms, config.ha_max_gap_not_in_sync,
            self.server.pump)
        self.master_addr = ""  # the master's remoting address, as the name server said
        self.learned_ha_addr = ""  # its HA address, as the name server said
        self.client = HAClient(config, store, self.master_ha_address, self.ha_auth)
        self.sync = SlaveSynchronize(invoke, lambda: self.master_addr, config.slave_sync_interval_ms,
                                     topics, offsets, schedule, groups, auth,
                                     topic_page_max=config.split_metadata_size)
        self._running: str | None = None  # "master" or "slave" while started
        self.extra_info: list[Callable[[], dict[str, str]]] = []  # more runtime info (failover)
        self._pump_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    def prepare_store(self) -> None:
        """Before the store starts: a slave's store takes no puts, only its master's bytes."""
        self.store.set_replica(self.role.is_slave)

    async def start(self) -> None:
        """Start the parts of the current role (OSError when the HA port is taken)."""
        self._loop = asyncio.get_running_loop()
        self.store.add_dispatch_listener(self._dispatched)
        await self.apply_role()

    async def apply_role(self) -> None:
        """Run the parts of ``role`` now, stopping the others."""
        want = "slave" if self.role.is_slave else "master"
        if want == self._running:
            return
        await self._stop_parts()
        self.store.set_replica(want == "slave")
        if want == "master":
            await self.server.start()
        else:
            hello = self.client.hello
            self.client = HAClient(self.config, self.store, self.master_ha_address, self.ha_auth)
            self.client.hello = hello
            self.client.start()
            self.sync.start()
        self._running = want
        if want == "master":
            log.info("orbitmq ha ready on %s", self.ha_address())

    async def stop(self) -> None:
        await self._stop_parts()
        self._running = None

    async def _stop_parts(self) -> None:
        if self._running == "master":
            self.ack.stop()
            await self.server.stop()
        elif self._running == "slave":
            await self.sync.stop()
            await self.client.stop()

    # -- addresses ------------------------------------------------------------------------------
    def ha_address(self) -> str:
        """The HA address a master registers (``haServerAddr``); "" on a slave."""
        if self._running != "master" or not self.server.port:
            return ""
        return f"{self._host().rpartition(':')[0]}:{self.server.port}"

    def master_ha_address(self) -> str:
        return self.config.ha_master_address or self.learned_ha_addr

    async def follow(self, master_addr: str, ha_server_addr: str) -> None:
        """Controller mode: replicate from this master now (etcd named it), on a new connection
        even when the address is the same (a new epoch); the name servers' answers are not
        used then (``on_registered`` is not wired)."""
        self.master_addr, self.learned_ha_addr = master_addr, ha_server_addr
        if self._running != "slave":
            return
        await self.client.stop()
        hello = self.client.hello
        self.client = HAClient(self.config, self.store, self.master_ha_address, self.ha_auth)
        self.client.hello = hello
        self.client.start()
        log.info("following master %s (HA %s)", master_addr, ha_server_addr)

    async def stop_following(self) -> None:
        """Controller mode: take nothing from any master until ``follow`` names one (a log about
        to be cut must not be appended to meanwhile)."""
        self.master_addr = self.learned_ha_addr = ""
        if self._running == "slave":
            await self.client.stop()

    def on_registered(self, master_addr: str, ha_server_addr: str) -> None:
        """A name server answered a registration (a slave hears its master's addresses; a
        master's answer names none). An empty answer (the master is gone) keeps the last known
        addresses: the slave keeps trying its master until another one is named."""
        if not self.role.is_slave:
            return
        changed = False
        if master_addr and master_addr != self.master_addr:
            self.master_addr, changed = master_addr, True
        if ha_server_addr and ha_server_addr != self.learned_ha_addr:
            self.learned_ha_addr, changed = ha_server_addr, True
        if changed:
            log.info("master of this slave: %s (HA %s)", self.master_addr, self.master_ha_address())
            self.client.address_changed()

    # -- streaming ------------------------------------------------------------------------------
    def pump(self) -> None:
        """Stream what was appended (the durable-save seam calls it once per loop iteration)."""
        if self._running == "master":
            self.server.pump()

    def _dispatched(self, offset: int) -> None:
        """Dispatch thread or loop: appends that did not go through the seam get streamed too,
        while a slave is connected (one that connects later pumps as its first report comes)."""
        loop = self._loop
        if (self._running != "master" or self._pump_scheduled or loop is None
                or not self.server.connections):
            return
        self._pump_scheduled = True
        try:
            call_soon_from_any_thread(loop, self._pump_now)
        except RuntimeError:  # the loop is closing
            self._pump_scheduled = False

    def _pump_now(self) -> None:
        self._pump_scheduled = False
        self.pump()

    # -- what is shown --------------------------------------------------------------------------
    def ha_status(self) -> dict[str, Any]:
        """RocketMQ 5's HARuntimeInfo, plus OrbitMQ's ``lagMs`` per slave and the role."""
        store = self.store
        end = store.max_physical_offset()
        gap = self.config.ha_max_gap_not_in_sync
        now = int(time.time() * 1000)
        links = [self._link_info(link, end, gap, now) for link in self.progress.links()]
        client = self.client.status() if self.role.is_slave else {}
        if client:
            client["masterFlushOffset"] = 0
            client["transferredByteInSecond"] = 0
            client["lastWriteTimestamp"] = 0
        return {
            "master": not self.role.is_slave,
            "role": self.role.role.value,
            "masterCommitLogMaxOffset": end if not self.role.is_slave else 0,
            "inSyncSlaveNums": sum(1 for info in links if info["inSync"]),
            "haConnectionInfo": links,
            "haClientRuntimeInfo": client,
            "haServerAddr": self.ha_address(),
            "masterAddr": self.master_addr,
        }

    def _link_info(self, link: SlaveLink, end: int, gap: int, now: int) -> dict[str, Any]:
        held = link.acked if link.acked is not None else (link.reported or 0)
        return {
            "addr": link.peer,
            "slaveAckOffset": link.acked if link.acked is not None else -1,
            "diff": max(0, end - held),
            "inSync": link.acked is not None and end - link.acked < gap,
            "transferredByteInSecond": 0,
            "transferFromWhere": link.sent_end,
            "lagMs": lag_ms(self.store, held, now),
            "bytesSent": link.bytes_sent,
            "bufferedBytes": link.buffered,
        }

    def runtime_info(self) -> dict[str, str]:
        """The keys GET_BROKER_RUNTIME_INFO adds for replication (text values)."""
        info = {"brokerRole": self.role.role.value, "brokerId": str(self.role.broker_id)}
        if self.role.is_slave:
            status = self.client.status()
            info.update({
                "haMasterAddr": self.master_ha_address(), "masterAddr": self.master_addr,
                "haConnected": "true" if status["connected"] else "false",
                "haClientAddr": str(status["localAddr"]),
                "haRefused": str(status["refused"]),
                "slaveSyncRounds": str(self.sync.rounds),
            })
        else:
            end = self.store.max_physical_offset()
            info.update({
                "haServerAddr": self.ha_address(),
                "haConnectionCount": str(self.progress.connected),
                "inSyncSlaveNums": str(len(self.progress.in_sync(
                    end, self.config.ha_max_gap_not_in_sync))),
            })
        for extra in self.extra_info:
            info.update(extra())
        return info
