"""The Python-client view: what an application gets from each system's asyncio client library.

    .venv/bin/python bench/client_bench.py [--quick] [--n N] [--window W] [--json PATH]
        [--systems orbitmq,rabbit,redis,nats]

One process, one event loop (uvloop), the same work for every client: publish N 1 KiB messages
with at most W unconfirmed (a send counts when the broker confirmed it), then consume them all
(a message counts when it reached the application and was acknowledged):

- OrbitMQ: ``AsyncProducer.send`` (sliding window) and ``AsyncPushConsumer`` (from the first
  offset, a coroutine listener), against ``orbitmq standalone`` in ASYNC_FLUSH and SYNC_FLUSH,
  each with a plain producer and with ``AsyncProducer(..., auto_batch=True)`` (the window's
  concurrent sends leave as SEND_BATCH_MESSAGE requests; same calls, same consumer);
- RabbitMQ: aio-pika, publisher confirms, persistent messages; consume with prefetch 500 and an
  ack each (classic and quorum queues);
- Redis streams: redis-py asyncio, XADD in pipelines of W; XREADGROUP COUNT 500 + XACK;
- NATS JetStream: nats-py, ``js.publish`` awaiting each PubAck (sliding window); pull
  subscription fetching 500 with an ack each.

Reported: msgs/s and the client's own CPU per message (``time.process_time`` of this process:
the servers run in their own). Peers that are not installed, or whose client library is missing
(``make bench-peers`` installs both), are skipped. JSON under bench/results/. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import systems as sysmod  # noqa: E402

from orbitmq.transport import run as run_loop  # noqa: E402

BODY = os.urandom(1024)


async def windowed(n: int, window: int, one: Callable[[], Awaitable[Any]]) -> None:
    """``n`` calls of ``one`` with at most ``window`` unfinished at a time (a sliding window)."""
    sem = asyncio.Semaphore(window)
    tasks: set[asyncio.Task[Any]] = set()
    failures: list[BaseException] = []

    async def run() -> None:
        try:
            await one()
        except Exception as e:  # counted below: a benchmark that drops failures lies
            failures.append(e)
        finally:
            sem.release()

    for _ in range(n):
        await sem.acquire()
        task = asyncio.ensure_future(run())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    if failures:
        raise RuntimeError(f"{len(failures)} of {n} sends failed, first: {failures[0]!r}")


async def timed(n: int, work: Callable[[], Awaitable[None]]) -> dict[str, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    await work()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"msgs_s": round(n / wall), "client_cpu_us_per_msg": round(cpu / n * 1e6, 1),
            "secs": round(wall, 2)}


# ----------------------------------------------------------------------------------- OrbitMQ
async def orbitmq_case(namesrv: str, n: int, window: int, tag: str,
                       **producer_options: Any) -> dict[str, Any]:
    from orbitmq import AsyncProducer, AsyncPushConsumer, ConsumeFrom, ConsumeResult, Message

    topic = f"ClientBench{tag}"
    async with AsyncProducer(f"client_bench_p{tag}", namesrv, **producer_options) as producer:
        await producer.send(Message(topic, BODY))  # the route (the topic is created here)
        pub = await timed(n, lambda: windowed(n, window,
                                              lambda: producer.send(Message(topic, BODY))))
    done = asyncio.Event()
    got = [0]

    async def listener(messages: list[Any], context: Any) -> ConsumeResult:
        got[0] += len(messages)
        if got[0] >= n + 1:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = AsyncPushConsumer(f"client_bench_c{tag}", namesrv, consume_from=ConsumeFrom.FIRST)
    consumer.subscribe(topic, "*", listener)

    async def consume() -> None:
        await consumer.start()
        await asyncio.wait_for(done.wait(), 120)

    try:
        sub = await timed(n, consume)
    finally:
        await consumer.shutdown()
    return {"publish": pub, "consume": sub}


# ----------------------------------------------------------------------------------- peers
async def rabbit_case(queue: str, n: int, window: int) -> dict[str, Any]:
    import aio_pika

    conn = await aio_pika.connect("amqp://guest:guest@127.0.0.1:5672/")
    try:
        channel = await conn.channel(publisher_confirms=True)
        q = await channel.declare_queue(queue, durable=True, passive=True)
        await q.purge()

        def publish() -> Awaitable[Any]:
            msg = aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
            return channel.default_exchange.publish(msg, routing_key=queue)

        pub = await timed(n, lambda: windowed(n, window, publish))
        await channel.set_qos(prefetch_count=500)

        async def consume() -> None:
            got = 0
            async with q.iterator() as it:
                async for message in it:
                    await message.ack()
                    got += 1
                    if got >= n:
                        return

        sub = await timed(n, consume)
    finally:
        await conn.close()
    return {"publish": pub, "consume": sub}


async def redis_case(n: int, window: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    r = aioredis.Redis(host="127.0.0.1", port=6379)
    try:
        await r.config_set("appendfsync", "always")
        await r.delete("clientbench")

        async def publish() -> None:
            for start in range(0, n, window):
                pipe = r.pipeline(transaction=False)
                for _ in range(min(window, n - start)):
                    pipe.xadd("clientbench", {"d": BODY})
                await pipe.execute()

        pub = await timed(n, publish)
        await r.xgroup_create("clientbench", "g", id="0")

        async def consume() -> None:
            got = 0
            while got < n:
                answer = await r.xreadgroup("g", "c", {"clientbench": ">"}, count=500, block=5000)
                ids = [mid for _, entries in answer for mid, _ in entries]
                if not ids:
                    raise RuntimeError("redis: no more entries")
                await r.xack("clientbench", "g", *ids)
                got += len(ids)

        sub = await timed(n, consume)
        await r.delete("clientbench")
    finally:
        await r.aclose()
    return {"publish": pub, "consume": sub}


async def nats_case(n: int, window: int) -> dict[str, Any]:
    import nats

    nc = await nats.connect("nats://127.0.0.1:4222")
    try:
        js = nc.jetstream()
        await js.purge_stream("BENCH")
        pub = await timed(n, lambda: windowed(n, window, lambda: js.publish("bench.client", BODY)))
        sub_ = await js.pull_subscribe("bench.client", durable="clientbench")

        async def consume() -> None:
            got = 0
            while got < n:
                for msg in await sub_.fetch(500, timeout=10):
                    await msg.ack()
                    got += 1

        sub = await timed(n, consume)
        await js.delete_consumer("BENCH", "clientbench")
    finally:
        await nc.close()
    return {"publish": pub, "consume": sub}


# ----------------------------------------------------------------------------------- driver
def _library(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


SYSTEMS = ("orbitmq", "rabbit", "redis", "nats")


def cases(base: str, wanted: tuple[str, ...] = SYSTEMS,
          ) -> tuple[list[tuple[str, sysmod.System | None, Callable[..., Any]]], list[str]]:
    """(name, server to stop afterwards or None, coroutine function(n, window)) for each system."""
    out: list[tuple[str, sysmod.System | None, Callable[..., Any]]] = []
    notes: list[str] = []
    for flush in ("ASYNC_FLUSH", "SYNC_FLUSH") if "orbitmq" in wanted else ():
        server = sysmod.orbitmq(flush, base)
        namesrv, tag = server.addrs["namesrv"], flush.split("_")[0].title()
        out.append((f"{server.name} (AsyncProducer, AsyncPushConsumer)", None,
                    lambda n, w, ns=namesrv, t=tag: orbitmq_case(ns, n, w, t)))
        out.append((f"{server.name} (AsyncProducer auto_batch, AsyncPushConsumer)", server,
                    lambda n, w, ns=namesrv, t=tag: orbitmq_case(ns, n, w, f"{t}Batch",
                                                                 auto_batch=True)))
    installed = sysmod.installed_peers()
    peers = [("rabbit", "aio_pika"), ("redis", "redis"), ("nats", "nats")]
    for peer, module in peers:
        if peer not in wanted:
            continue
        if not installed[peer] or not _library(module):
            notes.append(f"{peer}: server or {module} missing (make bench-peers)")
            continue
        try:
            if peer == "rabbit":
                servers = sysmod.rabbit(["bench-classic", "bench-quorum"])
                out.append(("rabbit-classic (aio-pika)", None,
                            lambda n, w: rabbit_case("bench-classic", n, w)))
                out.append(("rabbit-quorum (aio-pika)", servers[0],
                            lambda n, w: rabbit_case("bench-quorum", n, w)))
            elif peer == "redis":
                out.append(("redis-always (redis-py)", sysmod.redis(["always"])[0], redis_case))
            else:
                out.append(("nats-js (nats-py)", sysmod.nats(), nats_case))
        except (RuntimeError, OSError) as e:
            notes.append(f"{peer}: could not start: {e}")
    return out, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2,000 messages per case")
    ap.add_argument("--n", type=int, default=None, help="messages per case (default 20,000)")
    ap.add_argument("--window", type=int, default=256, help="unconfirmed sends at most")
    ap.add_argument("--json", default=None)
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help=f"comma-separated, of {','.join(SYSTEMS)} (default: all)")
    opts = ap.parse_args()
    n = opts.n or (2_000 if opts.quick else 20_000)
    base = tempfile.mkdtemp(prefix="orbitmq-client-bench-")
    results: dict[str, Any] = {}
    todo: list[tuple[str, sysmod.System | None, Callable[..., Any]]] = []
    try:
        wanted = tuple(s.strip() for s in opts.systems.split(",") if s.strip())
        if unknown := set(wanted) - set(SYSTEMS):
            ap.error(f"unknown systems: {', '.join(sorted(unknown))}")
        todo, notes = cases(base, wanted)
        for name, _, case in todo:
            try:
                results[name] = run_loop(case(n, opts.window))
            except Exception as e:  # one failing client must not hide the others
                results[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"  {name}: {results[name]}", flush=True)
    finally:
        for _, server, _ in todo:
            if server is not None:
                server.stop()
        shutil.rmtree(base, ignore_errors=True)
    doc = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "n": n, "window": opts.window,
                    "note": "shared, noisy machine: compare ratios within this run", "skipped": notes},
           "results": results}
    print(render(doc))
    path = Path(opts.json) if opts.json else (
        sysmod.ROOT / "bench" / "results" / f"client-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    print(f"results written to {path}")


def render(doc: dict[str, Any]) -> str:
    res = doc["results"]
    lines = [f"\nPython clients, {doc['meta']['n']:,} x 1 KiB, window {doc['meta']['window']} "
             f"({doc['meta']['date']}; {doc['meta']['note']})",
             f"{'client':<62}{'publish/s':>11}{'cpu us/msg':>11}{'consume/s':>11}{'cpu us/msg':>11}"]
    for name, r in res.items():
        if "error" in r:
            lines.append(f"{name:<62} FAILED {r['error'][:80]}")
            continue
        p, c = r["publish"], r["consume"]
        lines.append(f"{name:<62}{p['msgs_s']:>11,}{p['client_cpu_us_per_msg']:>11}"
                     f"{c['msgs_s']:>11,}{c['client_cpu_us_per_msg']:>11}")
    ours = {k: v for k, v in res.items() if k.startswith("orbitmq") and "error" not in v}
    best = max(ours, key=lambda k: ours[k]["publish"]["msgs_s"], default=None)
    for peer in [k for k in res if k.startswith("rabbit") and "error" not in res[k]]:
        for name, r in ours.items():
            ratio = r["publish"]["msgs_s"] / res[peer]["publish"]["msgs_s"]
            lines.append(f"  {_short(name)} publish / {peer.split()[0]} publish: {ratio:.2f}x "
                         f"(target >= 5x: {'met' if ratio >= 5 else 'NOT met'})")
        if best is not None:
            ratio = ours[best]["publish"]["msgs_s"] / res[peer]["publish"]["msgs_s"]
            lines.append(f"  best OrbitMQ ({_short(best)}) publish / {peer.split()[0]} publish: "
                         f"{ratio:.2f}x (target >= 5x: {'met' if ratio >= 5 else 'NOT met'})")
    for note in doc["meta"]["skipped"]:
        lines.append(f"  skipped {note}")
    return "\n".join(lines)


def _short(name: str) -> str:
    """``orbitmq-async`` or ``orbitmq-async+auto_batch`` for a row's name."""
    return name.split()[0] + ("+auto_batch" if "auto_batch" in name else "")


if __name__ == "__main__":
    main()
