"""Transactional send throughput next to normal send throughput, in the same run, on one broker.

A transactional send is two requests (the half message, answered; END_TRANSACTION, oneway) and two
or three store writes on the broker (half, committed copy, op message) against one request and one
write for a normal send, so its cost is reported as a ratio to the normal send measured here, with
the same SDK, the same broker (an ``orbitmq standalone`` child process) and the same concurrency.

Workloads (each a fresh topic with 4 queues):
- blocking, 1 thread: ``Producer.send`` vs ``TransactionProducer.send_in_transaction`` (local
  transaction: return COMMIT);
- asyncio, 64 in flight: ``AsyncProducer.send`` vs ``AsyncTransactionProducer.send_in_transaction``.
Afterwards the committed messages are counted in their topic (they must all be there, once).

Usage: python bench/tx_bench.py [--quick] [--json bench/results/tx.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from orbitmq import (  # noqa: E402
    Admin,
    AsyncProducer,
    AsyncTransactionProducer,
    LocalTransactionState,
    Message,
    Producer,
    TransactionListener,
    TransactionProducer,
)
from orbitmq.testing import standalone_process  # noqa: E402
from orbitmq.transport.loop import run  # noqa: E402

BODY = b"x" * 256
IN_FLIGHT = 64


class Commit(TransactionListener):
    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def summary(name: str, latencies: list[float], elapsed: float) -> dict[str, Any]:
    lat = sorted(latencies)
    return {"workload": name, "msgs": len(lat), "msgs_s": len(lat) / elapsed,
            "p50_ms": statistics.median(lat) * 1000, "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1000}


def blocking(name: str, send: Callable[[Message], object], topic: str, n: int) -> dict[str, Any]:
    for _ in range(50):  # warm-up: routes, connections, topic creation
        send(Message(topic, BODY))
    latencies = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        send(Message(topic, BODY))
        latencies.append(time.perf_counter() - t0)
    return summary(name, latencies, time.perf_counter() - start)


async def concurrent(name: str, send: Callable[[Message], Awaitable[object]], topic: str,
                     n: int) -> dict[str, Any]:
    for _ in range(50):
        await send(Message(topic, BODY))
    latencies: list[float] = []
    todo = iter(range(n))

    async def worker() -> None:
        for _ in todo:
            t0 = time.perf_counter()
            await send(Message(topic, BODY))
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return summary(name, latencies, time.perf_counter() - start)


async def async_pair(ns: str, n: int, topics: tuple[str, str]) -> list[dict[str, Any]]:
    async with AsyncProducer("bench-plain-async", ns) as producer:
        plain = await concurrent("asyncio 64 in flight: send", producer.send, topics[0], n)
    async with AsyncTransactionProducer("bench-tx-async", ns, listener=Commit()) as tx:
        trans = await concurrent("asyncio 64 in flight: send_in_transaction",
                                 lambda m: tx.send_in_transaction(m), topics[1], n)
    return [plain, trans]


def committed_count(admin: Admin, topic: str, producer: Producer) -> int:
    return sum(admin.max_offset(mq) for mq in producer.fetch_publish_queues(topic))


def measure(ns: str, n: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    with Admin(ns) as admin:
        for t in ("BenchPlain", "BenchTx", "BenchPlainAsync", "BenchTxAsync"):
            admin.create_topic(t, read_queue_nums=4, write_queue_nums=4)
    time.sleep(0.5)  # let the name server serve the new routes (not part of any measurement)
    with Producer("bench-plain", ns) as producer:
        rows = [blocking("blocking 1 thread: send", producer.send, "BenchPlain", n)]
    with TransactionProducer("bench-tx", ns, listener=Commit()) as tx:
        rows.append(blocking("blocking 1 thread: send_in_transaction",
                             lambda m: tx.send_in_transaction(m), "BenchTx", n))
    rows += run(async_pair(ns, n, ("BenchPlainAsync", "BenchTxAsync")))
    counts: dict[str, int] = {}
    with Admin(ns) as admin, Producer("bench-count", ns) as producer:
        deadline = time.monotonic() + 10
        for topic in ("BenchTx", "BenchTxAsync"):
            while (got := committed_count(admin, topic, producer)) < n + 50 and time.monotonic() < deadline:
                time.sleep(0.05)
            counts[topic] = got
    return rows, counts


def report(rows: list[dict[str, Any]], counts: dict[str, int], n: int) -> None:
    print(f"{'workload':<44} {'msgs':>7} {'msgs/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'vs send':>8}")
    for plain, trans in zip(rows[::2], rows[1::2], strict=True):
        for row, ratio in ((plain, "1.00"), (trans, f"{trans['msgs_s'] / plain['msgs_s']:.2f}")):
            print(f"{row['workload']:<44} {row['msgs']:>7} {row['msgs_s']:>9,.0f} "
                  f"{row['p50_ms']:>7.2f} {row['p99_ms']:>7.2f} {ratio:>8}")
    for topic, got in counts.items():
        print(f"committed in {topic}: {got} of {n + 50} (incl. 50 warm-up)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2,000 messages per workload (seconds, not minutes)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "results" / "tx.json"))
    opts = ap.parse_args()
    n = 2_000 if opts.quick else 20_000
    with tempfile.TemporaryDirectory(prefix="orbitmq-txbench-") as store:
        server = standalone_process(store)
        try:
            ns = server.wait_ready("namesrv", "broker")["namesrv"]
            rows, counts = measure(ns, n)
        finally:
            server.stop()
            if server.proc.stdout is not None:
                server.proc.stdout.close()
    report(rows, counts, n)
    Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
    Path(opts.json).write_text(json.dumps({"rows": rows, "committed": counts}, indent=1))
    print(f"\nresults written to {opts.json}")


if __name__ == "__main__":
    main()
