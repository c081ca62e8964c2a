"""A process that appends to a store under SYNC_FLUSH until it is killed (for kill -9 tests).

    python -m orbitmq.testing.store_crash_child STORE_DIR ROUND [THREADS [STORE_TYPE]]

Prints ``ready`` once the store has recovered and started, then one line per acknowledged message:
``ack QUEUE_ID QUEUE_OFFSET COMMIT_OFFSET ROUND SEQ``. The content of message (ROUND, SEQ) is
``crash_message(ROUND, SEQ)``, so the parent can check every acknowledged one after recovery.
Stops by itself after ``SEQ_MAX`` messages or when its parent is gone.
"""

from __future__ import annotations

import os
import random
import sys
import threading

from orbitmq.config import FlushDiskType, StoreConfig, StoreType
from orbitmq.store import MessageInner, MessageStore, PutMessageStatus
from orbitmq.testing.store_put import put_durably

__all__ = ["crash_config", "crash_message", "CRASH_TOPIC", "QUEUES", "SEQ_MAX"]

CRASH_TOPIC = "CrashTopic"
QUEUES = 4
SEQ_MAX = 200_000


def crash_config(store_dir: str, store_type: StoreType = StoreType.DEFAULT) -> StoreConfig:
    """Small segments, so that kills land near segment rolls too (and under ``compact``, near
    a queue's switch to mapped files: a queue is compact for its first file's 200 entries)."""
    return StoreConfig(
        store_type=store_type,
        store_path=store_dir,
        mapped_file_size_commitlog=64 * 1024,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=512,
        max_index_num=2048,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        flush_interval_consume_queue_ms=20,
        max_message_size=8 * 1024,
    )


def crash_message(round_no: int, seq: int) -> MessageInner:
    """The message number ``seq`` of round ``round_no``: content derived from both."""
    rng = random.Random(round_no * 1_000_003 + seq)
    size = rng.choice((0, 7, 100, 500, 1000, 3000, 6000))
    props = {"KEYS": f"r{round_no}-s{seq}", "UNIQ_KEY": f"{round_no:08X}{seq:024X}"}
    if seq % 3:
        props["TAGS"] = f"t{seq % 3}"
    return MessageInner(CRASH_TOPIC, seq % QUEUES, rng.randbytes(size), props)


def main(argv: list[str]) -> int:
    store_dir, round_no = argv[0], int(argv[1])
    threads = int(argv[2]) if len(argv) > 2 else 3
    store_type = StoreType(argv[3]) if len(argv) > 3 else StoreType.DEFAULT
    parent = os.getppid()
    store = MessageStore(crash_config(store_dir, store_type))
    store.start()
    out = sys.stdout
    out_lock = threading.Lock()
    counter = iter(range(SEQ_MAX))
    counter_lock = threading.Lock()
    out.write("ready\n")
    out.flush()

    def writer() -> None:
        while True:
            with counter_lock:
                seq = next(counter, None)
            if seq is None or os.getppid() != parent:
                return
            result = put_durably(store, [crash_message(round_no, seq)])
            if result.status is PutMessageStatus.PUT_OK and result.append is not None:
                line = (
                    f"ack {seq % QUEUES} {result.append.queue_offset} "
                    f"{result.append.wrote_offset} {round_no} {seq}\n"
                )
                with out_lock:
                    out.write(line)
                    out.flush()

    workers = [threading.Thread(target=writer, daemon=True) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    store.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
