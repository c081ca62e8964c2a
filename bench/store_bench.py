"""Store append throughput next to the raw sequential write speed of the same disk, in one run.

    .venv/bin/python bench/store_bench.py [--quick] [--dir DIR] [--threads N]

Rows: 1 KiB messages appended singly and in batches of 32, under ASYNC_FLUSH (timed until a final
flush has made everything durable) and SYNC_FLUSH (every put waits for its fsync; single puts from
one and from several writer threads, so group commit shows). Baselines, written to a file in the
same directory: plain 64 KiB writes with one fsync at the end, and 64 KiB writes each followed by
fdatasync. MB/s counts the bytes the commit log holds (stored format, ~1.1 KiB per message); the
ratio column divides by the matching baseline (ASYNC rows by write+fsync, SYNC rows by
write+fdatasync per 64 KiB). Not a test: never run by pytest.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from orbitmq.config import FlushDiskType, StoreConfig
from orbitmq.store import MessageInner, MessageStore, PutMessageStatus
from orbitmq.testing.store_put import put_durably

BODY_SIZE = 1024
BATCH = 32
CHUNK = 64 * 1024


@dataclass
class Row:
    name: str
    messages: int
    stored_bytes: int
    seconds: float
    baseline: str

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.messages else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.stored_bytes / self.seconds / 1e6


def _raw(path: str, total: int, sync_every_chunk: bool) -> float:
    chunk = os.urandom(CHUNK)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        written = 0
        while written < total:
            written += os.write(fd, chunk)
            if sync_every_chunk:
                os.fdatasync(fd)
        os.fsync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.remove(path)


def _store(base: str, flush: FlushDiskType) -> MessageStore:
    path = tempfile.mkdtemp(prefix="store-", dir=base)
    cfg = StoreConfig(
        store_path=path,
        flush_disk_type=flush,
        mapped_file_size_commitlog=256 * 1024 * 1024,
        message_index_enable=False,
    )
    store = MessageStore(cfg)
    store.start()
    return store


def _messages(count: int) -> list[MessageInner]:
    body = os.urandom(BODY_SIZE)
    props = {"TAGS": "bench", "UNIQ_KEY": "0A0B0C0D000011112222333344445555"}
    return [MessageInner("BenchTopic", i % 8, body, props) for i in range(count)]


def _run_store(
    base: str, flush: FlushDiskType, total: int, batch: int, threads: int
) -> tuple[int, float]:
    store = _store(base, flush)
    try:
        per_thread = total // threads
        protos = _messages(batch)
        errors: list[PutMessageStatus] = []

        def writer(queue_id: int) -> None:
            msgs = [MessageInner(m.topic, queue_id, m.body, m.properties) for m in protos]
            for _ in range(per_thread // batch):
                r = store.put(msgs) if flush is FlushDiskType.ASYNC_FLUSH else put_durably(store, msgs)
                if r.status is not PutMessageStatus.PUT_OK:
                    errors.append(r.status)

        workers = [threading.Thread(target=writer, args=(i % 8,)) for i in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        store.commit_log.flush()  # durable, like the baseline's final fsync
        seconds = time.perf_counter() - start
        if errors:
            raise SystemExit(f"puts failed: {errors[:3]}")
        return store.max_physical_offset(), seconds
    finally:
        store.shutdown()
        shutil.rmtree(store.config.store_path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer messages (a smoke run)")
    parser.add_argument("--dir", default=".", help="directory on the disk to measure")
    parser.add_argument("--threads", type=int, default=8, help="writer threads for SYNC rows")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    n_async, n_sync = 200_000 // scale, 40_000 // scale
    base = tempfile.mkdtemp(prefix="orbitmq-bench-", dir=args.dir)
    rows: list[Row] = []
    try:
        cases: list[tuple[str, FlushDiskType, int, int, int, str]] = [
            ("ASYNC_FLUSH single", FlushDiskType.ASYNC_FLUSH, n_async, 1, 1, "fsync"),
            (f"ASYNC_FLUSH batch {BATCH}", FlushDiskType.ASYNC_FLUSH, n_async, BATCH, 1, "fsync"),
            ("SYNC_FLUSH single, 1 thread", FlushDiskType.SYNC_FLUSH, n_sync // 4, 1, 1, "fdatasync"),
            (f"SYNC_FLUSH single, {args.threads} threads", FlushDiskType.SYNC_FLUSH, n_sync, 1,
             args.threads, "fdatasync"),
            (f"SYNC_FLUSH batch {BATCH}", FlushDiskType.SYNC_FLUSH, n_async, BATCH, 1, "fdatasync"),
        ]
        raw_total = 0
        for name, flush, total, batch, threads, baseline in cases:
            stored, seconds = _run_store(base, flush, total, batch, threads)
            messages = total // threads // batch * batch * threads
            rows.append(Row(name, messages, stored, seconds, baseline))
            raw_total = max(raw_total, stored)
        raw_path = os.path.join(base, "raw.bin")
        raws = {
            "fsync": Row("raw write 64 KiB + fsync at end", 0, raw_total, _raw(raw_path, raw_total, False), ""),
            "fdatasync": Row("raw write 64 KiB + fdatasync each", 0, raw_total, _raw(raw_path, raw_total, True), ""),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    _print(rows, raws, args.quick)


def _print(rows: list[Row], raws: dict[str, Row], quick: bool) -> None:
    fmt: Callable[[str, str, str, str], str] = lambda a, b, c, d: f"{a:<36} {b:>12} {c:>10} {d:>12}"  # noqa: E731
    print(f"OrbitMQ store append, {BODY_SIZE} B bodies{' (quick)' if quick else ''}, cpus={os.cpu_count()}")
    print(fmt("case", "msgs/s", "MB/s", "ratio"))
    for r in rows:
        base = raws[r.baseline]
        print(fmt(r.name, f"{r.msgs_per_s:,.0f}", f"{r.mb_per_s:,.1f}", f"{r.mb_per_s / base.mb_per_s:.3f} x{r.baseline[:5]}"))
    for key in ("fsync", "fdatasync"):
        r = raws[key]
        print(fmt(r.name, "-", f"{r.mb_per_s:,.1f}", "1.000"))
    print("ratio = store MB/s / raw MB/s of the same disk (xfsync: vs write+fsync at end;"
          " xfdata: vs write+fdatasync per 64 KiB)")


if __name__ == "__main__":
    main()
