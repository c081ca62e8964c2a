"""Store threads woken on demand, the caller's share of their work (``wake``), and the dispatch's
progress signal (what read-your-writes waits on)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.config import FlushDiskType
from orbitmq.store import MessageStore
from orbitmq.store.service import ServiceThread


def _wait_until(predicate, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.001)
    return predicate()


class Counting(ServiceThread):
    def __init__(self) -> None:
        super().__init__("counting", 60.0)  # the interval never fires within a test
        self.rounds = 0

    def run_once(self) -> None:
        self.rounds += 1


def test_a_wakeup_runs_a_round_promptly_and_wakeups_coalesce() -> None:
    service = Counting()
    service.start()
    thread = service._thread
    assert thread is not None
    try:
        assert _wait_until(lambda: service.waiting)
        service.wakeup()
        assert _wait_until(lambda: service.rounds == 1)
        assert _wait_until(lambda: service.waiting)
        for _ in range(50):  # while it sleeps: one pending wakeup, not fifty
            service.wakeup()
        assert _wait_until(lambda: service.rounds >= 2)
        assert _wait_until(lambda: service.waiting)
        time.sleep(0.05)
        assert service.rounds == 2
        service.wakeup_if_waiting()
        assert _wait_until(lambda: service.rounds == 3)
    finally:
        service.shutdown()
    assert _wait_until(lambda: not thread.is_alive())


def test_puts_wake_nothing_until_wake(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path), run_threads=False) as store:
        for i in range(5):
            store.put([msg(body=b"%d" % i)])
        assert store.get_max_offset_in_queue("T", 0) == 0  # not dispatched yet
        store.wake()
        assert store.get_max_offset_in_queue("T", 0) == 5


def test_wake_syncs_the_waiting_group_in_the_calling_thread(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg) as store:  # threads run, but nobody wakes the group commit thread
        store.group_commit.interval_s = 60.0
        result = store.put([msg()])
        assert result.append is not None
        synced = store.durable_up_to(result.append.end_offset)
        assert not synced.done()
        caller = threading.get_ident()
        synced_in: list[int] = []
        synced.add_done_callback(lambda f: synced_in.append(threading.get_ident()))
        store.wake()
        assert synced.result(0) is True and synced_in == [caller]
        assert store.flushed_physical_offset() >= store.max_physical_offset()
        # Dispatch ran here too, unless the dispatch thread's own round had it at that moment.
        assert store.wait_dispatched() and store.get_max_offset_in_queue("T", 0) == 1


def test_requests_of_one_round_share_one_future(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg, run_threads=False) as store:
        ends = [store.put([msg(body=b"%d" % i)]).append.end_offset  # type: ignore[union-attr]
                for i in range(3)]
        futures = [store.durable_up_to(end) for end in ends]
        assert futures[0] is futures[1] is futures[2]  # one group commit: one future
        store.wake()
        assert futures[0].result(0) is True
        later = store.durable_up_to(ends[-1])  # already synced, asked again: the next round
        assert later is not futures[0]
        store.wake()
        assert later.result(0) is True


def test_dispatch_tells_its_progress_listeners_how_far_it_got(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path), run_threads=False) as store:
        heard: list[int] = []
        store.add_dispatch_listener(heard.append)
        for i in range(3):
            store.put([msg(body=b"%d" % i)])
        assert heard == [] and store.dispatched_offset() == 0
        store.wake()
        assert heard == [store.max_physical_offset()] == [store.dispatched_offset()]
        store.wake()  # nothing new: nothing to tell
        assert len(heard) == 1


def test_try_run_once_leaves_a_busy_round_alone(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg, run_threads=False) as store:
        gc = store.group_commit
        future = gc.submit(1)
        with gc._round_lock:  # a round under way elsewhere
            assert gc.try_run_once() is False and not future.done()
        assert gc.try_run_once() is True and future.done()


def test_dispatch_available_is_bounded(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path), run_threads=False) as store:
        for i in range(10):
            store.put([msg(body=b"%d" % i)])
        assert store.dispatcher.dispatch_available(3) is False
        assert store.get_max_offset_in_queue("T", 0) == 3
        assert store.dispatcher.dispatch_available() is True
        assert store.get_max_offset_in_queue("T", 0) == 10


def test_a_slow_disk_sends_rounds_back_to_the_thread(tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg, run_threads=False) as store:
        gc = store.group_commit
        gc.last_sync_s = 0.5  # the last sync took half a second
        future = gc.submit(1)
        assert gc.try_run_once() is False and not future.done()
        gc.run_once()  # the thread's round (run here) measures the disk again
        assert future.done() and gc.last_sync_s < 0.5


def test_inline_dispatch_never_waits_for_the_dispatch_thread(tmp_path: Path) -> None:
    with MessageStore(config(tmp_path), run_threads=False) as store:
        store.put([msg()])
        with store.dispatcher.lock:  # the thread's round under way
            assert store.dispatcher.dispatch_available(wait=False) is False
            store.wake()  # returns at once, leaving the message to the thread
        assert store.get_max_offset_in_queue("T", 0) == 0
        store.wake()
        assert store.get_max_offset_in_queue("T", 0) == 1


class Deferring(ServiceThread):
    """A service whose interval rounds someone else covers while ``others_keep_up``."""

    def __init__(self) -> None:
        super().__init__("deferring", 0.005)
        self.rounds = 0
        self.asked = 0
        self.pending = False
        self.others_keep_up = True

    def run_once(self) -> None:
        self.rounds += 1
        self.pending = False

    def has_work(self) -> bool:
        return self.pending

    def interval_round_due(self) -> bool:
        self.asked += 1
        return not self.others_keep_up


def test_interval_rounds_are_left_to_whoever_keeps_up_but_a_wakeup_still_runs_one() -> None:
    service = Deferring()
    service.start()
    try:
        assert _wait_until(lambda: service.asked >= 3)
        assert service.rounds == 0
        service.pending = True  # work appears, and others take it: the thread still waits
        asked = service.asked
        assert _wait_until(lambda: service.asked >= asked + 3)
        assert service.rounds == 0
        service.wakeup()  # a wakeup is not the interval: it runs a round
        assert _wait_until(lambda: service.rounds == 1)
        service.others_keep_up = False  # nobody else does the work any more: the thread does
        service.pending = True
        assert _wait_until(lambda: service.rounds == 2)
    finally:
        service.shutdown()


def test_dispatch_and_group_commit_leave_interval_rounds_to_the_loop_while_it_progresses(
        tmp_path: Path) -> None:
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    with MessageStore(cfg, run_threads=False) as store:
        dispatcher, group = store.dispatcher, store.group_commit
        assert dispatcher.interval_round_due() is False  # first look: nothing seen yet
        assert dispatcher.interval_round_due() is True  # nobody moved: the thread's turn
        store.put([msg()])
        store.wake()  # the loop's share: dispatch and sync in the caller's thread
        assert dispatcher.interval_round_due() is False and group.interval_round_due() is False
        store.put([msg()])
        assert dispatcher.interval_round_due() is True  # appended, nobody dispatched it
        assert group.interval_round_due() is True  # nor synced it
        dispatcher.run_once()
        group.run_once()
        assert dispatcher.interval_round_due() is True and group.interval_round_due() is True


def test_a_service_thread_has_its_name_in_the_kernel_too() -> None:
    """``top -H``, ``ps -L`` and ``perf`` show the store's threads by name (Linux): the service's
    name without the ``orbitmq-`` prefix, cut to the kernel's 15 bytes."""
    if not sys.platform.startswith("linux"):
        pytest.skip("thread names in /proc are Linux's")
    service = Counting()
    service.name = "orbitmq-flush-consumequeue"
    service.start()
    try:
        assert _wait_until(lambda: service._thread is not None and service._thread.native_id)
        task = Path(f"/proc/self/task/{service._thread.native_id}/comm")  # type: ignore[union-attr]
        assert _wait_until(lambda: task.read_text().strip() == "flush-consumequ"), task.read_text()
    finally:
        service.shutdown()
