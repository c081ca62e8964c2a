"""Seeded power-loss simulation of the store over orbitmq.testing.faulty_files.

Each seed runs a random workload (single and batch puts over several queues, dispatch, flushes,
checkpoints) with the services driven by hand, cuts the power (between operations, inside one, or
during the next recovery), reboots the file system with only what was synced (plus torn sectors),
recovers and checks:
- SYNC_FLUSH: every acknowledged message is readable, byte for byte;
- ASYNC_FLUSH: every message below the last completed flush is;
- nothing else is served that was not written exactly so, queues have no holes, appends continue.
A failure names its seed; ``ORBITMQ_SIM_SEED=N`` reruns just that one.
"""

from __future__ import annotations

import os
import random

import pytest

from orbitmq.config import FlushDiskType, StoreConfig
from orbitmq.protocol.stored import decode_stored_message
from orbitmq.store import GetMessageStatus, MessageInner, MessageStore, PutMessageStatus
from orbitmq.testing.faulty_files import FaultyFileOps, PowerCut, TearMode
from orbitmq.testing.store_put import put_durably

SEEDS = 200
ROUNDS = 3
TOPICS = ("SimA", "SimB")
QUEUES = 2


def _config(flush: FlushDiskType) -> StoreConfig:
    return StoreConfig(
        store_path="/sim/store",
        mapped_file_size_commitlog=8 * 1024,
        mapped_file_size_consume_queue=20 * 16,
        flush_disk_type=flush,
        max_message_size=1500,
        message_index_enable=False,
        sync_flush_timeout_ms=60_000,
    )


class Simulation:
    def __init__(self, seed: int, flush: FlushDiskType) -> None:
        self.rng = random.Random(seed)
        self.flush = flush
        self.cfg = _config(flush)
        self.fs = FaultyFileOps()
        self.now = 1_700_000_000_000
        self.written: dict[int, bytes] = {}  # commit log offset -> bytes appended there
        self.where: dict[int, tuple[str, int, int]] = {}  # offset -> (topic, queue, queue offset)
        self.must_survive: set[int] = set()  # offsets acknowledged durable
        self.pending: list[tuple[list[int], object]] = []  # (offsets, flush future)
        self.seq = 0

    def clock(self) -> int:
        self.now += self.rng.randint(0, 3)
        return self.now

    def new_store(self) -> MessageStore:
        return MessageStore(self.cfg, clock=self.clock, file_ops=self.fs, run_threads=False)

    # -- workload -------------------------------------------------------------------------------

    def _message(self, topic: str, queue_id: int) -> MessageInner:
        self.seq += 1
        size = self.rng.choice((0, 1, 10, 100, 300, 700, 1400))
        props = {"KEYS": f"k{self.seq}", "UNIQ_KEY": f"U{self.seq:010d}"}
        if self.rng.random() < 0.5:
            props["TAGS"] = self.rng.choice(("a", "b"))
        return MessageInner(topic, queue_id, self.rng.randbytes(size), props)

    def _put(self, store: MessageStore) -> None:
        rng = self.rng
        topic, queue_id = rng.choice(TOPICS), rng.randrange(QUEUES)
        batch = [self._message(topic, queue_id) for _ in range(rng.choice((1, 1, 1, 3, 7)))]
        # The durability wait is asked for after the append is recorded, so a flush cannot cut
        # the power first; a waiting producer is simulated by running the group commit now.
        result = store.put(batch)
        if sum(len(m.body) + 150 for m in batch) > self.cfg.mapped_file_size_commitlog:
            assert result.status is PutMessageStatus.MESSAGE_ILLEGAL  # cannot fit one segment
            return
        assert result.append is not None, result
        offsets = result.append.offsets
        qoff = result.append.queue_offset
        for i, phy in enumerate(offsets):
            size = result.append.wrote_offset + result.append.wrote_bytes - phy
            if i + 1 < len(offsets):
                size = offsets[i + 1] - phy
            raw = store.get_message_raw(phy, size)
            assert raw is not None
            self.written[phy] = bytes(raw)
            self.where[phy] = (topic, queue_id, qoff + i)
        if self.flush is FlushDiskType.SYNC_FLUSH:
            self.pending.append((offsets, store.durable_up_to(result.append.end_offset)))
            if rng.random() < 0.3:
                store.group_commit.run_once()
                self._collect_acks()

    def _collect_acks(self) -> None:
        still = []
        for offsets, future in self.pending:
            if future.done():  # type: ignore[attr-defined]
                if future.result():  # type: ignore[attr-defined]
                    self.must_survive.update(offsets)
            else:
                still.append((offsets, future))
        self.pending = still

    def workload(self, store: MessageStore, steps: int) -> None:
        rng = self.rng
        for _ in range(steps):
            r = rng.random()
            if r < 0.6:
                self._put(store)
            elif r < 0.7:
                store.dispatcher.run_once()
            elif r < 0.8:
                (store.group_commit if self.flush is FlushDiskType.SYNC_FLUSH else store.async_flush).run_once()
                self._collect_acks()
            elif r < 0.87:
                store.flush_consume_queue.run_once()
            else:
                store.run_services_once()
                self._collect_acks()

    # -- checks ---------------------------------------------------------------------------------

    def check(self, store: MessageStore, flushed_at_cut: int) -> None:
        report = store.recovery_report
        assert report is not None
        valid_end = report.valid_end
        if self.flush is FlushDiskType.ASYNC_FLUSH:
            for phy, raw in self.written.items():
                if phy + len(raw) <= flushed_at_cut:
                    self.must_survive.add(phy)
        lost = [phy for phy in self.must_survive if phy >= valid_end]
        assert not lost, f"acknowledged messages lost: {sorted(lost)[:5]} valid_end={valid_end}"
        for phy in self.must_survive:
            topic, queue_id, qoff = self.where[phy]
            got = store.get_message("g", topic, queue_id, qoff, 1)
            assert got.status is GetMessageStatus.FOUND, (phy, got.status)
            assert bytes(got.buffers[0]) == self.written[phy], f"message at {phy} differs"
        self._check_queues(store)
        # Offsets past the valid end will be reused by new appends.
        for phy in [p for p in self.written if p >= valid_end]:
            del self.written[phy], self.where[phy]

    def _check_queues(self, store: MessageStore) -> None:
        for (topic, queue_id), cq in store.consume_queue_table.items():
            expect = cq.min_offset
            while expect < cq.max_offset:
                got = store.get_message("g", topic, queue_id, expect, 32)
                assert got.status is GetMessageStatus.FOUND, (topic, queue_id, expect, got.status)
                for raw in got.buffers:
                    msg = decode_stored_message(raw)  # verifies the body CRC
                    assert msg.queue_offset == expect
                    assert bytes(raw) == self.written.get(msg.commit_log_offset), "corrupt message"
                    expect += 1

    def check_appends_continue(self, store: MessageStore) -> None:
        result = put_durably(store, [self._message("SimA", 0)])
        assert result.status is PutMessageStatus.PUT_OK
        assert result.append is not None
        store.dispatcher.run_once()
        got = store.get_message("g", "SimA", 0, result.append.queue_offset, 1)
        assert got.status is GetMessageStatus.FOUND
        phy = result.append.wrote_offset
        self.written[phy] = bytes(got.buffers[0])
        self.where[phy] = ("SimA", 0, result.append.queue_offset)
        if self.flush is FlushDiskType.SYNC_FLUSH:
            self.must_survive.add(phy)

    # -- one seed -------------------------------------------------------------------------------

    def run(self) -> None:
        rng = self.rng
        store = self._start_surviving_cuts()
        for _ in range(ROUNDS):
            if rng.random() < 0.6:
                self.fs.cut_after_ops = self.fs.ops + rng.randint(1, 60)
            try:
                self.workload(store, rng.randint(10, 80))
            except PowerCut:
                pass
            flushed_at_cut = store.commit_log.flushed_offset
            self.pending.clear()  # unanswered requests were never acknowledged
            self.fs = self.fs.reboot(rng, rng.choice(list(TearMode)))
            store = self._start_surviving_cuts()
            self.check(store, flushed_at_cut)
            self.check_appends_continue(store)

    def _start_surviving_cuts(self) -> MessageStore:
        """Start a store; sometimes the power fails again during recovery."""
        rng = self.rng
        while True:
            if rng.random() < 0.15:
                self.fs.cut_after_ops = self.fs.ops + rng.randint(1, 6)
            store = self.new_store()
            try:
                store.start()
            except PowerCut:
                self.fs = self.fs.reboot(rng, rng.choice(list(TearMode)))
                continue
            self.fs.cut_after_ops = None
            return store


def _seeds() -> list[int]:
    one = os.environ.get("ORBITMQ_SIM_SEED")
    return [int(one)] if one else list(range(SEEDS))


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_power_loss_keeps_what_was_promised(flush: FlushDiskType) -> None:
    for seed in _seeds():
        try:
            Simulation(seed, flush).run()
        except Exception as e:
            raise AssertionError(
                f"power-loss simulation failed: seed={seed} flush={flush.value} "
                f"(rerun: ORBITMQ_SIM_SEED={seed}): {e!r}"
            ) from e


def test_power_cut_with_nothing_synced_loses_only_unsynced_data() -> None:
    sim = Simulation(12345, FlushDiskType.ASYNC_FLUSH)
    store = sim.new_store()
    store.start()
    for _ in range(20):
        sim._put(store)
    store.async_flush.run_once()
    flushed = store.commit_log.flushed_offset
    for _ in range(20):
        sim._put(store)
    sim.fs = sim.fs.reboot(sim.rng, TearMode.NONE)
    store = sim.new_store()
    store.start()
    assert store.recovery_report is not None
    assert store.recovery_report.valid_end == flushed
    sim.check(store, flushed)
