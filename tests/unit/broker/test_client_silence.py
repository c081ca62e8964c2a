"""A client's silence is time without a heartbeat (a lock renewal, a broker's registration) on
the server's clock; time the server's loop stood still, or its clock stepped, is nobody's
silence (``discount`` of ClientManager, QueueLockManager and RouteTable, called by
RemotingServer.discount): a broker whose clock stepped an hour ahead expired every client at
its next scan and closed their connections (CI: tests/faults/test_clock_skew.py)."""

from __future__ import annotations

from processor_support import Peer

from orbitmq.broker.tables.client_manager import ClientManager
from orbitmq.broker.tables.queue_lock_manager import QueueLockManager
from orbitmq.namesrv.route_table import RouteTable
from orbitmq.protocol.bodies import ConsumerData, MessageQueue
from orbitmq.protocol.codes import RequestCode
from orbitmq.protocol.command import RemotingCommand

EXPIRE_MS = 120_000
HOUR_MS = 3_600_000


def _table(now: list[int]) -> tuple[ClientManager, Peer, Peer]:
    clients = ClientManager(clock_ms=lambda: now[0])
    producer, consumer = Peer(), Peer()
    heartbeat = RemotingCommand.request(RequestCode.HEART_BEAT, {})
    clients.register_producer("p", producer, "client-p", heartbeat)  # type: ignore[arg-type]
    clients.register_consumer(ConsumerData("c"), consumer, "client-c", heartbeat)  # type: ignore[arg-type]
    return clients, producer, consumer


def test_a_clock_step_taken_out_expires_nobody() -> None:
    now = [1_000]
    clients, producer, consumer = _table(now)
    now[0] += HOUR_MS  # the clock steps an hour ahead
    clients.discount(HOUR_MS / 1000)
    assert clients.scan_expired(EXPIRE_MS) == ([], [])
    assert producer in clients.producers["p"] and consumer in clients.consumers["c"].channels
    now[0] += EXPIRE_MS + 1  # silence after the step still counts
    changed, doomed = clients.scan_expired(EXPIRE_MS)
    assert changed == ["c"] and set(doomed) == {producer, consumer}


def test_without_it_the_step_expires_every_client() -> None:
    now = [1_000]
    clients, producer, consumer = _table(now)
    now[0] += HOUR_MS
    changed, doomed = clients.scan_expired(EXPIRE_MS)
    assert changed == ["c"] and set(doomed) == {producer, consumer}


def test_an_orderly_consumers_queue_lock_outlives_a_clock_step() -> None:
    now = [1_000]
    locks = QueueLockManager(60_000, clock_ms=lambda: now[0])
    mq = MessageQueue("T", "b", 0)
    assert locks.try_lock("g", [mq], "owner") == [mq]
    now[0] += HOUR_MS
    locks.discount(HOUR_MS / 1000)
    assert locks.try_lock("g", [mq], "other") == []  # still the owner's
    now[0] += 60_001
    assert locks.try_lock("g", [mq], "other") == [mq]  # expired after the step: taken over


def test_a_lock_request_right_after_a_step_has_it_taken_out_first() -> None:
    """A lock request read before the sweep met the step asks the server (check_stall, which
    the controller wires) before it judges any lock's age."""
    now = [1_000]
    unmet: list[float] = []  # what the server's check finds, once
    locks = QueueLockManager(60_000, clock_ms=lambda: now[0],
                             check_stall=lambda: locks.discount(unmet.pop()) if unmet else None)
    mq = MessageQueue("T", "b", 0)
    assert locks.try_lock("g", [mq], "owner") == [mq]
    now[0] += HOUR_MS
    unmet.append(HOUR_MS / 1000)
    assert locks.try_lock("g", [mq], "other") == []
    assert unmet == []


def test_a_name_server_step_drops_no_route() -> None:
    routes = RouteTable()
    routes.register_broker(cluster="c", broker_addr="127.0.0.1:10911", broker_name="b",
                           broker_id=0, ha_server_addr="", topics={}, now_ms=1_000)
    routes.discount(HOUR_MS / 1000)
    assert routes.expire(1_000 + HOUR_MS, EXPIRE_MS) == []
    assert routes.expire(1_000 + HOUR_MS + EXPIRE_MS + 1, EXPIRE_MS) == ["127.0.0.1:10911"]
