"""Controller mode as the broker runs it (docs/failover.md): the broker's member of its broker
set's record in etcd, elections, following, the in-sync set, and fencing.

Two tasks on the broker's loop:

- the **keepalive** renews this member's etcd lease every third of ``controller_lease_ttl_s`` and
  keeps the *fence deadline* (rules.fence_deadline): a master that has not had a renewal granted
  in time stops acknowledging at that deadline (InSyncAck checks it for every answer) and steps
  down; a lease etcd says has expired is replaced, and a master that held it steps down at once;
- the **tick**, every ``controller_poll_interval_ms``, reads the set's keys and acts: a master
  checks that etcd still names it, sets its HA address in the master key, and changes the
  in-sync set (rules.in_sync_changes) by a transaction conditioned on the state's revision (and
  so on the epoch); another member follows the master etcd names (cutting its log where it
  stops agreeing, rules.divergence_point) or, when no master key exists, campaigns
  (rules.election_action), and on winning cuts its own log to the new epoch's start, writes its
  epoch file and becomes master (registering as broker id 0).

etcd being unreachable changes nothing by itself: a member keeps following, a master keeps
serving until its fence deadline. Every record read is checked (rules.py); one that breaks a rule
is logged as an error and nothing is done on its account.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from orbitmq.broker.failover.etcd import Compare, Delete, EtcdClient, EtcdError, KeyValue, Put
from orbitmq.broker.failover.in_sync_ack import InSyncAck
from orbitmq.broker.failover.rules import (
    Campaign,
    CatchUpTracker,
    Follow,
    MasterRecord,
    MemberRecord,
    RecordError,
    Resign,
    SetState,
    Wait,
    election_action,
    fence_deadline,
    in_sync_changes,
    new_epoch_state,
)
from orbitmq.broker.replication import ReplicationService
from orbitmq.broker.role import RoleState
from orbitmq.config import BrokerConfig, BrokerRole, parse_controller_addr
from orbitmq.errors import StoreError
from orbitmq.store.message_store import MessageStore

__all__ = ["FailoverService", "key_prefix"]

log = logging.getLogger(__name__)

ChangeRole = Callable[[BrokerRole, int], Awaitable[None]]
MEMBER_PUBLISH_INTERVAL_S = 1.0  # a member's record is rewritten this often (always when no master)


def new_epoch_campaign(me: int, state: SetState | None, revision: int,
                       local: list[tuple[int, int]], end: int) -> Campaign:
    new, cut, epochs = new_epoch_state(me, state, local, end)
    return Campaign(new, revision, cut, epochs)


def key_prefix(cluster: str, broker_name: str) -> bytes:
    """Where a broker set's keys live in etcd."""
    return f"/orbitmq/failover/{cluster}/{broker_name}/".encode()


class _MasterSide:
    """The HA server's hello policy: admit members following this master's epoch."""

    def __init__(self, service: FailoverService) -> None:
        self.service = service

    def identity(self) -> tuple[int, int]:
        return self.service.epoch, self.service.member

    def admit(self, epoch: int, member: int) -> str | None:
        service = self.service
        if not service.epoch:
            return "this broker is not a master"
        if epoch > service.epoch:
            service.wake("a slave follows a newer epoch")
            return f"it follows epoch {epoch}, this master's is {service.epoch}"
        if epoch != service.epoch:
            return f"it follows epoch {epoch}, this master's is {service.epoch}"
        return "that is this master's own id" if member == service.member else None

    def confirm_offset(self) -> int | None:
        return self.service.read_bound()


class _SlaveSide:
    def __init__(self, service: FailoverService) -> None:
        self.service = service

    def identity(self) -> tuple[int, int]:
        return self.service.follow_epoch, self.service.member

    def confirmed(self, offset: int) -> None:
        self.service.master_confirmed(offset)


class FailoverService:
    """See the module docstring.

    Args:
        config: controller settings and the broker's identity (``broker_id`` is the member id).
        store: the broker's store (its epoch file, its end, a replica's cut).
        role: the broker's role state (``epoch`` is set while master).
        replication: the HA parts; this service installs its hello policies and the in-sync
            durability condition there.
        change_role: the controller's role change (durability, services, registration follow).
        address: the broker's remoting address.
        etcd: a client (default: one on ``controller_addr``).
        on_promoted: called once elected, before the broker takes writes.
    """

    def __init__(self, config: BrokerConfig, store: MessageStore, role: RoleState,
                 replication: ReplicationService, change_role: ChangeRole,
                 address: Callable[[], str], etcd: EtcdClient | None = None,
                 monotonic: Callable[[], float] = time.monotonic,
                 on_promoted: Callable[[], object] = lambda: None) -> None:
        self.config = config
        self.store = store
        self.role = role
        self.replication = replication
        self._change_role = change_role
        self._on_promoted = on_promoted  # before taking writes (promotion.py: stored topics)
        self._address = address
        self._now = monotonic
        self.etcd = etcd or EtcdClient(parse_controller_addr(config.controller_addr),
                                       config.controller_request_timeout_ms / 1000)
        self.member = config.broker_id
        self.prefix = key_prefix(config.broker_cluster_name, config.broker_name)
        self.ttl_s = config.controller_lease_ttl_s
        self.margin_s = config.controller_fence_margin_ms / 1000
        self.poll_s = config.controller_poll_interval_ms / 1000
        self.defer_s = max(1.0, 4 * self.poll_s)
        self.epoch = 0  # the epoch this broker is master of (0: not master)
        self.follow_epoch = 0  # the epoch whose master this broker follows
        self.following: tuple[int, int] | None = None  # (epoch, member) followed
        self.state: SetState | None = None
        self.state_rev = 0
        self.lease_id = 0
        self._deadline = 0.0
        self._changing: frozenset[int] = frozenset()
        self._no_master_since: float | None = None
        self._published = 0.0
        self.tracker = CatchUpTracker(monotonic())
        self.status = "starting"
        self.ack = InSyncAck(replication.progress, config.store.sync_flush_timeout_ms,
                             replication.server.pump, self, monotonic)
        replication.ack = self.ack  # SYNC_MASTER's condition in controller mode
        self.ack.on_advance(lambda end: replication.server.confirm_changed())
        # The followed master's confirm offset, once heard; until then a SYNC_MASTER set's slave
        # serves nothing (its log may end in bytes the set never acknowledged, which a new
        # master may not have), an ASYNC_MASTER set's everything (it promises no more).
        self.slave_bound: int | None = (0 if config.broker_role is BrokerRole.SYNC_MASTER
                                        else None)
        self._slave_listeners: list[Callable[[int], None]] = []
        replication.server.hello = _MasterSide(self)
        replication.client.hello = _SlaveSide(self)
        replication.extra_info.append(self.runtime_info)
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lock = asyncio.Lock()  # role changes one at a time (tick and fence)
        # A member elected with a copy damaged after it was checked (a bit flipped on its disk)
        # must not serve it: every member checks what it serves, and a master that meets a
        # damaged message hands the set over to a member with a copy (``_corrupt``).
        store.check_reads = True
        store.corruption.add_master_listener(self._corrupt_found)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kept_corrupt: set[int] = set()  # damaged offsets kept, alone in the in-sync set

    # -- what InSyncAck asks -----------------------------------------------------------------------
    def required(self) -> frozenset[int]:
        members = self.state.in_sync if self.state is not None and self.epoch else frozenset()
        return (members | self._changing) - {self.member}

    def deadline(self) -> float:
        return self._deadline if self.epoch else 0.0

    # -- what consumers may read -------------------------------------------------------------------
    def read_bound(self) -> int | None:
        """The commit log end pulls and POP may serve up to: the confirm offset while this broker
        is a SYNC_MASTER (InSyncAck.committed: every in-sync member holds the bytes below it), so
        no consumer reads, and commits an offset past, a tail a new master may not have; as a
        slave, the last confirm offset its master announced over the HA stream (0 until it
        heard one: nothing is served). None (no bound) as an ASYNC_MASTER, which promises nothing
        beyond its own log, and as its slave before it heard a confirm offset
        (docs/failover.md)."""
        if self.epoch:
            return self.ack.committed if self.role.role is BrokerRole.SYNC_MASTER else None
        return self.slave_bound

    def on_confirm(self, listener: Callable[[int], None]) -> None:
        """``listener(end)`` on the loop whenever ``read_bound`` rises: as a master (the confirm
        offset) and as a slave (its master's announcement)."""
        self.ack.on_advance(listener)
        self._slave_listeners.append(listener)

    def master_confirmed(self, offset: int) -> None:
        """A slave heard its master's confirm offset (the HA stream's confirm frame)."""
        rose = self.slave_bound is None or offset > self.slave_bound
        self.slave_bound = offset
        if rose and not self.epoch:
            for listener in self._slave_listeners:
                try:
                    listener(offset)
                except Exception:
                    log.exception("a confirm offset listener failed")

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._tick_loop(), name="orbitmq-failover-tick"),
                       loop.create_task(self._keepalive_loop(), name="orbitmq-failover-lease")]

    async def stop(self) -> None:
        """Stop; a master revokes its lease so that another member is elected at once."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self.lease_id:
            self._deadline = 0.0  # no acknowledgement from here on
            try:
                await self.etcd.lease_revoke(self.lease_id)
            except EtcdError as e:
                log.warning("could not revoke the etcd lease at stop (it expires): %s", e)
        await self.etcd.close()

    def wake(self, why: str) -> None:
        log.info("failover: checking etcd now: %s", why)
        self._wakeup.set()

    # -- the lease ---------------------------------------------------------------------------------
    async def _new_lease(self) -> None:
        sent = self._now()
        grant = await self.etcd.lease_grant(self.ttl_s)
        self.lease_id = grant.lease_id
        self._deadline = fence_deadline(sent, min(grant.ttl_s, self.ttl_s), self.margin_s)
        log.info("failover: etcd lease %x granted (TTL %d s)", grant.lease_id, grant.ttl_s)

    async def _keepalive_loop(self) -> None:
        interval = self.ttl_s / 3
        while True:
            sent = self._now()
            if self.lease_id:
                try:
                    grant = await self.etcd.lease_keepalive(self.lease_id)
                except EtcdError as e:
                    log.warning("failover: lease renewal failed (%s); fence in %.1f s", e,
                                self._deadline - self._now())
                else:
                    if grant.ttl_s > 0:
                        self._deadline = fence_deadline(sent, min(grant.ttl_s, self.ttl_s),
                                                        self.margin_s)
                    else:
                        log.error("failover: etcd lease %x expired", self.lease_id)
                        self.lease_id = 0
                        self._deadline = 0.0
            if self.epoch and self._now() >= self._deadline:
                await self._fence()
            until = sent + interval
            if self.epoch:
                until = min(until, self._deadline)
            await asyncio.sleep(max(0.01, until - self._now()))

    async def _fence(self) -> None:
        """The deadline passed: sends are refused from now on (InSyncAck already refuses to
        acknowledge), then the master steps down once the tick is not busy with etcd."""
        self.role.accepts_writes = False  # read per send; change_role below makes it whole
        log.error("failover: master of epoch %d fenced: its lease was not renewed in time",
                  self.epoch)
        async with self._lock:
            await self._step_down("its etcd lease was not renewed in time (fenced)")

    def _corrupt_found(self, offset: int) -> None:
        """The store's master listener (a reader's thread, or the loop): the corrupt message at
        ``offset`` is handled on the loop."""
        loop = self._loop
        if loop is None or not self.epoch:
            return
        try:
            loop.call_soon_threadsafe(lambda: self._tasks.append(
                loop.create_task(self._corrupt(offset), name="orbitmq-failover-corrupt")))
        except RuntimeError:  # the loop closed (shutdown)
            pass

    async def _corrupt(self, offset: int) -> None:
        """This master's log holds a damaged message at ``offset``. When another in-sync member
        holds every acknowledged byte, the master stops acknowledging, steps down, cuts its log
        at the damage as a slave would (not a candidate until it holds its old end again) and
        follows the member elected next, which serves the message intact. Alone in the in-sync
        set it keeps its log: the message is not served (its queue's reads stop before it) and
        nothing acknowledged after it is dropped."""
        async with self._lock:
            state = self.state
            if not self.epoch or state is None:
                return
            others = sorted(state.in_sync - {self.member})
            if not others:
                if offset not in self._kept_corrupt:  # once: every read of its queue meets it
                    self._kept_corrupt.add(offset)
                    log.error("failover: master of epoch %d keeps the corrupt message at offset "
                              "%d: no other in-sync member holds a copy", self.epoch, offset)
                return
            self.role.accepts_writes = False
            await self._step_down(f"its commit log is corrupt at offset {offset}; in-sync "
                                  f"members {others} hold a copy")
            try:
                report = self.store.truncate_replica(offset)
            except StoreError as e:
                log.error("failover: the corrupt message at offset %d was not cut: %s", offset, e)
                return
            self.store.corruption.cut(report.new_end, report.old_end)
            log.warning("failover: log cut from %d to %d at the corrupt message (%d messages "
                        "fetched again from the next master)", report.old_end, report.new_end,
                        report.messages_dropped)

    # -- the tick ----------------------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        while True:
            self._wakeup.clear()
            try:
                async with self._lock:
                    await self._tick()
            except EtcdError as e:
                self.status = f"etcd unreachable: {e}"
                log.warning("failover: %s", self.status)
            except RecordError as e:
                self.status = f"etcd holds a record that breaks the rules: {e}"
                log.error("failover: %s", self.status)
            except StoreError as e:
                self.status = f"store: {e}"
                log.error("failover: %s", self.status)
            except Exception:
                log.exception("failover tick failed")
            try:
                await asyncio.wait_for(self._wakeup.wait(), self.poll_s)
            except TimeoutError:
                pass

    async def _tick(self) -> None:
        if not self.lease_id:
            await self._new_lease()
        kvs, _ = await self.etcd.range(self.prefix, prefix=True)
        state, state_kv, master, members = self._parse(kvs)
        self.state, self.state_rev = state, state_kv.mod_revision if state_kv else 0
        if self.epoch:
            await self._as_master(master)
        else:
            await self._as_member(master, members)
        now = self._now()
        if master is None or now - self._published >= MEMBER_PUBLISH_INTERVAL_S:
            await self._publish_member()
            self._published = now

    def _parse(self, kvs: list[KeyValue]) -> tuple[SetState | None, KeyValue | None,
                                                   MasterRecord | None, dict[int, MemberRecord]]:
        state = master = None
        state_kv = None
        members: dict[int, MemberRecord] = {}
        for kv in kvs:
            name = kv.key[len(self.prefix):].decode("utf-8", "replace")
            if name == "state":
                state, state_kv = SetState.from_json(kv.value), kv
            elif name == "master":
                master = MasterRecord.from_json(kv.value)
            elif name.startswith("members/"):
                record = MemberRecord.from_json(kv.value)
                if name != f"members/{record.member}":
                    raise RecordError(f"key {name} holds member {record.member}")
                members[record.member] = record
        return state, state_kv, master, members

    async def _publish_member(self) -> None:
        record = MemberRecord(self.member, self._address(), self.store.max_physical_offset(),
                              self.store.epochs.last_epoch())
        await self.etcd.txn([], [Put(self.prefix + f"members/{self.member}".encode(),
                                     record.to_json(), self.lease_id)])

    # -- as master ---------------------------------------------------------------------------------
    async def _as_master(self, master: MasterRecord | None) -> None:
        state = self.state
        if (master is None or master.member != self.member or master.epoch != self.epoch
                or state is None or state.epoch != self.epoch):
            await self._step_down("etcd no longer names it master of epoch "
                                  f"{self.epoch} (master key: {master})")
            return
        self._no_master_since = None
        ha = self.replication.ha_address()
        if master.ha_addr != ha or master.addr != self._address():
            record = MasterRecord(self.epoch, self.member, self._address(), ha)
            await self.etcd.txn([Compare(self.prefix + b"master", "LEASE", self.lease_id)],
                                [Put(self.prefix + b"master", record.to_json(), self.lease_id)])
        await self._maintain_in_sync(state)
        self.status = f"master of epoch {self.epoch}"

    async def _maintain_in_sync(self, state: SetState) -> None:
        acked = self.replication.progress.acked_by_member()
        end = self.store.max_physical_offset()
        now = self._now()
        self.tracker.observe(now, end, acked)
        committed = (self.ack.committed if self.role.role is BrokerRole.SYNC_MASTER else end)
        remove, add = in_sync_changes(
            self.member, state.in_sync, acked, end, committed, self.tracker, now,
            self.config.ha_max_time_slave_not_catchup_ms / 1000,
            self.config.ha_max_gap_not_in_sync)
        if not remove and not add:
            return
        new = state.with_in_sync((state.in_sync - remove) | add)
        self._changing = remove | add  # required for acknowledgements until etcd has it
        try:
            result = await self.etcd.txn(
                [Compare(self.prefix + b"state", "MOD", self.state_rev),
                 Compare(self.prefix + b"master", "LEASE", self.lease_id)],
                [Put(self.prefix + b"state", new.to_json())])
        finally:
            if self.state is state:
                self._changing = frozenset()
        if not result.succeeded:
            await self._step_down("the state changed under it (another master?)")
            return
        self.state, self.state_rev = new, result.revision
        log.warning("failover: in-sync set of epoch %d is now %s (removed %s, added %s)",
                    self.epoch, sorted(new.in_sync), sorted(remove), sorted(add))
        self.ack.recheck()

    async def _step_down(self, why: str) -> None:
        if not self.epoch:
            return
        log.error("failover: master of epoch %d steps down: %s", self.epoch, why)
        self.epoch = 0
        self.role.epoch = 0
        self.following = None
        self._changing = frozenset()
        await self._change_role(BrokerRole.SLAVE, self.member)
        await self.replication.stop_following()
        self.status = f"stepped down: {why}"
        self._wakeup.set()

    # -- as another member -------------------------------------------------------------------------
    async def _as_member(self, master: MasterRecord | None,
                         members: dict[int, MemberRecord]) -> None:
        now = self._now()
        if master is None:
            if self._no_master_since is None:
                self._no_master_since = now
        else:
            self._no_master_since = None
            # A record naming this member while it is not master is one it must resign (below),
            # HA address or not: a campaign whose answer was lost (etcd took the transaction,
            # the reply never came back, or came after the request's timeout) leaves a record
            # without one, on this member's lease, which its own renewals keep alive; waiting
            # for that "starting" master would wait for ever, and every other member with it.
            if not master.ha_addr and master.member != self.member:
                self.status = f"master {master.member} of epoch {master.epoch} is starting"
                return
        end = self.store.max_physical_offset()
        action = election_action(
            self.member, self.state, self.state_rev, master, self.store.epochs.entries,
            end, {m: r for m, r in members.items()},
            now - (self._no_master_since or now), self.defer_s,
            self.store.corruption.repair_pending(end))
        if isinstance(action, Follow):
            await self._follow(action)
        elif isinstance(action, Campaign):
            await self._campaign(action)
        elif isinstance(action, Resign):
            await self.etcd.txn([Compare(self.prefix + b"master", "LEASE", self.lease_id)],
                                [Delete(self.prefix + b"master")])
            self.status = f"resigned as master of epoch {action.record.epoch} (it had stepped down)"
            log.warning("failover: %s", self.status)
        else:
            assert isinstance(action, Wait)
            self.status = action.why

    async def _follow(self, action: Follow) -> None:
        record = action.record
        if self.following == (record.epoch, record.member):
            refused = self.replication.client.refused
            self.status = (f"following member {record.member}, master of epoch {record.epoch}"
                           + (f"; replication refused: {refused}" if refused else ""))
            return
        await self.replication.stop_following()
        self._cut(action.cut)
        self.store.corruption.forget_repair()  # the new master's log is what it repairs from
        if list(action.epochs) != self.store.epochs.entries:
            self.store.epochs.replace(action.epochs)
        self.follow_epoch = record.epoch
        self.following = (record.epoch, record.member)
        await self.replication.follow(record.addr, record.ha_addr)
        log.info("failover: following member %d at %s, master of epoch %d", record.member,
                 record.addr, record.epoch)

    def _cut(self, cut: int) -> None:
        end = self.store.max_physical_offset()
        if cut < end:
            report = self.store.truncate_replica(cut)
            log.warning("failover: log cut from %d to %d (%d unacknowledged messages dropped)",
                        report.old_end, report.cut, report.messages_dropped)

    async def _campaign(self, action: Campaign) -> None:
        # Nothing may be appended between computing the cut and the new epoch: stop taking the
        # old master's stream first, then decide again on the log as it now ends.
        if self.following is not None:
            await self.replication.stop_following()
            self.following = None
        action = new_epoch_campaign(self.member, self.state, self.state_rev,
                                    self.store.epochs.entries, self.store.max_physical_offset())
        new = action.state
        compares = [Compare(self.prefix + b"master", "CREATE", 0)]
        if action.seen_revision:
            compares.append(Compare(self.prefix + b"state", "MOD", action.seen_revision))
        else:
            compares.append(Compare(self.prefix + b"state", "CREATE", 0))
        record = MasterRecord(new.epoch, self.member, self._address(), "")
        if self._now() >= self._deadline:
            self.status = "not campaigning: this member's lease is not known to hold"
            return
        result = await self.etcd.txn(compares, [
            Put(self.prefix + b"state", new.to_json()),
            Put(self.prefix + b"master", record.to_json(), self.lease_id)])
        if not result.succeeded:
            self.status = f"lost the election for epoch {new.epoch}"
            return
        self.state, self.state_rev = new, result.revision
        log.warning("failover: elected master of epoch %d (in-sync set %s, log cut at %d)",
                    new.epoch, sorted(new.in_sync), action.cut)
        self._cut(action.cut)
        self.store.epochs.replace(action.epochs)
        self.tracker = CatchUpTracker(self._now())
        self._on_promoted()
        self.epoch = self.role.epoch = new.epoch
        await self._change_role(self.config.broker_role, 0)
        self._wakeup.set()  # publish the HA address at once

    # -- shown -------------------------------------------------------------------------------------
    def runtime_info(self) -> dict[str, str]:
        state = self.state
        return {
            "controllerMode": "true",
            "controllerMember": str(self.member),
            "controllerEpoch": str(state.epoch if state is not None else 0),
            "controllerMasterEpoch": str(self.epoch),
            "controllerInSync": ",".join(map(str, sorted(state.in_sync))) if state else "",
            "controllerStatus": self.status,
        }
