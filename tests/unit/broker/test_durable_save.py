"""The broker's durable-save seam over a real store: answers at once without conditions, one
group per shared condition future, failures and timeouts mapped to their statuses, and a second
condition (a replication stand-in that holds when the test says so) added in the one place made
for it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.broker.durable_save import (
    APPENDED,
    DiskSync,
    DurableSave,
    durability_conditions,
    put_answer,
)
from orbitmq.config import BrokerConfig, FlushDiskType
from orbitmq.protocol.codes import ResponseCode
from orbitmq.store import MessageStore, PutMessageResult, PutMessageStatus


class ReplicaAck:
    """What SYNC_MASTER will add: "a slave holds the bytes up to N". Requests made before the
    test acknowledges share one future, as a real HA round would; ``ack`` completes it."""

    def __init__(self, wait_max_s: float = 30.0) -> None:
        self.wait_max_s = wait_max_s
        self.asked: list[int] = []
        self.slave_connected = True
        self._round: concurrent.futures.Future[bool] = concurrent.futures.Future()

    def durable_up_to(self, offset: int) -> concurrent.futures.Future[bool]:
        self.asked.append(offset)
        return self._round

    def ack(self, ok: bool = True) -> None:
        done, self._round = self._round, concurrent.futures.Future()
        done.set_result(ok)

    def failure_status(self) -> PutMessageStatus:
        return (PutMessageStatus.FLUSH_SLAVE_TIMEOUT if self.slave_connected
                else PutMessageStatus.SLAVE_NOT_AVAILABLE)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(config(tmp_path), run_threads=False) as s:
        yield s


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH),
                      run_threads=False) as s:
        yield s


def _status(result: PutMessageResult, tag: str) -> tuple[str, PutMessageStatus]:
    return tag, result.status


async def _until(predicate, timeout_s: float = 5.0) -> None:
    """Let the loop run until ``predicate()`` holds (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


def test_without_conditions_the_answer_is_built_in_the_call(store: MessageStore) -> None:
    async def go() -> None:
        saver = DurableSave(store, [])
        saver.start()
        result = saver.append([msg("T", 0, b"a")])
        answer = saver.answer(result, _status, "sent")
        assert answer == ("sent", PutMessageStatus.PUT_OK)  # no future, no task
        assert store.get_max_offset_in_queue("T", 0) == 0  # the store's wake comes later...
        await _until(lambda: store.get_max_offset_in_queue("T", 0) == 1)  # ...once per iteration
        assert (await saver.save([msg("T", 0, b"b")])).status is PutMessageStatus.PUT_OK

    asyncio.run(go())


def test_saves_waiting_on_one_condition_future_are_answered_together(store: MessageStore) -> None:
    replica = ReplicaAck()

    async def go() -> None:
        saver = DurableSave(store, [replica])
        saver.start()
        results = [saver.append([msg("T", 0, b"%d" % i)]) for i in range(3)]
        answers = [saver.answer(r, _status, f"m{i}") for i, r in enumerate(results)]
        assert all(isinstance(a, asyncio.Future) and not a.done() for a in answers)
        assert len(saver._groups) == 1  # one group: one timer, one hand-off
        assert replica.asked == [r.append.end_offset for r in results]  # type: ignore[union-attr]
        # Told from another thread, as a replication thread would.
        threading.Thread(target=replica.ack).start()
        got = await asyncio.gather(*answers)  # type: ignore[arg-type]
        assert got == [(f"m{i}", PutMessageStatus.PUT_OK) for i in range(3)]
        assert saver._groups == {}

    asyncio.run(go())


def test_a_failed_condition_answers_its_failure_status_with_the_position(
        store: MessageStore) -> None:
    replica = ReplicaAck()

    async def go() -> None:
        saver = DurableSave(store, [replica])
        saver.start()
        first = saver.append([msg("T", 0, b"x")])
        pending = saver.answer(first, _status, "x")
        replica.slave_connected = False
        replica.ack(False)
        assert await pending == ("x", PutMessageStatus.SLAVE_NOT_AVAILABLE)  # type: ignore[misc]
        assert first.append is not None and first.status in APPENDED  # the bytes are there
        assert put_answer(first) == (ResponseCode.SLAVE_NOT_AVAILABLE, "slave not available")

    asyncio.run(go())


def test_a_condition_that_never_holds_times_out(store: MessageStore) -> None:
    replica = ReplicaAck(wait_max_s=0.05)

    async def go() -> None:
        saver = DurableSave(store, [replica])
        saver.start()
        result = await saver.save([msg("T", 0, b"late")])
        assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert saver._groups == {}
        replica.ack()  # a late acknowledgement finds nobody waiting

    asyncio.run(go())


def test_replication_is_one_more_condition_next_to_the_disk_sync(
        sync_store: MessageStore) -> None:
    """Both must hold: the disk sync comes with the store's wake on this loop, the answer waits
    for the replica still, and is answered once the replica acknowledges."""
    replica = ReplicaAck()

    async def go() -> None:
        disk = durability_conditions(BrokerConfig(store=sync_store.config), sync_store)
        assert [type(c) for c in disk] == [DiskSync]
        saver = DurableSave(sync_store, [*disk, replica])
        saver.start()
        answer = saver.answer(saver.append([msg("T", 0, b"both")]), _status, "both")
        assert isinstance(answer, asyncio.Future)
        group = next(iter(saver._groups.values()))
        await _until(lambda: group.pending == 1)  # the disk sync came (on this loop's wake)
        assert sync_store.flushed_physical_offset() == sync_store.max_physical_offset()
        assert not answer.done()  # synced, not replicated
        replica.ack()
        assert await answer == ("both", PutMessageStatus.PUT_OK)

    asyncio.run(go())


def test_refused_puts_are_answered_at_once_even_with_conditions(store: MessageStore) -> None:
    replica = ReplicaAck()

    async def go() -> None:
        saver = DurableSave(store, [replica])
        saver.start()
        refused = saver.append([msg("a/b", 0)])  # not a topic name: the store refuses it
        assert saver.answer(refused, _status, "r") == ("r", PutMessageStatus.MESSAGE_ILLEGAL)
        assert replica.asked == []

    asyncio.run(go())


def test_stop_answers_waiting_saves_as_not_durable(store: MessageStore) -> None:
    replica = ReplicaAck()

    async def go() -> None:
        saver = DurableSave(store, [replica])
        saver.start()
        answer = saver.answer(saver.append([msg()]), _status, "s")
        saver.stop()
        assert await answer == ("s", PutMessageStatus.FLUSH_SLAVE_TIMEOUT)  # type: ignore[misc]

    asyncio.run(go())


@pytest.mark.parametrize("status", list(PutMessageStatus))
def test_every_store_outcome_has_one_answer(status: PutMessageStatus) -> None:
    code, remark = put_answer(PutMessageResult(status))
    assert (code is ResponseCode.SUCCESS) == (status is PutMessageStatus.PUT_OK)
    assert (remark is None) == (status is PutMessageStatus.PUT_OK)
    refused = PutMessageResult(status, remark="service not available now: the disk is full")
    if status is not PutMessageStatus.PUT_OK:
        assert put_answer(refused)[1] == refused.remark  # the store's own reason wins
