"""Rows given as columns (protocol.column_batch) sent by the SDK to a real broker on 127.0.0.1:
``send_columns`` at least once and ``send_columns_half`` as transaction batches, Arrow buffers
read in place, what a consumer then reads, and a bad row in the middle."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest

from orbitmq.client import Admin, AsyncProducer, AsyncPullConsumer
from orbitmq.client.producer.transaction_producer import (
    AsyncTransactionProducer,
    LocalTransactionState,
)
from orbitmq.client.producer.transaction_state import TransactionListener
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import ClientError
from orbitmq.protocol.column_batch import BufferColumn, MessageColumns
from orbitmq.protocol.message import MessageExt
from orbitmq.testing.embedded import EmbeddedCluster
from orbitmq.transport.loop import run

MiB = 1024 * 1024
STORE = dataclasses.replace(TEST_MIN_STORE, mapped_file_size_commitlog=16 * MiB)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("columns"), store=STORE) as c:
        yield c


def _topic(namesrv: str, name: str) -> str:
    with Admin(namesrv) as admin:
        admin.create_topic(name, read_queue_nums=4, write_queue_nums=4)
        deadline = time.monotonic() + 10
        while name not in admin.list_topics():
            assert time.monotonic() < deadline, f"no route for {name}"
            time.sleep(0.01)
    return name


async def _read(namesrv: str, topic: str, count: int, timeout: float = 20.0) -> list[MessageExt]:
    """Every message of ``topic`` once ``count`` arrived (then checks there are no more)."""
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


def _arrow(values: list, kind: pa.DataType) -> BufferColumn:
    array = pa.array(values, kind)
    validity, offsets, data = array.buffers()
    return BufferColumn(offsets, data, validity, array.offset, len(array))


def _rows(n: int) -> MessageColumns:
    return MessageColumns(
        bodies=_arrow([f"body-{i}-".encode() * 40 for i in range(n)], pa.binary()),
        keys=_arrow([f"k{i} shared" if i % 3 else None for i in range(n)], pa.string()),
        tags=_arrow([f"t{i % 2}" for i in range(n)], pa.string()),
        properties=[{"n": str(i), "ü": "ß"} if i % 2 else None for i in range(n)])


def _check(got: list[MessageExt], n: int) -> None:
    assert sorted((m.body, tuple(m.keys or ()), m.tags, m.properties.get("n"),
                   m.properties.get("ü")) for m in got) == sorted(
        (f"body-{i}-".encode() * 40, (f"k{i}", "shared") if i % 3 else (), f"t{i % 2}",
         str(i) if i % 2 else None, "ß" if i % 2 else None) for i in range(n))
    assert len({m.msg_id for m in got}) == n


def test_send_columns_cuts_requests_and_every_row_arrives_with_its_columns(cluster):
    topic = _topic(cluster.namesrv, "ColumnsPlain")
    n = 1000

    async def scenario() -> list:
        async with AsyncProducer("columns", cluster.namesrv) as producer:
            return await producer.send_columns(topic, _rows(n), batch_rows_max=64,
                                               batch_bytes_max=40_000, in_flight_max=3)

    results = run(scenario())
    counts = [len(r.msg_id.split(",")) for r in results]
    assert sum(counts) == n and max(counts) <= 64 and len(results) >= n * 400 // 40_000
    got = run(_read(cluster.namesrv, topic, n))
    _check(got, n)
    assert {m.msg_id for m in got} == {i for r in results for i in r.msg_id.split(",")}


def test_a_bad_row_stops_the_rows_from_its_request_on_and_names_itself(cluster):
    topic = _topic(cluster.namesrv, "ColumnsBad")
    bodies = [b"x"] * 300
    bodies[250] = b""

    async def scenario() -> None:
        async with AsyncProducer("columns-bad", cluster.namesrv) as producer:
            await producer.send_columns(topic, MessageColumns(bodies), batch_rows_max=100,
                                        in_flight_max=1)

    with pytest.raises(ClientError, match="row 250: message body is empty"):
        run(scenario())
    assert len(run(_read(cluster.namesrv, topic, 200))) == 200  # the two requests before it


class _Never(TransactionListener):
    def execute_local_transaction(self, msg, arg):  # pragma: no cover - not used here
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg):
        return LocalTransactionState.UNKNOWN


def test_send_columns_half_stores_batches_that_commit_as_units(cluster):
    topic = _topic(cluster.namesrv, "ColumnsHalf")
    n = 700

    async def scenario() -> list:
        async with AsyncTransactionProducer("columns-tx", cluster.namesrv,
                                            listener=_Never()) as producer:
            halves = await producer.send_columns_half(
                topic, _rows(n), properties={"job": "j1"}, batch_rows_max=300,
                batch_bytes_max=1 * MiB)
            for half in halves:
                await producer.end_transaction(half, LocalTransactionState.COMMIT)
            return halves

    halves = run(scenario())
    assert [h.batch_size for h in halves] == [300, 300, 100]
    _check(run(_read(cluster.namesrv, topic, n)), n)


@pytest.mark.parametrize(("limits", "refusal"), [
    ({"batch_rows_max": 0}, "batch_rows_max must be 1..65536, got 0"),
    ({"batch_rows_max": 65537}, "batch_rows_max must be 1..65536"),
    ({"batch_bytes_max": 0}, "batch_bytes_max must be >= 1"),
    ({"in_flight_max": 0}, "in_flight_max must be >= 1"),
])
def test_cutting_limits_out_of_range_are_refused_before_anything_is_sent(cluster, limits, refusal):
    async def scenario() -> None:
        async with AsyncProducer("columns-limits", cluster.namesrv) as producer:
            await producer.send_columns("ColumnsLimits", MessageColumns([b"x"]), **limits)

    with pytest.raises(ClientError, match=refusal):
        run(scenario())
    with pytest.raises(ClientError, match="is a system topic"):
        run(_send_to("TBW102", cluster.namesrv))


async def _send_to(topic: str, namesrv: str) -> None:
    async with AsyncProducer("columns-limits", namesrv) as producer:
        await producer.send_columns(topic, MessageColumns([b"x"]))
