"""The confirm offset in controller mode (docs/failover.md, "What consumers read"), with real
processes: an etcd server, a name server, a SYNC_MASTER and one slave.

The slave is stopped (SIGSTOP), so a send is appended and dispatched on the master but never
acknowledged by the in-sync set: answered SLAVE_NOT_AVAILABLE once the master took the slave out
of the set, or FLUSH_SLAVE_TIMEOUT while it stays in it (a long not-catch-up time). A pull from the master must not return that message (its queue
already holds it: ``maxOffset`` says so): a consumer could otherwise commit an offset past bytes
a new master may not have. Two long-polled pulls are held meanwhile: one from before the message
arrived (the arrival wakes it; it must go on waiting, not answer NO_NEW_MSG) and one from after.
Once the slave runs again and holds the bytes, both are woken by the confirm offset rising and
return the message well before their 40 s suspend timeout (bounded at 30 s here).

A slave is bounded the same way, by the confirm offset its master announces over the HA stream:
with one of two in-sync slaves stopped, the other holds the message but does not serve it until
the stopped one runs again and the set acknowledges it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from orbitmq import Admin, Message, MessageQueue, Producer, PullConsumer, SendStatus
from orbitmq.client.results import PullResult, PullStatus
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.testing.etcd import EtcdCluster, etcd_binary
from orbitmq.testing.failover_set import FailoverSet, wait_for
from orbitmq.transport import RemotingClient, run

pytestmark = pytest.mark.skipif(etcd_binary() is None,
                                reason="etcd is not installed (Debian: apt-get install etcd-server)")

SUSPEND_S = 40.0  # the held pull's own timeout
WOKEN_WITHIN_S = 30.0  # the bound on its answer once the slave holds the message


@pytest.mark.parametrize(("not_catchup_ms", "answer"), [
    (1500, SendStatus.SLAVE_NOT_AVAILABLE),  # the slave leaves the set, then rejoins
    (120_000, SendStatus.FLUSH_SLAVE_TIMEOUT),  # the slave stays in the set throughout
])
def test_a_master_serves_only_what_its_in_sync_set_holds(tmp_path: Path, not_catchup_ms: int,
                                                         answer: SendStatus) -> None:
    topic = "ConfirmOffset"
    # Long polling's safety-net recheck (5 s by default) would also wake the held pull: slower
    # than the bounds here, so only the confirm offset's own wake-up can answer it in time.
    flags = ["--long-polling-recheck-ms", str(int(SUSPEND_S * 2000))]
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints, members=2,
                                             not_catchup_ms=not_catchup_ms, flags=flags) as brokers:
        master = brokers.wait_master(in_sync=2)
        slave = 2 if master.member == 1 else 1
        first_queue = lambda mqs, msg, arg: sorted(mqs, key=lambda q: q.queue_id)[0]  # noqa: E731
        with Producer("confirm-p", namesrv=brokers.namesrv, send_timeout=20.0,
                      retry_times_when_send_failed=0) as producer, \
                PullConsumer("confirm-c", namesrv=brokers.namesrv) as consumer:
            before = producer.send(Message(topic, b"acknowledged"), first_queue)
            assert before.status is SendStatus.OK
            mq = before.queue
            got = wait_for(lambda: _found(consumer.pull(mq, 0, 32)), "the first message", 30)
            assert [bytes(m.body) for m in got.messages] == [b"acknowledged"]

            os.kill(brokers.brokers[slave].proc.pid, signal.SIGSTOP)
            early: list[PullResult] = []  # held before the message arrives
            late: list[PullResult] = []  # held after it arrived, before it is confirmed
            pullers = []
            try:
                with Admin(brokers.namesrv) as admin:
                    early_puller = _hold(consumer, mq, early)
                    pullers.append(early_puller)
                    _wait_held(admin, brokers.addresses[master.member], 1)
                    answers: list[SendStatus] = []
                    sender = threading.Thread(target=lambda: answers.append(
                        producer.send(Message(topic, b"unacknowledged"), first_queue).status))
                    sender.start()

                    def stored_not_served() -> bool:
                        result = consumer.pull(mq, 1, 32)
                        assert result.status is not PullStatus.FOUND, (
                            "the master served a message its in-sync slave does not hold")
                        assert result.next_begin_offset == 1
                        return result.max_offset >= 2
                    wait_for(stored_not_served, "the master's queue holds the second message", 30)
                    sender.join(30)
                    assert answers == [answer]
                    # The arrival woke the early pull; it must wait on, for the confirm offset.
                    pullers.append(_hold(consumer, mq, late))
                    _wait_held(admin, brokers.addresses[master.member], 2)
                    assert not early, early
                again = consumer.pull(mq, 1, 32)
                assert again.status is PullStatus.NO_NEW_MSG and again.next_begin_offset == 1
            finally:
                os.kill(brokers.brokers[slave].proc.pid, signal.SIGCONT)
            for puller in pullers:
                puller.join(WOKEN_WITHIN_S)
            for held in (early, late):
                assert held, f"a held pull was not answered within {WOKEN_WITHIN_S} s"
                assert held[0].status is PullStatus.FOUND, held[0]
                assert [bytes(m.body) for m in held[0].messages] == [b"unacknowledged"]
            after = consumer.pull(mq, 1, 32)
            assert [bytes(m.body) for m in after.messages] == [b"unacknowledged"]


@dataclass
class _Held:
    """A three-member set whose ``reader`` slave holds two messages in queue ``qid`` of its
    topic: ``acknowledged``, and ``unacknowledged``, which the set never acknowledged because
    member ``stopped`` (in the in-sync set) is stopped."""

    etcd: EtcdCluster
    brokers: FailoverSet
    master: int
    reader: int
    stopped: int
    qid: int


@contextmanager
def _a_slave_holding_an_unacknowledged_message(tmp_path: Path, topic: str) -> Iterator[_Held]:
    """The set of :class:`_Held`; the stopped member runs again on the way out."""
    with EtcdCluster(1) as etcd, FailoverSet(tmp_path, etcd.endpoints, members=3,
                                             not_catchup_ms=120_000) as brokers:
        master = brokers.wait_master(in_sync=3).member
        reader, stopped = [m for m in (1, 2, 3) if m != master]
        at_reader = brokers.addresses[reader]
        first_queue = lambda mqs, msg, arg: sorted(mqs, key=lambda q: q.queue_id)[0]  # noqa: E731
        with Producer(f"{topic}-p", namesrv=brokers.namesrv, send_timeout=20.0,
                      retry_times_when_send_failed=0) as producer:
            before = producer.send(Message(topic, b"acknowledged"), first_queue)
            assert before.status is SendStatus.OK
            qid = before.queue.queue_id
            # The slave has the topic (synced from the master) and the message, and serves it.
            found = wait_for(lambda: _pull_bodies(at_reader, topic, qid, 0)[1] or None,
                             "the slave serves the first message", 30)
            assert found == [b"acknowledged"]
            os.kill(brokers.brokers[stopped].proc.pid, signal.SIGSTOP)
            try:
                answer = producer.send(Message(topic, b"unacknowledged"), first_queue)
                assert answer.status is SendStatus.FLUSH_SLAVE_TIMEOUT  # the stopped one is in the set

                def held_not_served() -> bool:
                    max_offset, bodies = _pull_bodies(at_reader, topic, qid, 1)
                    assert not bodies, "the slave served a message its master's set does not hold"
                    return max_offset >= 2
                wait_for(held_not_served, "the slave's queue holds the second message", 30)
                yield _Held(etcd, brokers, master, reader, stopped, qid)
            finally:
                os.kill(brokers.brokers[stopped].proc.pid, signal.SIGCONT)


def test_a_slave_serves_only_what_its_masters_in_sync_set_holds(tmp_path: Path) -> None:
    topic = "SlaveConfirm"
    with _a_slave_holding_an_unacknowledged_message(tmp_path, topic) as held:
        os.kill(held.brokers.brokers[held.stopped].proc.pid, signal.SIGCONT)
        at_reader = held.brokers.addresses[held.reader]
        served = wait_for(lambda: _pull_bodies(at_reader, topic, held.qid, 1)[1] or None,
                          "the slave serves the second message once the set holds it",
                          WOKEN_WITHIN_S)
        assert served == [b"unacknowledged"]


def test_a_restarted_slave_serves_nothing_until_it_hears_a_confirm_offset(tmp_path: Path) -> None:
    """A slave whose log ends in a message the set never acknowledged is killed and started
    again while its master and etcd are stopped: it hears no confirm offset, and must not serve
    that message (a new master may not have it), nor anything else, until it does."""
    topic = "RestartedSlaveConfirm"
    with _a_slave_holding_an_unacknowledged_message(tmp_path, topic) as held:
        brokers = held.brokers
        brokers.kill(held.reader)
        paused = []
        try:
            for pid in (brokers.brokers[held.master].proc.pid, held.etcd.nodes[0].proc.pid):
                os.kill(pid, signal.SIGSTOP)  # no confirm offset, and no election
                paused.append(pid)
            brokers.start_member(held.reader)
            max_offset, bodies = _pull_bodies(brokers.addresses[held.reader], topic, held.qid, 0)
            assert max_offset >= 2, max_offset  # it holds both...
            assert bodies == [], bodies  # ...and serves neither before it hears a bound
        finally:
            for pid in paused:
                os.kill(pid, signal.SIGCONT)


def _pull_bodies(address: str, topic: str, queue_id: int, offset: int) -> tuple[int, list[bytes]]:
    """One PULL_MESSAGE to the broker at ``address`` (a slave: the SDK pulls from masters):
    (the queue's maxOffset, the bodies found)."""
    header = PullMessageRequestHeader(
        consumer_group="slave-confirm-c", topic=topic, queue_id=queue_id, queue_offset=offset,
        max_msg_nums=32, sys_flag=int(PullSysFlag.SUBSCRIPTION), commit_offset=0,
        suspend_timeout_millis=0, subscription="*")

    async def pull() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(address, RemotingCommand.request(
                RequestCode.PULL_MESSAGE, header.to_ext_fields()), timeout=5)
        finally:
            await client.close()

    answer = run(pull())
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:  # not synced from the master yet
        return -1, []
    assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                           ResponseCode.PULL_OFFSET_MOVED, ResponseCode.PULL_RETRY_IMMEDIATELY), answer
    max_offset = int(answer.ext_fields.get("maxOffset", "-1"))
    found = answer.code == ResponseCode.SUCCESS and answer.body
    return max_offset, [bytes(m.body) for m in iter_stored_messages(answer.body)] if found else []


def _hold(consumer: PullConsumer, mq: MessageQueue, out: list[PullResult]) -> threading.Thread:
    """A long-polled pull from queue offset 1 in a thread; its answer goes to ``out``."""
    thread = threading.Thread(target=lambda: out.append(
        consumer.pull(mq, 1, 32, suspend=SUSPEND_S, timeout=SUSPEND_S + 20)))
    thread.start()
    return thread


def _wait_held(admin: Admin, address: str, count: int) -> None:
    wait_for(lambda: int(admin.broker_runtime_info(address).get("pullHeldCount", 0)) >= count,
             f"the master holds {count} pull(s)", 30)


def _found(result: PullResult) -> PullResult | None:
    return result if result.status is PullStatus.FOUND else None
