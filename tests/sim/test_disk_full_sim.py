"""The power-loss simulation (test_power_loss.py) on a disk that fills up and fails syncs.

Each seed runs the same random workload while the simulated file system, now and then, shrinks
to what is used (the disk is full), gets space back, or fails the next syncs with EIO (leaving the
failed pages clean, as Linux does). Besides the power-loss checks (everything acknowledged is read
back byte for byte after a cut; nothing corrupt is served), it checks that no page was ever stored
into without being allocated first (on a real full disk: SIGBUS), and that a store refusing puts
takes them again once space is back. ``ORBITMQ_SIM_SEED=N`` reruns one seed.
"""

from __future__ import annotations

import os

import pytest
from test_power_loss import ROUNDS, Simulation

from orbitmq.config import FlushDiskType, StoreConfig
from orbitmq.errors import StoreError
from orbitmq.store import MessageStore, PutMessageStatus
from orbitmq.testing.faulty_files import PAGE_SIZE, PowerCut, TearMode

SEEDS = 60


class DiskFullSimulation(Simulation):
    def __init__(self, seed: int, flush: FlushDiskType) -> None:
        super().__init__(seed, flush)
        self.cfg = StoreConfig(
            store_path="/sim/store",
            mapped_file_size_commitlog=8 * 1024,
            mapped_file_size_consume_queue=20 * 500,  # 3 pages, allocated in steps
            flush_disk_type=flush,
            max_message_size=1500,
            message_index_enable=False,
            sync_flush_timeout_ms=60_000,
        )
        self.mono = 0.0
        self.refused = 0

    def monotonic(self) -> float:
        return self.mono

    def new_store(self) -> MessageStore:
        return MessageStore(self.cfg, clock=self.clock, file_ops=self.fs, run_threads=False,
                            monotonic=self.monotonic)

    def _weather(self) -> None:
        """The disk fills up, gets space back, or starts failing syncs; time passes."""
        rng, fs = self.rng, self.fs
        r = rng.random()
        if r < 0.08:
            fs.capacity_bytes = fs.used_bytes + rng.randint(0, 2) * PAGE_SIZE
        elif r < 0.14:
            fs.capacity_bytes = None
        elif r < 0.17:
            fs.fail_syncs = rng.randint(1, 3)
        self.mono += rng.choice((0.0, 0.0, 0.4, 1.0))

    def _put(self, store: MessageStore) -> None:
        self._weather()
        rng = self.rng
        topic, queue_id = rng.choice(("SimA", "SimB")), rng.randrange(3)
        batch = [self._message(topic, queue_id) for _ in range(rng.choice((1, 1, 3)))]
        result = store.put(batch)
        if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
            assert result.remark, "a refusal says why"
            self.refused += 1
            return
        assert result.append is not None, result
        offsets = result.append.offsets
        for i, phy in enumerate(offsets):
            end = offsets[i + 1] if i + 1 < len(offsets) else (
                result.append.wrote_offset + result.append.wrote_bytes)
            raw = store.get_message_raw(phy, end - phy)
            assert raw is not None
            self.written[phy] = bytes(raw)
            self.where[phy] = (topic, queue_id, result.append.queue_offset + i)
        if self.flush is FlushDiskType.SYNC_FLUSH:
            self.pending.append((offsets, store.durable_up_to(result.append.end_offset)))
            if rng.random() < 0.3:
                store.group_commit.run_once()
                self._collect_acks()

    def _start_surviving_cuts(self) -> MessageStore:
        while True:
            try:
                return super()._start_surviving_cuts()
            except StoreError:  # no space to rebuild the queues at start: free some, try again
                self.fs.capacity_bytes = None

    def run(self) -> None:
        rng = self.rng
        store = self._start_surviving_cuts()
        for _ in range(ROUNDS):
            if rng.random() < 0.5:
                self.fs.cut_after_ops = self.fs.ops + rng.randint(1, 60)
            try:
                self.workload(store, rng.randint(20, 80))
            except PowerCut:
                pass
            assert self.fs.unbacked_writes() == [], "a store into unallocated space (SIGBUS)"
            flushed_at_cut = store.commit_log.flushed_offset
            self.pending.clear()
            self.fs = self.fs.reboot(rng, rng.choice(list(TearMode)))
            self.fs.capacity_bytes, self.fs.fail_syncs = None, 0  # space is back after the reboot
            store = self._start_surviving_cuts()
            self.check(store, flushed_at_cut)
            self.check_appends_continue(store)


def _seeds() -> list[int]:
    one = os.environ.get("ORBITMQ_SIM_SEED")
    return [int(one)] if one else list(range(SEEDS))


@pytest.mark.parametrize("flush", [FlushDiskType.SYNC_FLUSH, FlushDiskType.ASYNC_FLUSH])
def test_full_and_failing_disk_keeps_what_was_promised(flush: FlushDiskType) -> None:
    refused = 0
    for seed in _seeds():
        sim = DiskFullSimulation(seed, flush)
        try:
            sim.run()
        except Exception as e:
            raise AssertionError(
                f"disk-full simulation failed: seed={seed} flush={flush.value} "
                f"(rerun: ORBITMQ_SIM_SEED={seed}): {e!r}"
            ) from e
        refused += sim.refused
    if len(_seeds()) > 1:
        assert refused > 50, f"the disk was rarely full enough to refuse puts ({refused})"
