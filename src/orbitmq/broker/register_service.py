"""Registration with the name servers, through the transport's RemotingClient (not the SDK).

The broker registers its whole topic table with every name server of ``namesrv_addr`` (a
``;``-separated list) at start and whenever asked (``request``: a role or permission change).
After that, registration is incremental, so that its cost follows what changed, not
how many topics the broker holds:

- A topic created, changed or deleted goes to every name server alone (``topic_changed``):
  REGISTER_TOPIC_IN_NAMESRV (217) or DELETE_TOPIC_IN_NAMESRV (216), RocketMQ 5's single-topic
  registration. Changes in a row coalesce into one round; the last request of a round carries
  the move of the broker's data version (registration_headers), which a name server that saw
  every earlier change takes.
- Every ``register_broker_interval_ms`` a master asks each name server for its data version
  (QUERY_DATA_VERSION, 322, RocketMQ's ``needRegister``; also the heartbeat that keeps it from
  expiring) and sends the whole table only to those whose version differs: a name server
  restarted, or one that missed an incremental round. A name server known to be behind (a
  failed round, a version move refused) gets the whole table without being asked.

A slave registers its whole table every interval, as before: its answers tell it its master's
address, which a version check does not (the name server records no topics from slaves).
Name servers are asked in parallel; one that is down is logged and retried at the next round,
the others are not held up.

A slave learns its master's addresses from the answers (``masterAddr``, ``haServerAddr``). While
no answer of a round names a master (the slave started first, or its master is gone), it
registers again after ``MASTERLESS_RETRY_MIN_S``, doubling up to ``MASTERLESS_RETRY_MAX_S`` (or
the interval, when shorter): a slave started next to its master replicates within a second or
two, and one whose master comes back at another address hears of it within seconds, not a whole
interval (30 s) later.

A name server that answers with a refusal (it knows another live broker under this broker's name
and id, see namesrv.route_table) is a different matter: at start the broker must not serve as
someone else's twin, so ``start`` raises and the broker exits with one line; a refusal at a later
round (the other broker came up while this one was running) is logged as an error at every round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from orbitmq.broker.topic_registration import (
    BrokerIdentity,
    VersionKey,
    query_command,
    topic_command,
    version_accepted,
    version_changed,
)
from orbitmq.config import BrokerConfig
from orbitmq.errors import BrokerError, OrbitMQError
from orbitmq.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnregisterBrokerRequestHeader,
)
from orbitmq.protocol.register_body import body_crc32, encode_compressed
from orbitmq.transport.client import RemotingClient

__all__ = ["RegisterService", "parse_namesrv_addr"]

log = logging.getLogger(__name__)

# A whole registration's plain JSON past this is sent compressed whatever compressed_register
# says (a name server's frames are 16 MiB by default; the compressed form is about a tenth).
PLAIN_REGISTER_BODY_MAX_BYTES = 12 * 1024 * 1024

MASTERLESS_RETRY_MIN_S = 0.5  # a slave without a master registers again this soon, then doubling
MASTERLESS_RETRY_MAX_S = 5.0  # ... up to this
# Topics changed since the last round past which a name server gets the whole table instead of
# one request per topic (a restore of thousands of topics: one body beats thousands of trips).
INCREMENTAL_TOPICS_MAX = 2000


def parse_namesrv_addr(value: str) -> list[str]:
    """``"a:9876;b:9876"`` -> ``["a:9876", "b:9876"]`` (blanks and duplicates dropped)."""
    seen: list[str] = []
    for part in value.replace(",", ";").split(";"):
        addr = part.strip()
        if addr and addr not in seen:
            seen.append(addr)
    return seen


class RegisterService:
    """Keeps this broker registered with every name server.

    Args:
        config: broker identity, name server list, interval and timeout.
        client: the broker's RemotingClient.
        broker_addr: the address clients must use ("ip:port"); a callable, as the port is only
            known once the server listens.
        topics: the topic table to report, called at each whole registration.
        topic_config: one topic's config as registered (None: deleted), for single topics.
        data_version: the topic table's DataVersion now (without copying the table).
    """

    def __init__(self, config: BrokerConfig, client: RemotingClient, broker_addr: Callable[[], str],
                 topics: Callable[[], TopicConfigSerializeWrapper], *,
                 topic_config: Callable[[str], TopicConfig | None] | None = None,
                 data_version: Callable[[], DataVersion] | None = None,
                 ha_addr: Callable[[], str] = lambda: "",
                 broker_id: Callable[[], int] | None = None,
                 on_answer: Callable[[str, str], None] | None = None,
                 master_epoch: Callable[[], int] = lambda: 0) -> None:
        self.config = config
        self.client = client
        self.namesrvs = parse_namesrv_addr(config.namesrv_addr)
        self._broker_addr = broker_addr
        self._topics = topics
        self._topic_config = topic_config or (lambda t: self._topics().topic_config_table.get(t))
        self._data_version = data_version or (lambda: self._topics().data_version)
        self._ha_addr = ha_addr  # the HA server's address ("" when it does not listen)
        self._broker_id = broker_id or (lambda: config.broker_id)
        self._on_answer = on_answer  # (masterAddr, haServerAddr) of each accepting answer
        self._master_epoch = master_epoch  # controller mode: the epoch a master registers with
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiters: list[asyncio.Future[None]] = []  # for the next round's end
        self._pending: dict[str, None] = {}  # topics changed since the last round, in order
        self._whole_wanted = False  # the next round registers the whole table everywhere
        # Per name server: the data version it is known to hold from this broker (None: unknown
        # or behind, it gets the whole table at the next periodic round).
        self._synced: dict[str, VersionKey | None] = dict.fromkeys(self.namesrvs)
        self.registrations = 0  # whole-table registrations accepted, all name servers counted
        self.topic_registrations = 0  # single-topic requests accepted
        self.version_checks = 0  # QUERY_DATA_VERSION answered
        self._master_named = False  # an answer of the last round named a master address

    async def start(self) -> None:
        """Register once with every name server, then keep registering in the background.

        Raises:
            BrokerError: a name server refused the registration (the code and remark are the
                name server's, the remark names it); nothing runs in the background then.
        """
        if not self.namesrvs:
            return
        refusals = [r for r in await self._register_round(self.namesrvs)
                    if isinstance(r, BrokerError)]
        if refusals:
            raise refusals[0]
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def request(self) -> None:
        """Register the whole table with every name server soon (a role or permission change);
        safe to call often."""
        self._whole_wanted = True
        self._wakeup.set()

    def topic_changed(self, topic: str) -> None:
        """Register ``topic`` (or its deletion) with every name server soon, alone."""
        if self.namesrvs:
            self._pending[topic] = None
            self._wakeup.set()

    def registered_after_now(self) -> asyncio.Future[None]:
        """Done when a whole registration round that starts after this call has ended (every
        name server answered or failed); done at once when there is nothing to register with."""
        future = self.published_after_now()
        if not future.done():
            self._whole_wanted = True
        return future

    def published_after_now(self) -> asyncio.Future[None]:
        """Done when a round that starts after this call has ended: the topics changed before
        it are at every reachable name server (a send that created its topic waits for this)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._task is None or self._task.done():
            future.set_result(None)
            return future
        self._waiters.append(future)
        self._wakeup.set()
        return future

    async def stop(self) -> None:
        """Stop the periodic registration and unregister from every name server."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._release_waiters(self._waiters)
        if self.namesrvs and self.registrations:  # a refused broker has nothing to take back
            await asyncio.gather(*(self._unregister(a) for a in self.namesrvs), return_exceptions=True)

    async def _loop(self) -> None:
        interval = self.config.register_broker_interval_ms / 1000
        masterless_wait = MASTERLESS_RETRY_MIN_S
        next_check = time.monotonic() + interval
        while True:
            wait = max(0.0, next_check - time.monotonic())
            if self._on_answer is not None and self._broker_id() != 0 and not self._master_named:
                wait = min(wait, masterless_wait)
                masterless_wait = min(masterless_wait * 2, MASTERLESS_RETRY_MAX_S)
            else:
                masterless_wait = MASTERLESS_RETRY_MIN_S
            try:
                await asyncio.wait_for(self._wakeup.wait(), wait)
                periodic = time.monotonic() >= next_check
            except TimeoutError:
                periodic = True
            if periodic:
                next_check = time.monotonic() + interval
            self._wakeup.clear()
            waiters, self._waiters = self._waiters, []
            try:
                await self._round(periodic=periodic)
            except Exception:  # the loop must outlive one bad round (logged with its cause)
                log.exception("registration round failed")
            finally:
                self._release_waiters(waiters)

    async def _round(self, *, periodic: bool) -> None:
        """One round: the whole table when asked for (and a slave's each period), else the
        topics changed since the last round, then (periodic) the version check."""
        master = self._broker_id() == 0
        if self._whole_wanted or (periodic and not master):
            self._whole_wanted = False
            self._pending.clear()  # the whole table carries them
            await self.register_all()
            return
        if self._pending:
            topics = list(self._pending)
            self._pending.clear()
            if master:  # a slave's topics are its master's: the name server takes none
                await self._register_topics(topics)
        if periodic:
            await self.check_versions()

    @staticmethod
    def _release_waiters(waiters: list[asyncio.Future[None]]) -> None:
        for future in waiters:
            if not future.done():
                future.set_result(None)
        waiters.clear()

    async def register_all(self) -> int:
        """Register the whole table with every name server now; returns how many accepted."""
        return self._log_refusals(await self._register_round(self.namesrvs))

    @staticmethod
    def _log_refusals(results: list[bool | BrokerError]) -> int:
        """Refusals logged as errors (this broker runs while a name server routes its name
        elsewhere); returns how many accepted."""
        for result in results:
            if isinstance(result, BrokerError):
                log.error("%s; clients of that name server do not reach this broker", result.remark)
        return sum(1 for r in results if r is True)

    async def check_versions(self) -> int:
        """The periodic round: each name server that is behind (known to be, or saying so when
        asked its data version) gets the whole table; returns how many got it."""
        # A name server is asked about the version it was last known to hold: topics changed
        # since then are on their way incrementally, and must not cost a whole table.
        held = {a: v for a in self.namesrvs if (v := self._synced.get(a)) is not None}
        known_behind = [a for a in self.namesrvs if a not in held]
        asked = list(held)
        answers = await asyncio.gather(*(self._query(a, DataVersion(*held[a])) for a in asked))
        behind = known_behind + [a for a, changed in zip(asked, answers, strict=True) if changed]
        if not behind:
            return 0
        return self._log_refusals(await self._register_round(behind))

    async def _query(self, namesrv: str, version: DataVersion) -> bool:
        """True when ``namesrv`` does not hold ``version`` from this broker, or would not say;
        False when it does, or cannot be reached (logged; nothing to send it then)."""
        cmd = query_command(self._identity(), version)
        try:
            resp = await self.client.invoke(namesrv, cmd, self.config.register_broker_timeout_ms / 1000)
        except OrbitMQError as e:
            log.warning("data version query failed namesrv=%s err=%s", namesrv, e)
            return False
        self.version_checks += 1
        changed = version_changed(resp)
        if changed:
            log.info("name server %s does not hold this broker's data version %d/%d; "
                     "registering the whole table", namesrv, version.timestamp, version.counter)
        return changed

    async def _register_topics(self, topics: list[str]) -> None:
        version = self._data_version()
        key: VersionKey = (version.timestamp, version.counter)
        await asyncio.gather(*(self._register_topics_with(a, topics, key) for a in self.namesrvs))

    async def _register_topics_with(self, namesrv: str, topics: list[str], key: VersionKey) -> None:
        """The changed topics to one name server, one request each, in order (so that the last
        one's version move comes after every topic it covers); the whole table instead when
        there are too many, or when the name server turns the version move down."""
        base = self._synced.get(namesrv)
        self._synced[namesrv] = None  # until this round has fully gone through
        if len(topics) > INCREMENTAL_TOPICS_MAX:
            self._log_refusals(await self._register_round([namesrv]))
            return
        timeout = self.config.register_broker_timeout_ms / 1000
        identity = self._identity()
        for i, topic in enumerate(topics):
            move = (base, key) if base is not None and i == len(topics) - 1 else None
            cmd = topic_command(identity, topic, self._topic_config(topic), move)
            try:
                resp = await self.client.invoke(namesrv, cmd, timeout)
            except OrbitMQError as e:
                log.warning("topic registration failed namesrv=%s topic=%s err=%s", namesrv, topic, e)
                return
            if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
                # A name server from before single-topic registration: the whole table, now,
                # as brokers of its time did after every change.
                self._log_refusals(await self._register_round([namesrv]))
                return
            if resp.code != ResponseCode.SUCCESS:
                log.warning("topic registration refused namesrv=%s topic=%s code=%d remark=%s",
                            namesrv, topic, resp.code, resp.remark)
                return
            self.topic_registrations += 1
            if move is None:
                continue
            accepted = version_accepted(resp)
            if accepted:
                self._synced[namesrv] = key
            elif accepted is False:  # an OrbitMQ name server that missed something: catch up
                log.info("name server %s is behind this broker's topic table; registering the "
                         "whole table", namesrv)
                self._log_refusals(await self._register_round([namesrv]))

    async def _register_round(self, namesrvs: list[str]) -> list[bool | BrokerError]:
        """One whole registration with ``namesrvs``: True for each that accepted, False for each
        that could not be reached (logged, tried again next round), the refusal of the others."""
        if not namesrvs:
            return []
        wrapper = self._topics()
        key: VersionKey = (wrapper.data_version.timestamp, wrapper.data_version.counter)
        compressed = self.config.compressed_register
        body = encode_compressed(wrapper) if compressed else RegisterBrokerBody(wrapper).to_json()
        if not compressed and len(body) > PLAIN_REGISTER_BODY_MAX_BYTES:
            # A plain table this large would pass the name servers' frame bound (16 MiB by
            # default: ~110,000 topics) and never register: compressed, it does.
            log.info("registering %d topics compressed: the plain table is %d bytes, over %d",
                     len(wrapper.topic_config_table), len(body), PLAIN_REGISTER_BODY_MAX_BYTES)
            body, compressed = encode_compressed(wrapper), True
        self._master_named = False  # set by an answer that names one
        fields = self._header_fields(body, compressed)  # its CRC once for every name server
        results = await asyncio.gather(*(self._register(a, body, fields) for a in namesrvs))
        for addr, result in zip(namesrvs, results, strict=True):
            self._synced[addr] = key if result is True else None
        self.registrations += sum(1 for r in results if r is True)
        return results

    def _identity(self) -> BrokerIdentity:
        cfg = self.config
        return BrokerIdentity(cfg.broker_name, self._broker_addr(), cfg.broker_cluster_name,
                              self._broker_id())

    def _header_fields(self, body: bytes, compressed: bool) -> dict[str, str]:
        """The header of a whole registration; ``bodyCrc32`` as RocketMQ's broker sets it,
        checked by the name server (protocol/register_body.py)."""
        cfg = self.config
        return RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=self._broker_addr(),
            cluster_name=cfg.broker_cluster_name, ha_server_addr=self._ha_addr(),
            broker_id=self._broker_id(), compressed=compressed,
            body_crc32=body_crc32(body), master_epoch=self._master_epoch() or None,
        ).to_ext_fields()

    async def _register(self, namesrv: str, body: bytes,
                        fields: dict[str, str]) -> bool | BrokerError:
        """True when accepted, False when unreachable (logged), the refusal otherwise."""
        cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, fields, body)
        try:
            resp = await self.client.invoke(namesrv, cmd, self.config.register_broker_timeout_ms / 1000)
        except OrbitMQError as e:
            log.warning("register broker failed namesrv=%s err=%s", namesrv, e)
            return False
        if resp.code != ResponseCode.SUCCESS:
            cfg = self.config
            return BrokerError(resp.code, (
                f"name server {namesrv} refused broker {cfg.broker_name} id {self._broker_id()} "
                f"at {self._broker_addr()}: {resp.remark or ResponseCode(resp.code).name}"))
        if self._on_answer is not None:
            try:
                answer = RegisterBrokerResponseHeader.from_ext_fields(resp.ext_fields)
            except OrbitMQError as e:
                log.warning("register broker: name server %s answered a malformed header: %s",
                            namesrv, e)
            else:
                self._master_named |= bool(answer.master_addr)
                self._on_answer(answer.master_addr or "", answer.ha_server_addr or "")
        return True

    async def _unregister(self, namesrv: str) -> None:
        cfg = self.config
        fields = UnregisterBrokerRequestHeader(
            broker_name=cfg.broker_name, broker_addr=self._broker_addr(),
            cluster_name=cfg.broker_cluster_name, broker_id=self._broker_id(),
        ).to_ext_fields()
        try:
            await self.client.invoke(namesrv, RemotingCommand.request(RequestCode.UNREGISTER_BROKER, fields), 3.0)
        except OrbitMQError as e:
            log.warning("unregister broker failed namesrv=%s err=%s", namesrv, e)
