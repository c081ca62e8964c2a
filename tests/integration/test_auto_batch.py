"""Auto-batching producers against real brokers on 127.0.0.1 (embedded cluster, real sockets).

What the client sends is observed through :class:`RequestLog`, a thin wrapper around the
producer's ``remoting.invoke`` that records each send request and passes it on unchanged: it
counts, it does not fake. Every wait has a bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from orbitmq.client import (
    Admin,
    AsyncAdmin,
    AsyncProducer,
    AsyncPullConsumer,
    Producer,
    SendResult,
    SendStatus,
)
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import BrokerError, ClientError, OrbitMQError
from orbitmq.protocol.batch import decode_batch
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.message import Message, MessageExt, PropertyKey
from orbitmq.protocol.properties import parse_properties
from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.transport.loop import run

MiB = 1024 * 1024
STORE = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=8 * MiB)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("auto-batch"), store=STORE) as c:
        yield c


def create_topic(namesrv: str, topic: str, queues: int = 4, brokers: int = 1) -> None:
    """Create ``topic`` on every one of ``brokers`` brokers; return once its route shows them."""

    def until(predicate: Callable[[], object], what: str) -> None:
        deadline = time.monotonic() + 10
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)

    with Admin(namesrv) as admin:
        until(lambda: len(admin.cluster_info().broker_addr_table) >= brokers, "brokers")
        admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        until(lambda: topic in admin.list_topics()
              and len(admin.topic_route(topic).queue_datas) == brokers, f"route of {topic}")


@dataclasses.dataclass
class SentRequest:
    code: int
    messages: int  # messages the request carries
    body_size: int
    properties: dict[str, str]  # the request's own (a single message's, or the batch's)


class RequestLog:
    """Records every send request the producer makes (then makes it as usual); ``on_send`` is
    called with each record before the request leaves."""

    def __init__(self, producer: AsyncProducer,
                 on_send: Callable[[SentRequest], None] | None = None) -> None:
        self.sent: list[SentRequest] = []
        remoting = producer.instance.remoting
        original = remoting.invoke

        async def invoke(addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
            if cmd.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
                batch = cmd.code == RequestCode.SEND_BATCH_MESSAGE
                self.sent.append(SentRequest(
                    cmd.code, len(decode_batch(cmd.body)) if batch else 1, len(cmd.body),
                    parse_properties(cmd.ext_fields["i"].encode())))
                if on_send is not None:
                    on_send(self.sent[-1])
            return await original(addr, cmd, timeout)

        remoting.invoke = invoke  # type: ignore[method-assign]

    @property
    def requests(self) -> int:
        return len(self.sent)

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.sent)

    @property
    def batches(self) -> list[SentRequest]:
        return [r for r in self.sent if r.code == RequestCode.SEND_BATCH_MESSAGE]


async def read_topic(namesrv: str, topic: str, count: int, timeout: float = 20.0) -> list[MessageExt]:
    """Every message of ``topic`` once ``count`` have arrived (then checks there are no more)."""
    out: list[MessageExt] = []
    async with AsyncPullConsumer(f"reader-{topic}", namesrv) as consumer:
        queues = await consumer.fetch_queues(topic)
        offsets = dict.fromkeys(queues, 0)
        deadline = time.monotonic() + timeout
        while len(out) < count:
            assert time.monotonic() < deadline, f"only {len(out)} of {count} messages in {topic}"
            for mq in queues:
                result = await consumer.pull(mq, offsets[mq], max_nums=256, suspend=0.05)
                out.extend(result.messages)
                offsets[mq] = result.next_begin_offset
        for mq in queues:
            assert not (await consumer.pull(mq, offsets[mq])).messages, "more than expected"
    return out


def producer(cluster: EmbeddedCluster, group: str, **options: Any) -> AsyncProducer:
    return AsyncProducer(group, cluster.namesrv, auto_batch=True, **options)


# -- many concurrent sends ------------------------------------------------------------------------
def test_concurrent_sends_share_requests_and_each_gets_its_own_result(cluster: EmbeddedCluster):
    topic, n = "AutoBatchMany", 2000
    create_topic(cluster.namesrv, topic)
    msgs = [Message(topic, f"body-{i}".encode() * (1 + i % 7), tags=("even", "odd")[i % 2],
                    keys=[f"key-{i}", f"k{i % 10}"], flag=i % 3, properties={"seq": str(i)})
            for i in range(n)]

    async def scenario() -> tuple[list[SendResult], RequestLog]:
        async with producer(cluster, "ab-many") as p:
            log = RequestLog(p)
            return list(await asyncio.gather(*(p.send(m) for m in msgs))), log

    results, log = run(scenario())
    assert all(r.status is SendStatus.OK for r in results)
    assert len({(r.queue, r.queue_offset) for r in results}) == n
    assert len({r.msg_id for r in results}) == n and len({r.offset_msg_id for r in results}) == n
    # Batching happened: far fewer requests than messages, every message in exactly one.
    assert log.messages == n
    assert log.requests <= n // 50, [r.messages for r in log.sent]
    assert all(r.messages <= 256 and r.body_size <= 64 * 1024 for r in log.sent)
    assert all(r.properties == {PropertyKey.WAIT: "true"} for r in log.batches)

    got = run(read_topic(cluster.namesrv, topic, n))
    by_id = {m.msg_id: m for m in got}
    assert len(by_id) == n
    for msg, result in zip(msgs, results, strict=True):
        stored = by_id[result.msg_id]
        assert stored.uniq_key == result.msg_id  # msg_id is the message's UNIQ_KEY
        assert stored.offset_msg_id == result.offset_msg_id
        assert (MessageQueue(topic, result.queue.broker_name, stored.queue_id),
                stored.queue_offset) == (result.queue, result.queue_offset)
        assert (stored.body, stored.tags, stored.keys, stored.flag, stored.properties["seq"]) == (
            msg.body, msg.tags, msg.keys, msg.flag, msg.properties["seq"])


def test_offset_msg_id_of_a_batched_message_finds_it_on_the_broker(cluster: EmbeddedCluster):
    topic = "AutoBatchLookup"
    create_topic(cluster.namesrv, topic)
    msgs = [Message(topic, f"look-{i}".encode(), keys=f"lk-{i}") for i in range(20)]

    async def scenario() -> None:
        async with producer(cluster, "ab-lookup") as p, AsyncAdmin(cluster.namesrv) as admin:
            log = RequestLog(p)
            results = await asyncio.gather(*(p.send(m) for m in msgs))
            assert [r.messages for r in log.sent] == [20]
            for msg, result in zip(msgs, results, strict=True):
                found = await admin.view_message(result.offset_msg_id)
                assert (found.body, found.msg_id, found.queue_offset) == (
                    msg.body, result.msg_id, result.queue_offset)

    run(scenario())


# -- single sends and the linger -------------------------------------------------------------------
def test_a_lone_send_goes_out_as_a_plain_send_and_promptly(cluster: EmbeddedCluster):
    topic = "AutoBatchLone"
    create_topic(cluster.namesrv, topic)

    async def scenario() -> None:
        async with producer(cluster, "ab-lone") as p:
            log = RequestLog(p)
            await p.send(Message(topic, b"warm-up"))  # connection and route
            loop = asyncio.get_running_loop()
            started = loop.time()
            result = await p.send(Message(topic, b"alone", tags="t", keys="lone-key"))
            elapsed = loop.time() - started
            for i in range(3):  # one after the other: never two in one request
                await p.send(Message(topic, f"next-{i}".encode()))
        assert result.status is SendStatus.OK and elapsed < 0.5, elapsed
        assert [(r.code, r.messages) for r in log.sent] == [(RequestCode.SEND_MESSAGE_V2, 1)] * 5
        assert log.sent[1].properties[PropertyKey.UNIQ_KEY] == result.msg_id
        assert log.sent[1].properties[PropertyKey.TAGS] == "t"

    run(scenario())


def test_batch_max_delay_lingers_and_gathers_sends_of_later_iterations(cluster: EmbeddedCluster):
    topic = "AutoBatchLinger"
    create_topic(cluster.namesrv, topic)

    async def scenario() -> None:
        async with producer(cluster, "ab-linger", batch_max_delay=0.3) as p:
            log = RequestLog(p)
            await p.send(Message(topic, b"warm-up"))
            loop = asyncio.get_running_loop()
            started = loop.time()
            sends = []
            for i in range(10):  # each in its own loop iteration
                sends.append(asyncio.ensure_future(p.send(Message(topic, f"l{i}".encode()))))
                await asyncio.sleep(0)
            results = await asyncio.gather(*sends)
            elapsed = loop.time() - started
        assert 0.25 <= elapsed < 2.0, elapsed
        assert [r.messages for r in log.sent] == [1, 10]
        assert [r.queue_offset - results[0].queue_offset for r in results] == list(range(10))

    run(scenario())


def test_size_and_count_limits_split_batches(cluster: EmbeddedCluster):
    topic = "AutoBatchLimits"
    create_topic(cluster.namesrv, topic)

    async def scenario() -> None:
        async with producer(cluster, "ab-count", batch_max_messages=10) as p:
            log = RequestLog(p)
            await asyncio.gather(*(p.send(Message(topic, b"c" * 10)) for _ in range(95)))
        assert [r.messages for r in log.sent] == [10] * 9 + [5]
        async with producer(cluster, "ab-bytes", batch_max_bytes=2000) as p:
            log = RequestLog(p)
            results = await asyncio.gather(*(p.send(Message(topic, b"b" * 300)) for _ in range(40)))
        assert all(r.status is SendStatus.OK for r in results)
        assert log.messages == 40 and all(r.body_size <= 2000 for r in log.sent)
        assert all(r.messages >= 4 for r in log.sent[:-1]), [r.messages for r in log.sent]
        # A smaller max_message_size caps the default batch_max_bytes too.
        async with producer(cluster, "ab-small", max_message_size=1000) as p:
            log = RequestLog(p)
            await asyncio.gather(*(p.send(Message(topic, b"s" * 100)) for _ in range(40)))
        assert log.messages == 40 and log.batches and all(r.body_size <= 1000 for r in log.sent)

    run(scenario())


# -- sends that are never batched -------------------------------------------------------------------
def test_delayed_selector_oneway_and_big_sends_take_the_plain_path(cluster: EmbeddedCluster):
    topic = "AutoBatchMixed"
    create_topic(cluster.namesrv, topic)
    big = b"0123456789" * 1000  # over compress_over: compressed, alone

    async def scenario() -> tuple[list[SendResult], SendResult, SendResult, SendResult, RequestLog]:
        async with producer(cluster, "ab-mixed") as p:
            log = RequestLog(p)
            queues = await p.fetch_publish_queues(topic)
            plain = [p.send(Message(topic, f"p{i}".encode())) for i in range(8)]
            delayed = p.send(Message(topic, b"later", delay_level=1))
            chosen = p.send(Message(topic, b"chosen"), selector=lambda qs, m, a: qs[a], arg=2)
            large = p.send(Message(topic, big))
            oneway = p.send_oneway(Message(topic, b"oneway"))
            *batched, d, c, b, _ = await asyncio.gather(*plain, delayed, chosen, large, oneway)
            assert c.queue == queues[2]
            return batched, d, c, b, log

    batched, delayed, chosen, large, log = run(scenario())
    assert all(r.status is SendStatus.OK for r in [*batched, delayed, chosen, large])
    assert [r.messages for r in log.batches] == [8]
    singles = [r for r in log.sent if r.code == RequestCode.SEND_MESSAGE_V2]
    assert len(singles) == 3  # the oneway send is not invoked (no answer awaited)
    assert sum(PropertyKey.DELAY in r.properties for r in singles) == 1
    got = {m.body: m for m in run(read_topic(cluster.namesrv, topic, 12))}  # delay level 1: 1 s
    later = got[b"later"]
    assert later.store_timestamp - later.born_timestamp >= 900  # level 1: 1 s
    assert got[b"chosen"].queue_id == chosen.queue.queue_id
    assert got[big].msg_id == large.msg_id and b"oneway" in got


# -- failures ---------------------------------------------------------------------------------------
def test_a_refused_batch_fails_every_member_and_none_hangs(cluster: EmbeddedCluster):
    topic = "AutoBatchRefused"
    create_topic(cluster.namesrv, topic)

    async def scenario() -> None:
        async with producer(cluster, "ab-refused", send_timeout=2.0) as p, \
                AsyncAdmin(cluster.namesrv) as admin:
            log = RequestLog(p)
            await p.send(Message(topic, b"warm-up"))  # the producer now holds a writable route
            await admin.update_topic(topic, perm=4)
            sends = [asyncio.ensure_future(p.send(Message(topic, f"r{i}".encode())))
                     for i in range(50)]
            done, pending = await asyncio.wait(sends, timeout=10)
            assert not pending, f"{len(pending)} sends still waiting"
            errors = [t.exception() for t in sends]
            assert all(isinstance(e, BrokerError) and e.code == ResponseCode.NO_PERMISSION
                       for e in errors), errors
            assert log.batches and log.batches[0].messages == 50  # refused by the broker itself
            assert any("batch of 50 messages" in note for note in errors[0].__notes__)

    run(scenario())


def test_batches_fail_over_to_another_broker_and_fail_together_when_none_is_left(tmp_path):
    topic = "AutoBatchFailover"
    with EmbeddedCluster(tmp_path, brokers=2, store=STORE) as two:
        create_topic(two.namesrv, topic, queues=2, brokers=2)

        async def scenario() -> None:
            async with producer(two, "ab-failover", send_timeout=2.0,
                                unreachable_broker_backoff=0) as p:
                log = RequestLog(p)
                assert len({q.broker_name for q in await p.fetch_publish_queues(topic)}) == 2
                await asyncio.gather(*(p.send(Message(topic, b"both")) for _ in range(20)))
                two.stop_broker(1)  # broker-b: its batches are retried on broker-a
                for _ in range(4):
                    results = await asyncio.wait_for(asyncio.gather(
                        *(p.send(Message(topic, b"a-only")) for _ in range(30))), 10)
                    assert {r.queue.broker_name for r in results} == {"broker-a"}
                    assert len({(r.queue, r.queue_offset) for r in results}) == 30
                two.stop_broker(0)
                sends = [asyncio.ensure_future(p.send(Message(topic, b"none"))) for _ in range(30)]
                done, pending = await asyncio.wait(sends, timeout=10)
                assert not pending, f"{len(pending)} sends still waiting"
                assert all(isinstance(t.exception(), OrbitMQError) for t in sends)
                assert log.requests < log.messages

        run(scenario())


# -- cancellation and shutdown ------------------------------------------------------------------------
def test_cancelling_one_send_leaves_the_rest_of_its_batch_alone(cluster: EmbeddedCluster):
    topic = "AutoBatchCancel"
    create_topic(cluster.namesrv, topic, queues=1)

    async def scenario() -> None:
        async with producer(cluster, "ab-cancel", batch_max_delay=0.5) as p:
            sends = [asyncio.ensure_future(p.send(Message(topic, f"c{i}".encode())))
                     for i in range(20)]
            # Cancelled as its batch leaves: the message is stored all the same.
            log = RequestLog(p, on_send=lambda _: sends[7].cancel())
            await asyncio.sleep(0)  # the sends run (up to their await of the batch) before us
            sends[3].cancel()  # still pending: dropped from the batch
            results = await asyncio.gather(*sends, return_exceptions=True)
        assert isinstance(results[3], asyncio.CancelledError)
        assert isinstance(results[7], asyncio.CancelledError)
        ok = [r for r in results if isinstance(r, SendResult)]
        assert len(ok) == 18 and all(r.status is SendStatus.OK for r in ok)
        assert [r.messages for r in log.sent] == [19]
        bodies = sorted(m.body for m in await read_topic(cluster.namesrv, topic, 19))
        assert bodies == sorted(f"c{i}".encode() for i in range(20) if i != 3)

    run(scenario())


def test_shutdown_sends_what_lingers_and_waits_for_it(cluster: EmbeddedCluster):
    topic = "AutoBatchShutdown"
    create_topic(cluster.namesrv, topic)

    async def scenario() -> None:
        p = await producer(cluster, "ab-shutdown", batch_max_delay=2.5).start()
        await p.fetch_publish_queues(topic)
        sends = [asyncio.ensure_future(p.send(Message(topic, f"s{i}".encode()))) for i in range(30)]
        await asyncio.sleep(0)  # the sends run (up to their await of the batch) before us
        assert not any(t.done() for t in sends)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await p.shutdown()  # does not wait out the 2.5 s linger
        assert loop.time() - started < 2.0
        assert all(t.done() and t.result().status is SendStatus.OK for t in sends)
        with pytest.raises(ClientError):
            await p.send(Message(topic, b"after"))

    run(scenario())
    assert len(run(read_topic(cluster.namesrv, topic, 30))) == 30


# -- the blocking producer ------------------------------------------------------------------------------
def test_blocking_producer_batches_send_async_calls(cluster: EmbeddedCluster):
    topic = "AutoBatchBlocking"
    create_topic(cluster.namesrv, topic)
    with Producer("ab-blocking", cluster.namesrv, auto_batch=True, batch_max_delay=0.1) as p:
        log = RequestLog(p.async_client)  # nothing is being sent yet
        futures = [p.send_async(Message(topic, f"b{i}".encode())) for i in range(300)]
        results = [f.result(timeout=10) for f in futures]
        single = p.send(Message(topic, b"blocking send"))
    assert single.status is SendStatus.OK
    assert len({(r.queue, r.queue_offset) for r in [*results, single]}) == 301
    assert log.messages == 301 and log.requests <= 150, [r.messages for r in log.sent]


# -- options ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [
    {"auto_batch": "yes"},
    {"auto_batch": 1},
    {"batch_max_delay": -0.1},
    {"batch_max_delay": float("nan")},
    {"batch_max_delay": 3.0},  # not shorter than send_timeout
    {"batch_max_delay": "0"},
    {"batch_max_bytes": 0},
    {"batch_max_bytes": 1.5},
    {"batch_max_messages": 0},
    {"batch_max_messages": True},
])
def test_bad_batch_options_are_refused(options: dict[str, Any]):
    with pytest.raises(ClientError, match=next(iter(options))):
        AsyncProducer("ab-options", "127.0.0.1:9876", **options)
    with pytest.raises(ClientError, match=next(iter(options))):
        Producer("ab-options", "127.0.0.1:9876", **options)


def test_good_batch_options_are_kept():
    p = AsyncProducer("ab-options", "127.0.0.1:9876", auto_batch=True, batch_max_delay=0.01,
                      batch_max_bytes=1024, batch_max_messages=1)
    assert p.auto_batch and not AsyncProducer("ab-options", "127.0.0.1:9876").auto_batch
