"""Disk use and broker memory per 1,000 idle queues.

    .venv/bin/python bench/queues_bench.py [--queues N] [--dir DIR] [--quick]
                                           [--store-type default|compact|both]

Starts ``orbitmq standalone`` (a real child process) on a fresh store with RocketMQ's default
consume queue file (6,000,000 B) and index (5,000,000 slots, 20,000,000 entries) sizes, and a
64 MiB commit log segment (allocated in full by design, and not what this measures). It creates
N queues (topics of 8 queues, made with the admin client) holding one 100-byte message each (sent
with the SDK, which adds a UNIQ_KEY, plus one KEYS: two index entries per message), lets the
broker idle, and reports:
- disk use beyond the commit log (st_blocks as ``du`` counts them, files and directories), in
  all and per 1,000 queues; the consume queue files alone next to their logical size, which is
  what each took on disk when created at full size (before queues were allocated as they fill);
- the broker's resident size (VmRSS, and its anonymous and file-backed parts) before the queues
  and after, and the growth per 1,000 queues; the file-backed part split by the store's files it
  maps (from /proc/PID/smaps): consume queues (per queue), index (per key indexed, not per queue)
  and commit log (the pre-fault window ahead of the writer, a constant).
Once per consume queue ``store_type`` (default both: ``default`` maps each queue's file,
``compact`` reads and writes small queues with pread/pwrite; docs/store.md).
Not a test: never run by pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from orbitmq.client import Admin, Producer
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import Message
from orbitmq.testing import standalone_process

QUEUES_PER_TOPIC = 8
IDLE_S = 3.0  # after the sends: the page release service and the flushes have run by then


def _rss_mb(pid: int) -> dict[str, float]:
    values: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile"):
                values[name] = int(rest.split()[0]) / 1024
    return values


def _rss_by_store_file(pid: int) -> dict[str, float]:
    """Resident MB of the mappings of consume queue, index and commit log files."""
    found = {"consumequeue": 0.0, "index": 0.0, "commitlog": 0.0}
    kind: str | None = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                path = head[5] if len(head) > 5 else ""
                kind = next((k for k in found if f"/{k}/" in path), None)
            elif head[0] == "Rss:" and kind is not None:
                found[kind] += int(head[1]) / 1024
    return found


def _du(root: str, skip: str | None = None) -> tuple[int, int]:
    """(bytes allocated, logical bytes of files) under ``root``, ``skip`` left out."""
    used = logical = 0
    for where, dirs, files in os.walk(root):
        if skip is not None and os.path.abspath(where) == os.path.abspath(skip):
            dirs[:] = []
            continue
        used += os.stat(where).st_blocks * 512
        for name in files:
            st = os.stat(os.path.join(where, name))
            used += st.st_blocks * 512
            logical += st.st_size
    return used, logical


def _by_id(queue_id: int) -> Any:
    def select(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        return next(q for q in queues if q.queue_id == queue_id)

    return select


def _make_queues(namesrv: str, count: int) -> float:
    topics = [f"Idle{i:05d}" for i in range(-(-count // QUEUES_PER_TOPIC))]
    started = time.perf_counter()
    with Admin(namesrv) as admin:
        for topic in topics:
            admin.create_topic(topic, read_queue_nums=QUEUES_PER_TOPIC, write_queue_nums=QUEUES_PER_TOPIC)
    with Producer("queues-bench", namesrv, retry_times_when_send_failed=0) as producer:
        made = 0
        for topic in topics:
            for queue_id in range(min(QUEUES_PER_TOPIC, count - made)):
                producer.send(Message(topic, b"q" * 100, keys=f"{topic}-{queue_id}"), _by_id(queue_id))
                made += 1
    return time.perf_counter() - started


STORE_TYPES = ("default", "compact")


def run(root: str, count: int, store_type: str = "default") -> None:
    store = os.path.join(root, f"store-{store_type}")
    proc = standalone_process(store, "--mapped-file-size-commitlog", str(64 << 20),
                              "--store-type", store_type)
    try:
        namesrv = proc.wait_ready("namesrv", "broker")["namesrv"]
        pid = proc.proc.pid
        time.sleep(IDLE_S)
        rss_before = _rss_mb(pid)
        files_before = _rss_by_store_file(pid)
        disk_before, _ = _du(store, skip=os.path.join(store, "commitlog"))
        seconds = _make_queues(namesrv, count)
        time.sleep(IDLE_S)
        rss_after = _rss_mb(pid)
        files_after = _rss_by_store_file(pid)
        queues_found = sum(len(os.listdir(os.path.join(store, "consumequeue", t)))
                           for t in os.listdir(os.path.join(store, "consumequeue")))
        disk_after, _ = _du(store, skip=os.path.join(store, "commitlog"))
        cq_used, cq_logical = _du(os.path.join(store, "consumequeue"))
        index_used, index_logical = _du(os.path.join(store, "index"))
    finally:
        proc.stop()
        if proc.proc.stdout is not None:
            proc.proc.stdout.close()
    per_k = 1000 / count
    mb = 1e6
    print(f"OrbitMQ store, {count} queues of one 100-byte message each (made in {seconds:.1f} s, "
          f"{queues_found} queue files {IDLE_S:.0f} s later), default consume queue and index sizes, "
          f"store_type {store_type}")
    print(f"  disk beyond the commit log: {disk_after / mb:8.1f} MB "
          f"(before the queues {disk_before / mb:.2f} MB); per 1,000 queues "
          f"{(disk_after - disk_before) / mb * per_k:.1f} MB")
    print(f"  consume queues:             {cq_used / mb:8.1f} MB on disk of {cq_logical / mb:,.0f} MB "
          f"logical (at full size: {cq_logical / mb * per_k:,.0f} MB per 1,000 queues; "
          f"now {cq_used / mb * per_k:.1f} MB, {cq_logical / max(cq_used, 1):,.0f}x less)")
    print(f"  index:                      {index_used / mb:8.1f} MB on disk of {index_logical / mb:,.0f} MB "
          "logical")
    for name in ("VmRSS", "RssAnon", "RssFile"):
        grown = rss_after.get(name, 0.0) - rss_before.get(name, 0.0)
        print(f"  broker {name:8s}            {rss_before.get(name, 0.0):8.1f} MB -> "
              f"{rss_after.get(name, 0.0):.1f} MB; per 1,000 idle queues {grown * per_k:+.1f} MB")
    for kind, after in files_after.items():
        grown = after - files_before[kind]
        print(f"    of which {kind:12s}      {files_before[kind]:8.1f} MB -> {after:.1f} MB; "
              f"per 1,000 queues {grown * per_k:+.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=2000, help="queues to create (default 2000)")
    parser.add_argument("--dir", default=None, help="where the store goes (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="500 queues")
    parser.add_argument("--store-type", choices=(*STORE_TYPES, "both"), default="both",
                        help="consume queue store type(s) to measure (default both)")
    args = parser.parse_args()
    count = 500 if args.quick else args.queues
    types = STORE_TYPES if args.store_type == "both" else (args.store_type,)
    root = tempfile.mkdtemp(prefix="orbitmq-queues-", dir=args.dir)
    try:
        for store_type in types:
            run(root, count, store_type)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
