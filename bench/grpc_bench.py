"""RocketMQ 5 protocol benchmark: the official 5.x client next to OrbitMQ's SDK, timers, POP memory.

    .venv/bin/python bench/grpc_bench.py [--quick] [--n N] [--timers T] [--json PATH]

1. Clients, one sitting, one ``orbitmq standalone`` (ASYNC_FLUSH): N sends of 1 KiB, one at a
   time, with the official 5.x Producer (gRPC, .venv-rmq5) and with OrbitMQ's Producer
   (remoting); then N messages consumed: the 5.x SimpleConsumer receiving batches of 32 and
   acking each, and OrbitMQ's PushConsumer (offsets committed as usual).
2. Timers, a broker in this process: T timer messages parked one hour ahead through the send
   path's hook and the durable-save seam, linked into the wheel; the process's resident memory
   before and after (cold store pages released, as the store does every 200 ms), the growth of
   the Python heap's allocated blocks over it (sys.getallocatedblocks: what the process keeps
   per timer, if anything) and the timer files' sizes. Then 200 timers due 2-6 s ahead, fired while
   the T are pending: how late each was delivered (its delivered copy's store time minus its
   delivery time; never early).
3. POP state: bytes of Python memory per message in flight (tracemalloc over 100,000).

Needs .venv-rmq5 (scripts/rmq5-venv.sh) for part 1; prints a table and writes JSON under
bench/results/. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "rmq5"))  # the official client's driver and the cluster
from rmq5_support import Cluster, Rmq5Driver, rmq5_venv_problem, unique  # noqa: E402

import orbitmq  # noqa: E402
from orbitmq.assembly import build_broker  # noqa: E402
from orbitmq.broker.controller import BrokerController  # noqa: E402
from orbitmq.broker.pop.inflight import PopState  # noqa: E402
from orbitmq.config import BrokerConfig, StoreConfig  # noqa: E402
from orbitmq.store.message_inner import MessageInner  # noqa: E402
from orbitmq.transport import LoopThread  # noqa: E402

BODY = b"x" * 1024
SAMPLE_TIMERS = 200
PARK_BATCH = 2000


def rss_mib(kind: str = "VmRSS") -> float:
    """Resident memory in MiB: VmRSS, or its heap part RssAnon, or its mapped files RssFile."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(kind + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


# -- 1. clients ----------------------------------------------------------------------------------
def clients(n: int, work: Path) -> dict[str, Any]:
    problem = rmq5_venv_problem()
    if problem is not None:
        return {"skipped": problem}
    cluster = Cluster(work / "store")
    driver = Rmq5Driver(work / "home")
    out: dict[str, Any] = {"n": n, "body_bytes": len(BODY)}
    try:
        t5, t4 = cluster.topic(unique("Bench5")), cluster.topic(unique("Bench4"))
        driver.call("producer", id="p", endpoint=cluster.endpoint, topics=[t5])
        sent = driver.call("bench_send", timeout=1800, id="p", topic=t5, count=n, size=len(BODY))
        out["rmq5_send_per_s"] = n / sent["seconds"]
        driver.call("simple", id="c", endpoint=cluster.endpoint, group=unique("G5"), topic=t5, await_s=2)
        got = driver.call("bench_receive", timeout=1800, id="c", count=n)
        out["rmq5_receive_ack_per_s"] = got["received"] / got["seconds"]
        with orbitmq.Producer(unique("P4"), namesrv=cluster.namesrv) as producer:
            start = time.perf_counter()
            for _ in range(n):
                producer.send(orbitmq.Message(t4, BODY))
            out["sdk_send_per_s"] = n / (time.perf_counter() - start)
        out["sdk_consume_per_s"] = _sdk_consume(cluster, t4, n)
    finally:
        driver.close()
        cluster.stop()
    return out


def _sdk_consume(cluster: Cluster, topic: str, n: int) -> float:
    done = threading.Event()
    count = [0]
    consumer = orbitmq.PushConsumer(unique("G4"), namesrv=cluster.namesrv,
                                    consume_from=orbitmq.ConsumeFrom.FIRST)

    @consumer.subscribe(topic, "*")
    def on_messages(messages: list[Any], context: Any) -> Any:
        count[0] += len(messages)
        if count[0] >= n:
            done.set()
        return orbitmq.ConsumeResult.SUCCESS

    start = time.perf_counter()
    consumer.start()
    try:
        done.wait(1800)
        return count[0] / (time.perf_counter() - start)
    finally:
        consumer.shutdown()


# -- 2. timers -----------------------------------------------------------------------------------
def timers(count: int, work: Path) -> dict[str, Any]:
    store = StoreConfig(store_path=str(work / "timer-store"), mapped_file_size_commitlog=256 << 20)
    config = BrokerConfig(listen_port=0, grpc_listen_port=-1, namesrv_addr="127.0.0.1:1", store=store)
    loop = LoopThread("timer-bench")
    broker = build_broker(config)
    loop.call(broker.start(), 60)
    try:
        broker.store.release_cold_pages()
        before, anon_before = rss_mib(), rss_mib("RssAnon")
        blocks_before = sys.getallocatedblocks()
        start = time.perf_counter()
        far = int(time.time() * 1000) + 3_600_000
        for first in range(0, count, PARK_BATCH):
            loop.call(_park(broker, first, min(PARK_BATCH, count - first), far), 120)
        park_s = time.perf_counter() - start
        deadline = time.monotonic() + 1800
        while broker.timer.files.checkpoint.enqueued < count and time.monotonic() < deadline:
            time.sleep(0.2)
        linked_s = time.perf_counter() - start
        blocks_growth = sys.getallocatedblocks() - blocks_before
        broker.store.release_cold_pages()  # what the store's page release does 5 times a second
        after, anon_after, file_after = rss_mib(), rss_mib("RssAnon"), rss_mib("RssFile")
        files = {p.name: p.stat().st_size for p in (work / "timer-store" / "timer").iterdir()}
        late = _fire_accuracy(broker, loop)
    finally:
        loop.call(broker.stop(), 120)
        loop.stop()
    late.sort()
    return {
        "pending": count, "park_and_store_s": round(park_s, 1), "linked_s": round(linked_s, 1),
        "rss_before_mib": round(before, 1), "rss_after_mib": round(after, 1),
        "rss_growth_bytes_per_timer": round((after - before) * 1024 * 1024 / count, 1),
        "rss_anon_growth_mib": round(anon_after - anon_before, 1), "rss_file_after_mib": round(file_after, 1),
        "python_blocks_growth": blocks_growth,
        "timer_files_bytes": files,
        "fire_late_ms": {"n": len(late), "p50": late[len(late) // 2], "p99": late[int(len(late) * 0.99)],
                         "max": late[-1], "early": sum(1 for x in late if x < 0)},
    }


async def _park(broker: BrokerController, first: int, n: int, due_ms: int) -> None:
    for i in range(first, first + n):
        msg = MessageInner("BenchTimer", i % 4, b"t", {"TIMER_DELIVER_MS": str(due_ms + i % 1000)},
                           store_host=broker.host.store_host)
        broker.timer.park(msg)
        broker.saver.append([msg])
    await asyncio.sleep(0)


def _fire_accuracy(broker: BrokerController, loop: LoopThread) -> list[int]:
    now = int(time.time() * 1000)
    dues = [now + 2000 + (i * 4000) // SAMPLE_TIMERS for i in range(SAMPLE_TIMERS)]

    async def park() -> None:
        for i, due in enumerate(dues):
            msg = MessageInner("BenchFire", 0, f"f{i}".encode(), {"TIMER_DELIVER_MS": str(due)},
                               store_host=broker.host.store_host)
            broker.timer.park(msg)
            broker.saver.append([msg])

    loop.call(park(), 60)
    deadline = time.monotonic() + 60
    store = broker.store
    while store.get_max_offset_in_queue("BenchFire", 0) < SAMPLE_TIMERS and time.monotonic() < deadline:
        time.sleep(0.1)
    late = []
    for offset in range(store.get_max_offset_in_queue("BenchFire", 0)):
        phy, size, _ = store.queue_entry("BenchFire", 0, offset) or (0, 0, 0)
        msg = store.look_message_by_offset(phy, size)
        if msg is not None:
            late.append(msg.store_timestamp - int(msg.properties["TIMER_DELIVER_MS"]))
    return late


# -- 3. POP memory -------------------------------------------------------------------------------
def pop_memory(n: int) -> dict[str, Any]:
    tracemalloc.start()
    state = PopState()
    base = tracemalloc.get_traced_memory()[0]
    qs = [state.queue("BenchGroup", "BenchTopic", q, lambda: 0) for q in range(8)]
    for i in range(n):
        state.hand_out("BenchGroup", "BenchTopic", qs[i % 8], i % 8, i, 1, 10**12 + i, 0, "")
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"in_flight": n, "bytes_per_message": round(used / n, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--n", type=int, default=None, help="messages per client run")
    parser.add_argument("--timers", type=int, default=None, help="pending timers")
    parser.add_argument("--json", default=None, help="where to write the results")
    parser.add_argument("--only", choices=("clients", "timers", "pop"), default=None,
                        help="run one part")
    args = parser.parse_args()
    n = args.n or (300 if args.quick else 5000)
    count = args.timers or (50_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory(prefix="orbitmq-grpc-bench-") as tmp:
        work = Path(tmp)
        parts = {"clients": lambda: clients(n, work), "timers": lambda: timers(count, work),
                 "pop": lambda: pop_memory(20_000 if args.quick else 100_000)}
        results = {name: run() for name, run in parts.items() if args.only in (None, name)}
    print(json.dumps(results, indent=2))
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / "grpc_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
