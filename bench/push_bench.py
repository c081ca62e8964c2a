"""Push consumer benchmark: how fast a PushConsumer group drains a preloaded topic, next to the raw
pull throughput of the same broker in the same run (the ceiling: PullConsumer over every queue,
no listener, no acknowledgement).

One ``orbitmq standalone`` child process serves a topic of 8 queues preloaded with 1 KiB messages
(100,000; 20,000 with --quick). Each scenario drains it with a new consumer group, timed from the
consumers' start (the group's rebalance included) until every message has been consumed at least
once; duplicates (queues handed over while the group forms) are counted, not timed away.

Scenarios: raw pull; push with 1 consumer (consume batch 1, RocketMQ's default, and 32); push with
3 consumers in one process; push with 3 consumers in 3 processes.

Usage: python bench/push_bench.py [--quick] [--messages N] [--json bench/results/push.json]
Never part of the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOPIC, QUEUES, BODY_SIZE = "PushBench", 8, 1024
_PAIR = struct.Struct(">HI")  # queue id, queue offset: what a child logs per consumed message


# ------------------------------------------------------------------------------- setup
def start_broker(store: str) -> tuple[Any, str]:
    from orbitmq.testing import standalone_process

    server = standalone_process(store)
    addrs = server.wait_ready("namesrv", "broker", timeout=60)
    return server, addrs["namesrv"]


def preload(namesrv: str, total: int) -> float:
    """Create the topic and fill it; returns the seconds the sends took."""
    from orbitmq import Admin, AsyncProducer, Message
    from orbitmq.transport.loop import run

    with Admin(namesrv) as admin:
        admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        deadline = time.monotonic() + 30
        while TOPIC not in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.05)

    async def send_all() -> float:
        body = b"x" * BODY_SIZE
        async with AsyncProducer("push-bench-producer", namesrv) as producer:
            started = time.perf_counter()
            batches = [range(i, min(i + 64, total)) for i in range(0, total, 64)]
            for at in range(0, len(batches), 16):  # 16 batches in flight
                await asyncio.gather(*(producer.send_batch([Message(TOPIC, body) for _ in b])
                                       for b in batches[at:at + 16]))
            return time.perf_counter() - started

    return run(send_all())


# ------------------------------------------------------------------------------- raw pull
def raw_pull(namesrv: str, total: int) -> dict[str, Any]:
    """Every queue pulled from 0 to its end by one task each, 32 messages per pull."""
    from orbitmq import AsyncPullConsumer
    from orbitmq.transport.loop import run

    async def drain() -> tuple[int, float]:
        async with AsyncPullConsumer("push-bench-raw", namesrv) as puller:
            queues = await puller.fetch_queues(TOPIC)
            ends = {mq: await puller.max_offset(mq) for mq in queues}
            started = time.perf_counter()

            async def one(mq: Any) -> int:
                offset, got = 0, 0
                while offset < ends[mq]:
                    result = await puller.pull(mq, offset, 32)
                    got += len(result.messages)
                    offset = result.next_begin_offset
                return got

            counts = await asyncio.gather(*(one(mq) for mq in queues))
            return sum(counts), time.perf_counter() - started

    count, seconds = run(drain())
    return {"scenario": "raw pull (PullConsumer, 8 queues)", "consumed": count, "unique": count,
            "seconds": seconds}


# ------------------------------------------------------------------------------- in-process push
def push_in_process(namesrv: str, total: int, group: str, consumers: int, batch: int) -> dict[str, Any]:
    from orbitmq import ConsumeResult, PushConsumer

    lock = threading.Lock()
    seen: set[tuple[int, int]] = set()
    counter = [0]
    done = threading.Event()

    def listener(messages: list[Any], context: Any) -> ConsumeResult:
        with lock:
            for m in messages:
                seen.add((m.queue_id, m.queue_offset))
            counter[0] += len(messages)
            if len(seen) >= total:
                done.set()
        return ConsumeResult.SUCCESS

    group_members = [PushConsumer(group, namesrv=namesrv, consume_message_batch_max_size=batch)
                     for _ in range(consumers)]
    for c in group_members:
        c.subscribe(TOPIC, "*", listener)
    started = time.perf_counter()
    for c in group_members:
        c.start()
    finished = done.wait(600)
    seconds = time.perf_counter() - started
    for c in group_members:
        c.shutdown()
    if not finished:
        raise SystemExit(f"{group}: only {len(seen)} of {total} consumed in 600 s")
    where = "1 process" if consumers > 1 else ""
    label = f"push, {consumers} consumer{'s' if consumers > 1 else ''}"
    label += f", {where}" if where else ""
    label += f", consume batch {batch}" if batch > 1 else ""
    return {"scenario": label, "consumed": counter[0], "unique": len(seen), "seconds": seconds}


# ------------------------------------------------------------------------------- push in processes
def child_main(namesrv: str, group: str, out: str) -> None:
    """A consumer process: armed, waits for ``go`` on stdin, logs (queue, offset) pairs to ``out``."""
    from orbitmq import ConsumeResult, PushConsumer

    lock = threading.Lock()
    buf = bytearray()
    f = open(out, "wb")  # noqa: SIM115 - flushed by the loop below, closed at exit

    def listener(messages: list[Any], context: Any) -> ConsumeResult:
        with lock:
            for m in messages:
                buf.extend(_PAIR.pack(m.queue_id, m.queue_offset))
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, namesrv=namesrv)
    consumer.subscribe(TOPIC, "*", listener)
    print("armed", flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    consumer.start()
    try:
        while True:
            time.sleep(0.05)
            with lock:
                chunk = bytes(buf)
                buf.clear()
            if chunk:
                f.write(chunk)
                f.flush()
            if sys.stdin in _readable():
                break
    finally:
        consumer.shutdown()
        f.close()


def _readable() -> list[Any]:
    import select

    return select.select([sys.stdin], [], [], 0)[0]


def push_processes(namesrv: str, total: int, group: str, count: int, work: Path) -> dict[str, Any]:
    outs = [work / f"{group}-{i}.bin" for i in range(count)]
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--namesrv", namesrv,
                               "--group", group, "--out", str(o)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}) for o in outs]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "armed"
    started = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    seen: set[tuple[int, int]] = set()
    consumed, deadline = 0, time.monotonic() + 600
    while len(seen) < total and time.monotonic() < deadline:
        time.sleep(0.02)
        consumed, seen = _read_pairs(outs)
    seconds = time.perf_counter() - started
    for p in procs:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write("stop\n")
        p.stdin.close()
        p.wait(60)
        p.stdout.close()
    return {"scenario": f"push, {count} consumers, {count} processes", "consumed": consumed,
            "unique": len(seen), "seconds": seconds}


def _read_pairs(outs: list[Path]) -> tuple[int, set[tuple[int, int]]]:
    seen: set[tuple[int, int]] = set()
    consumed = 0
    for out in outs:
        data = out.read_bytes() if out.exists() else b""
        usable = len(data) - len(data) % _PAIR.size
        pairs = list(_PAIR.iter_unpack(data[:usable]))
        consumed += len(pairs)
        seen.update(pairs)
    return consumed, seen


# ------------------------------------------------------------------------------- report
def report(rows: list[dict[str, Any]], total: int) -> None:
    base = rows[0]["unique"] / rows[0]["seconds"]
    print(f"\n{total:,} messages of {BODY_SIZE} B over {QUEUES} queues, one standalone broker "
          f"process; every figure from this run")
    head = f"{'scenario':44} {'consumed':>9} {'dupes':>6} {'seconds':>8} {'msg/s':>9} {'vs pull':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        rate = r["unique"] / r["seconds"]
        r["msg_per_s"] = round(rate)
        r["ratio_vs_raw_pull"] = round(rate / base, 3)
        print(f"{r['scenario']:44} {r['consumed']:>9,} {r['consumed'] - r['unique']:>6,} "
              f"{r['seconds']:>8.2f} {rate:>9,.0f} {rate / base:>8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20,000 messages instead of 100,000")
    ap.add_argument("--messages", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--group", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.child:
        child_main(opts.namesrv, opts.group, opts.out)
        return
    total = opts.messages or (20_000 if opts.quick else 100_000)
    with tempfile.TemporaryDirectory(prefix="push-bench-") as tmp:
        server, namesrv = start_broker(str(Path(tmp) / "store"))
        try:
            sent = preload(namesrv, total)
            print(f"preloaded {total:,} messages in {sent:.2f}s ({total / sent:,.0f} msg/s)")
            rows = [raw_pull(namesrv, total),
                    push_in_process(namesrv, total, "push-bench-1", 1, 1),
                    push_in_process(namesrv, total, "push-bench-1b", 1, 32),
                    push_in_process(namesrv, total, "push-bench-3", 3, 1),
                    push_processes(namesrv, total, "push-bench-3p", 3, Path(tmp))]
        finally:
            server.stop()
    report(rows, total)
    if opts.json:
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json).write_text(json.dumps({"messages": total, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
