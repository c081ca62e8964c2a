"""The name server's tables: which brokers are alive and which queues each topic has on them.

Pure state, no I/O: handlers feed it registrations and ask it for routes; a timer asks it to drop
brokers that went silent. Times are milliseconds passed in by the caller so tests need no clock.

Broker identity: a broker name and id (0 the master, >0 a slave) belong to one address at a time.
A registration of a name and id that a different address holds is refused while the holder is
alive (RocketMQ 4.x silently hands the route to the newcomer, so a second broker started by
mistake with the same name steals the clients of the first). The holder stops holding when it
unregisters, when its connection to the name server closes, or when it has been silent for
``broker_expire_ms``; a broker that restarts on the same address is the same broker.

Controller mode (docs/failover.md): a master registers with its epoch. A registration as id 0
with a higher epoch than the holder's takes the id at once (an elected master must not wait for
a deposed one to go silent); one with a lower epoch is refused (a deposed master that has not
noticed yet). The table still holds nothing that heartbeats do not bring again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import ResponseCode

__all__ = ["TopicQueues", "BrokerLiveInfo", "RegisterResult", "RouteTable", "PERM_READ", "PERM_WRITE"]

log = logging.getLogger(__name__)

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4


@dataclasses.dataclass(frozen=True, slots=True)
class TopicQueues:
    """The queues one broker serves for one topic. Immutable and interned by the table: the
    100,000 topics of a broker mostly share a handful of shapes (8/8 queues, read-write), so
    a topic costs a reference, not an object (see RouteTable's memory note)."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0


DataVersionKey = tuple[int, int]  # a broker's DataVersion (timestamp, counter)


@dataclasses.dataclass(slots=True)
class BrokerLiveInfo:
    last_update_ms: int
    broker_name: str
    ha_server_addr: str = ""
    master_epoch: int = 0
    # The DataVersion of the topic table this name server holds from the broker: what its last
    # REGISTER_BROKER carried, moved on by incremental registrations that start from it.
    data_version: DataVersionKey | None = None


@dataclasses.dataclass(frozen=True)
class RegisterResult:
    master_addr: str
    ha_server_addr: str


@dataclasses.dataclass
class _Broker:
    cluster: str
    name: str
    addrs: dict[int, str] = dataclasses.field(default_factory=dict)


class RouteTable:
    """Brokers, clusters and topic routes as brokers report them.

    Memory per topic is what bounds a name server at scale (100,000 topics of 8
    queues on 2 broker sets): a topic holds its name, a small dict of broker name -> queues,
    and references to interned TopicQueues (``_shapes``) and interned broker names, nothing
    per queue. tests/unit/namesrv measures the bytes per topic with tracemalloc.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._topics: dict[str, dict[str, TopicQueues]] = {}  # topic -> broker name -> queues
        # Every distinct TopicQueues and broker name once (few of either): see the class note.
        self._shapes: dict[TopicQueues, TopicQueues] = {}
        self._names: dict[str, str] = {}
        self._brokers: dict[str, _Broker] = {}  # broker name -> cluster and addresses by id
        self._clusters: dict[str, set[str]] = {}  # cluster -> broker names
        self._live: dict[str, BrokerLiveInfo] = {}  # broker address -> last heartbeat

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topics: dict[str, TopicQueues],
        now_ms: int,
        expire_ms: int | None = None,
        master_epoch: int = 0,
        data_version: DataVersionKey | None = None,
    ) -> RegisterResult:
        """Record a broker's registration; a master's topic list replaces what it had before,
        and ``data_version`` is the version QUERY_DATA_VERSION compares with from now on.

        Raises:
            BrokerError: ILLEGAL_OPERATION when another address holds ``broker_name`` and
                ``broker_id`` and has been heard from within ``expire_ms`` (always, when None).
        """
        with self._lock:
            self._check_identity(broker_name, broker_id, broker_addr, now_ms, expire_ms,
                                 master_epoch)
            info = self._live.get(broker_addr)
            if info is not None and info.broker_name != broker_name:
                # this address was another broker before (restarted under a new name)
                self.remove_broker_addr(broker_addr)
            self._clusters.setdefault(cluster, set()).add(broker_name)
            broker = self._brokers.get(broker_name)
            if broker is None:
                broker = self._brokers[broker_name] = _Broker(cluster, broker_name)
            # An address moving to another id (a slave promoted, a restart with a new id) replaces it.
            for bid, addr in list(broker.addrs.items()):
                if addr == broker_addr and bid != broker_id:
                    del broker.addrs[bid]
            first = broker.addrs.get(broker_id) != broker_addr
            broker.addrs[broker_id] = broker_addr
            if broker_id == 0:
                for topic, queues in self._topics.items():
                    if topic not in topics:
                        queues.pop(broker_name, None)
                name = self._intern_name(broker_name)
                for topic, tq in topics.items():
                    self._topics.setdefault(topic, {})[name] = self._intern(tq)
                self._drop_empty_topics()
            self._live[broker_addr] = BrokerLiveInfo(now_ms, broker_name, ha_server_addr,
                                                     master_epoch, data_version)
            if first:
                log.info("broker registered name=%s addr=%s id=%d", broker_name, broker_addr, broker_id)
            master = broker.addrs.get(0, "") if broker_id != 0 else ""
            master_ha = self._live[master].ha_server_addr if master in self._live else ""
            return RegisterResult(master, master_ha)

    def _check_identity(self, name: str, broker_id: int, addr: str, now_ms: int,
                        expire_ms: int | None, epoch: int = 0) -> None:
        broker = self._brokers.get(name)
        holder = broker.addrs.get(broker_id) if broker is not None else None
        if holder is None or holder == addr:
            return
        info = self._live.get(holder)
        if info is None or (expire_ms is not None and now_ms - info.last_update_ms > expire_ms):
            log.warning("broker %s id %d moves from %s (gone) to %s", name, broker_id, holder, addr)
            self.remove_broker_addr(holder)
            return
        if broker_id == 0 and epoch and info.master_epoch:
            if epoch > info.master_epoch:
                log.warning("broker %s id 0 moves from %s (epoch %d) to %s (epoch %d)", name,
                            holder, info.master_epoch, addr, epoch)
                self.remove_broker_addr(holder)
                return
            remark = (f"{name} id 0 is held by {holder}, master of epoch {info.master_epoch}; "
                      f"this broker's epoch {epoch} is not newer")
            log.warning("registration refused addr=%s: %s", addr, remark)
            raise BrokerError(ResponseCode.ILLEGAL_OPERATION, remark)
        remark = (f"{name} id {broker_id} is held by {holder}, which is alive (use another "
                  "broker name or id, or stop that broker)")
        log.warning("registration refused addr=%s: %s", addr, remark)
        raise BrokerError(ResponseCode.ILLEGAL_OPERATION, remark)

    def unregister_broker(self, *, broker_addr: str, broker_name: str, broker_id: int) -> None:
        with self._lock:
            self._live.pop(broker_addr, None)
            broker = self._brokers.get(broker_name)
            if broker is None:
                return
            if broker.addrs.get(broker_id) == broker_addr:
                del broker.addrs[broker_id]
            log.info("broker unregistered name=%s addr=%s", broker_name, broker_addr)
            if not broker.addrs:
                del self._brokers[broker_name]
                names = self._clusters.get(broker.cluster)
                if names is not None:
                    names.discard(broker_name)
                    if not names:
                        del self._clusters[broker.cluster]
                for queues in self._topics.values():
                    queues.pop(broker_name, None)
                self._drop_empty_topics()

    def remove_broker_addr(self, broker_addr: str) -> None:
        """Forget whatever broker was at ``broker_addr`` (its connection closed, or it expired)."""
        with self._lock:
            info = self._live.get(broker_addr)
            name = info.broker_name if info else None
            if name is None:
                return
            broker = self._brokers.get(name)
            bid = next((i for i, a in (broker.addrs.items() if broker else ()) if a == broker_addr), None)
            self.unregister_broker(broker_addr=broker_addr, broker_name=name, broker_id=bid or 0)

    def discount(self, seconds: float) -> None:
        """Take ``seconds`` out of every broker's silence: the name server's loop stood still
        that long or its clock stepped (RemotingServer.discount); registrations sent meanwhile
        wait unread. Without this a step of ``broker_expire_ms`` or more dropped every route."""
        shift = int(seconds * 1000)
        with self._lock:
            for info in self._live.values():
                info.last_update_ms += shift

    def expire(self, now_ms: int, expire_ms: int) -> list[str]:
        """Drop brokers silent for longer than ``expire_ms``; returns their addresses."""
        with self._lock:
            dead = [a for a, info in self._live.items() if now_ms - info.last_update_ms > expire_ms]
            for addr in dead:
                log.warning("broker expired addr=%s silent_ms>%d", addr, expire_ms)
                self.remove_broker_addr(addr)
            return dead

    def _intern(self, tq: TopicQueues) -> TopicQueues:
        return self._shapes.setdefault(tq, tq)

    def _intern_name(self, name: str) -> str:
        return self._names.setdefault(name, name)

    # -- incremental registration --------------------------------------------------
    def register_topic(self, topic: str, queues: dict[str, TopicQueues]) -> bool:
        """One topic's queues on the named brokers (REGISTER_TOPIC_IN_NAMESRV), replacing what
        those brokers had for it. As RocketMQ's ``registerTopic``: nothing is recorded when a
        broker name is not registered (False), since a route must name a broker address."""
        with self._lock:
            if not queues or any(name not in self._brokers for name in queues):
                return False
            held = self._topics.setdefault(topic, {})
            for name, tq in queues.items():
                held[self._intern_name(name)] = self._intern(tq)
            return True

    def unregister_topic(self, topic: str, broker_name: str) -> None:
        """``broker_name``'s queues of ``topic`` (the topic goes when no broker has any left)."""
        with self._lock:
            queues = self._topics.get(topic)
            if queues is not None:
                queues.pop(broker_name, None)
                if not queues:
                    del self._topics[topic]

    def query_data_version(self, broker_addr: str, broker_name: str, version: DataVersionKey,
                           now_ms: int) -> bool:
        """QUERY_DATA_VERSION: True when the table held from the broker at ``broker_addr`` is
        not ``version`` (or nothing is held: a restarted name server, an expired broker).

        A query is also the broker's heartbeat (RocketMQ's ``updateBrokerInfoUpdateTimestamp``):
        a broker whose version is current registers nothing else for hours, and must not
        expire for it."""
        with self._lock:
            info = self._live.get(broker_addr)
            if info is None or info.broker_name != broker_name:
                return True
            info.last_update_ms = now_ms
            return info.data_version != version

    def advance_data_version(self, broker_addr: str, broker_name: str, base: DataVersionKey,
                             version: DataVersionKey) -> bool:
        """An incremental registration's version move: taken (True) only when this name server
        holds ``base`` from the broker, i.e. it saw every change before the ones just sent."""
        with self._lock:
            info = self._live.get(broker_addr)
            if info is None or info.broker_name != broker_name or info.data_version != base:
                return False
            info.data_version = version
            return True

    def is_registered(self, broker_addr: str, broker_name: str) -> bool:
        with self._lock:
            info = self._live.get(broker_addr)
            return info is not None and info.broker_name == broker_name

    def _drop_empty_topics(self) -> None:
        for topic in [t for t, q in self._topics.items() if not q]:
            del self._topics[topic]

    # -- queries ----------------------------------------------------------------------------
    def topic_route(self, topic: str) -> tuple[dict[str, TopicQueues], dict[str, tuple[str, dict[int, str]]]] | None:
        """(queues by broker name, (cluster, addresses by id) by broker name) or None if unknown."""
        with self._lock:
            queues = self._topics.get(topic)
            if not queues:
                return None
            brokers = {
                name: (self._brokers[name].cluster, dict(self._brokers[name].addrs))
                for name in queues
                if name in self._brokers
            }
            if not brokers:
                return None
            return dict(queues), brokers

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._topics)

    def topic_count(self) -> int:
        """How many topics have a route (without sorting 100,000 names for a gauge)."""
        with self._lock:
            return len(self._topics)

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)

    def cluster_info(self) -> tuple[dict[str, tuple[str, dict[int, str]]], dict[str, set[str]]]:
        """(brokers by name as (cluster, addrs), broker names by cluster)."""
        with self._lock:
            brokers = {n: (b.cluster, dict(b.addrs)) for n, b in self._brokers.items()}
            return brokers, {c: set(n) for c, n in self._clusters.items()}

    def topics_of_cluster(self, cluster: str) -> list[str]:
        """Topics with queues on a broker of ``cluster`` ([] for an unknown cluster)."""
        with self._lock:
            names = self._clusters.get(cluster, set())
            return sorted(t for t, queues in self._topics.items() if names & queues.keys())

    def live_broker_addrs(self) -> list[str]:
        with self._lock:
            return list(self._live)
