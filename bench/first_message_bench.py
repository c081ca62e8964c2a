"""What a queue's first message costs the dispatch thread: the file system work of a new queue.

    .venv/bin/python bench/first_message_bench.py [--queues N] [--dir DIR]
                                                   [--store-type default|compact|both]

A store (no service threads, no index) gets one 100-byte message in each of N queues (topics of
8 queues), then the dispatch of all of them is timed: every queue is new, so each dispatch makes
the queue's directories and its first file. Then a second message in each queue, and the same
dispatch timed again: the queues exist, so that one is the dispatch without the file system
work. Reported per queue in µs, both rounds (wall time, and the CPU time of the dispatching
thread, which a loaded machine blurs less) and the difference of the CPU times (what a new queue
costs the thread), once per ``store_type``. The store's flush round (data, names, checkpoint) is timed too, apart: it
runs on its own thread, not the dispatch thread. Not a test: never run by pytest.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import shutil
import tempfile
import time

from orbitmq.config import TEST_MIN_STORE, StoreType
from orbitmq.store import MessageInner, MessageStore

QUEUES_PER_TOPIC = 8
BODY = b"x" * 100


def _put_all(store: MessageStore, queues: int) -> None:
    for i in range(queues):
        topic, qid = f"T{i // QUEUES_PER_TOPIC:07d}", i % QUEUES_PER_TOPIC
        result = store.put([MessageInner(topic, qid, BODY)])
        assert result.ok, result.status


def _thread_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def _dispatch_s(store: MessageStore) -> tuple[float, float]:
    """(wall seconds, seconds of this thread's CPU, user and system) of dispatching what is
    there: the CPU time is what a loaded machine does not blur."""
    os.sync()  # what earlier steps left to write back does not compete with what is timed
    started, cpu = time.perf_counter(), _thread_cpu_s()
    while not store.dispatcher.dispatch_available():
        pass
    return time.perf_counter() - started, _thread_cpu_s() - cpu


def measure(base: str, queues: int, store_type: str) -> dict[str, float]:
    path = tempfile.mkdtemp(prefix=f"first-{store_type}-", dir=base)
    cfg = dataclasses.replace(
        TEST_MIN_STORE, store_path=path, store_type=StoreType(store_type),
        mapped_file_size_commitlog=64 * 1024 * 1024, mapped_file_size_consume_queue=300_000 * 20,
        message_index_enable=False)
    store = MessageStore(cfg, run_threads=False)
    store.start()
    try:
        _put_all(store, queues)
        first = _dispatch_s(store)
        started = time.perf_counter()
        store.flush_consume_queue.flush_and_checkpoint()
        flush_first = time.perf_counter() - started
        _put_all(store, queues)
        second = _dispatch_s(store)
        store.flush_consume_queue.flush_and_checkpoint()
    finally:
        store.shutdown()
        shutil.rmtree(path, ignore_errors=True)
    return {"first_us": first[0] / queues * 1e6, "second_us": second[0] / queues * 1e6,
            "first_cpu_us": first[1] / queues * 1e6, "second_cpu_us": second[1] / queues * 1e6,
            "flush_after_first_us": flush_first / queues * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", type=int, default=20_000)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--store-type", default="both", choices=("default", "compact", "both"))
    opts = ap.parse_args()
    if opts.queues < QUEUES_PER_TOPIC:
        ap.error(f"--queues must be at least {QUEUES_PER_TOPIC}")
    base = tempfile.mkdtemp(prefix="first-message-bench-", dir=opts.dir)
    types = ("default", "compact") if opts.store_type == "both" else (opts.store_type,)
    try:
        print(f"{opts.queues:,} queues ({QUEUES_PER_TOPIC} a topic), µs per queue "
              "(wall; CPU of the dispatching thread, user + system)")
        print(f"{'store_type':>10} {'1st msg':>9} {'2nd msg':>9} {'1st CPU':>9} {'2nd CPU':>9} "
              f"{'new queue CPU':>14} {'flush':>9}")
        for store_type in types:
            r = measure(base, opts.queues, store_type)
            print(f"{store_type:>10} {r['first_us']:9.1f} {r['second_us']:9.1f} "
                  f"{r['first_cpu_us']:9.1f} {r['second_cpu_us']:9.1f} "
                  f"{r['first_cpu_us'] - r['second_cpu_us']:14.1f} "
                  f"{r['flush_after_first_us']:9.1f}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
