"""Metadata at scale: create cost, memory per queue, name server memory, restart time.

    .venv/bin/python bench/scale_bench.py [--quick] [--sizes 100,10000,100000]
                                          [--namesrv-topics N] [--json PATH] [--dir DIR]

Real child processes (``orbitmq standalone`` and ``orbitmq namesrv``), the SDK over TCP:

1. **Create cost.** Topics of 8 queues created one by one with the SDK's admin client on one
   standalone broker, each timed. At each size N of ``--sizes`` it reports the mean ms per
   create of the window of creates just before N (the last 50, or N/2 when smaller) and the
   ratio of that window to the one at 100 (the target: the 100,000th <= 2x the 100th).
2. **Restart after kill -9 at the largest size.** The same broker, holding every topic of
   section 1 and one message, is killed (SIGKILL) and started again on its store: the time
   until it logs ready, and until a send and a pull of that message through the SDK succeed.
3. **Broker memory per 1,000 queues** on a fresh standalone, queues_bench.py's method (VmRSS
   and its anonymous and file-backed parts from /proc): grown by queues created idle, then by
   the same queues once each holds a few messages ("lightly used"); once per consume queue
   ``store_type`` of ``--store-types`` (default both: ``default`` maps each queue's file,
   ``compact`` reads and writes small queues with pread/pwrite, docs/store.md).
4. **Name server memory** with T topics of 8 queues on 2 broker sets: one ``orbitmq namesrv``,
   each broker set registering its whole table as a broker does at start (REGISTER_BROKER, its
   connection kept open as a broker's is); VmRSS and its peak (VmHWM) before and after, per
   1,000 topics, and the size of a whole registration next to one topic's registration (what
   incremental registration sends instead, REGISTER_TOPIC_IN_NAMESRV).

5. **Restart after kill -9 at a million queues.** A standalone broker (``store_type compact``)
   with ``--restart-queues`` queues holding a message each (filled, then dispatched: every
   queue's file made), then a ``--restart-log-gb`` commit log and offsets committed by 1,000
   groups, is killed (SIGKILL) and started again: the time until it is ready and until a send
   and a pull succeed, then 2,000 sampled queues' messages and every committed offset are
   checked.

6. **Lite topics** (RocketMQ 5.5) under one LITE parent on a fresh standalone: L/2 lite topics
   created by their first message (the SDK's ``Message(lite_topic=...)``) and left idle: the
   broker's RSS grown per 1,000 of them; then L/2 rounds of a send creating a new lite topic and a
   send to one that exists (picked at random), each timed, alternating so that both meet the same
   store: the p99 of both and their ratio (the target: create-on-first-send p99 <= 2x a send to
   an existing one). RSS is VmRSS with its anonymous and file-backed parts (the
   commit log's pages of the messages themselves are file-backed). Run once with the message
   index on and once off (the index's hash slots take a page per message at random: a cost of each
   message, whatever its topic, not of its lite topic). ``--lite-topics L``
   (default 100,000; ``--quick`` 2,000); ``--sections 6`` runs this section alone.

``--quick`` (sizes 100 and 500, 800 queues, 10,000 name server topics) runs in under a minute;
the full run (sizes 100, 10,000, 100,000; 8,000 queues; 100,000 topics) takes most of an hour on
two cores. Prints a table and writes JSON under bench/results/ (raw runs; docs/performance.md
holds the current standing). Figures, never asserted: the machine is shared.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from queues_bench import _by_id, _rss_mb

from orbitmq.client import Admin, Producer, PullConsumer
from orbitmq.errors import OrbitMQError
from orbitmq.protocol.bodies import (
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import RegisterBrokerRequestHeader, SendMessageRequestHeader
from orbitmq.protocol.message import Message
from orbitmq.testing.process import ServerProcess, standalone_process
from orbitmq.transport import LoopThread, RemotingClient

RESULTS = Path(__file__).resolve().parent / "results"
QUEUES_PER_TOPIC = 8
WINDOW_MAX = 50  # creates per reported window
IDLE_S = 3.0  # before each RSS reading: flushes and the page release service have run
FULL_SIZES = (100, 10_000, 100_000)
QUICK_SIZES = (100, 500)
STORE_ARGS = ("--mapped-file-size-commitlog", str(64 << 20))  # as queues_bench.py


# -- 1. create cost ---------------------------------------------------------------------------
def create_topics(namesrv: str, count: int, sizes: list[int]) -> list[float]:
    """Create ``count`` topics one by one; returns each create's milliseconds."""
    timings: list[float] = []
    with Admin(namesrv) as admin:
        for i in range(count):
            started = time.perf_counter()
            admin.create_topic(f"Scale{i:06d}", read_queue_nums=QUEUES_PER_TOPIC,
                               write_queue_nums=QUEUES_PER_TOPIC)
            timings.append((time.perf_counter() - started) * 1000)
            if i + 1 in sizes:
                print(f"  {i + 1:>7,} topics created ({sum(timings) / 1000:,.1f} s)", flush=True)
    return timings


def windows(timings: list[float], sizes: list[int]) -> list[dict[str, Any]]:
    """Mean and median ms per create of the window ending at each size, and its ratio to the
    window at the first size (100)."""
    out: list[dict[str, Any]] = []
    for n in sizes:
        width = min(WINDOW_MAX, max(1, n // 2))
        window = timings[n - width:n]
        out.append({"n": n, "window": f"{n - width + 1}-{n}",
                    "mean_ms": round(statistics.fmean(window), 3),
                    "median_ms": round(statistics.median(window), 3)})
    base, base_median = out[0]["mean_ms"], out[0]["median_ms"]
    for row in out:  # the median's ratio too: a window's mean moves with one stall of the host
        row["ratio_to_first"] = round(row["mean_ms"] / base, 2)
        row["median_ratio_to_first"] = round(row["median_ms"] / base_median, 2)
    return out


# -- 2. restart after kill -9 -----------------------------------------------------------------
def restart_after_kill(proc: ServerProcess, store: str, topic: str,
                       args: tuple[str, ...] = STORE_ARGS) -> tuple[ServerProcess, dict[str, Any]]:
    """kill -9 ``proc`` and start it again on ``store``: seconds to ready, and to a send and a
    pull that succeed (the pull reads the message sent before the kill)."""
    namesrv = proc.addresses["namesrv"]
    with Producer("scale-bench", namesrv, retry_times_when_send_failed=0) as producer:
        before = producer.send(Message(topic, b"before the kill"), _by_id(0))
    time.sleep(1.0)  # the commit log's asynchronous flush (500 ms) has run
    proc.kill()
    started = time.perf_counter()
    proc = standalone_process(store, *args)
    namesrv = proc.wait_ready("namesrv", "broker", timeout=1800)["namesrv"]
    ready_s = time.perf_counter() - started
    with Producer("scale-bench", namesrv) as producer:
        _served(lambda: producer.send(Message(topic, b"after the restart"), _by_id(0)))
    with PullConsumer("scale-bench-pull", namesrv) as puller:
        got = puller.pull(before.queue, offset=before.queue_offset, max_nums=1)
    served_s = time.perf_counter() - started
    if not got.messages or got.messages[0].body != b"before the kill":
        raise SystemExit(f"the message sent before the kill was not pulled back: {got}")
    return proc, {"ready_s": round(ready_s, 2), "send_and_pull_s": round(served_s, 2)}


# -- 3. broker memory per 1,000 queues --------------------------------------------------------
STORE_TYPES = ("default", "compact")
SECTIONS = (1, 2, 3, 4, 5, 6)


def queue_memory(root: str, queues: int, messages_per_queue: int,
                 store_type: str = "default") -> dict[str, Any]:
    store = os.path.join(root, f"rss-store-{store_type}")
    proc = standalone_process(store, *STORE_ARGS, "--store-type", store_type)
    topics = [f"Rss{i:05d}" for i in range(-(-queues // QUEUES_PER_TOPIC))]
    try:
        namesrv = proc.wait_ready("namesrv", "broker")["namesrv"]
        pid = proc.proc.pid
        time.sleep(IDLE_S)
        empty = _rss_mb(pid)
        with Admin(namesrv) as admin:
            for topic in topics:
                admin.create_topic(topic, read_queue_nums=QUEUES_PER_TOPIC,
                                   write_queue_nums=QUEUES_PER_TOPIC)
        time.sleep(IDLE_S)
        idle = _rss_mb(pid)
        with Producer("scale-rss", namesrv, retry_times_when_send_failed=0) as producer:
            for topic in topics:
                for queue_id in range(QUEUES_PER_TOPIC):
                    for k in range(messages_per_queue):
                        producer.send(Message(topic, b"q" * 100, keys=f"{topic}-{queue_id}-{k}"),
                                      _by_id(queue_id))
        time.sleep(IDLE_S)
        used = _rss_mb(pid)
        used_files = _file_rss_mb(pid)
    finally:
        proc.stop()
    made = len(topics) * QUEUES_PER_TOPIC
    per_k = 1000 / made

    def grown(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: round((b.get(k, 0.0) - a.get(k, 0.0)) * per_k, 3) for k in a}

    return {"store_type": store_type, "queues": made, "messages_per_queue": messages_per_queue,
            "rss_mb": {"empty": empty, "idle": idle, "used": used},
            "used_file_rss_mb": used_files,
            "idle_per_1k_mb": grown(empty, idle), "used_per_1k_mb": grown(empty, used)}


def _file_rss_mb(pid: int) -> dict[str, float]:
    """Resident MB of the broker's file mappings by kind (the store directory a file is in:
    commitlog, index, consumequeue; ``libraries`` for the rest): which files the RssFile is."""
    out: dict[str, float] = {}
    kind = ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:  # a mapping's first line
                path = head[5] if len(head) > 5 else ""
                parent = os.path.basename(os.path.dirname(path))
                kind = (parent if parent in ("commitlog", "index") else
                        "consumequeue" if "/consumequeue/" in path else
                        "libraries" if path.startswith("/") else "")
            elif head[0] == "Rss:" and kind:
                out[kind] = round(out.get(kind, 0.0) + int(head[1]) / 1024, 2)
    return out


# -- 4. name server memory --------------------------------------------------------------------
def _status_mb(pid: int, *names: str) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in names:
                out[name] = round(int(rest.split()[0]) / 1024, 1)
    return out


def namesrv_memory(topics: int, broker_sets: int = 2) -> dict[str, Any]:
    proc = ServerProcess(["namesrv", "--port", "0"])
    loop = LoopThread("scale-bench-namesrv")
    clients = [RemotingClient() for _ in range(broker_sets)]
    try:
        addr = proc.wait_ready("namesrv")["namesrv"]
        pid = proc.proc.pid
        time.sleep(1.0)
        before = _status_mb(pid, "VmRSS", "VmHWM")
        table = {f"S{i:06d}": TopicConfig(f"S{i:06d}", QUEUES_PER_TOPIC, QUEUES_PER_TOPIC)
                 for i in range(topics)}
        body = RegisterBrokerBody(TopicConfigSerializeWrapper(table)).to_json()
        del table
        started = time.perf_counter()
        for n, client in enumerate(clients):
            name = f"broker-{chr(ord('a') + n)}"
            header = RegisterBrokerRequestHeader(
                broker_name=name, broker_addr=f"127.0.0.1:{30911 + n}",
                cluster_name="ScaleCluster", ha_server_addr="", broker_id=0)
            cmd = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext_fields(), body)
            resp = loop.call(client.invoke(addr, cmd, 120), 180)
            if resp.code != ResponseCode.SUCCESS:
                raise SystemExit(f"registration of {name} refused: {resp.code} {resp.remark}")
        register_s = time.perf_counter() - started
        time.sleep(IDLE_S)
        after = _status_mb(pid, "VmRSS", "VmHWM")
        probe = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "S000000"})
        route = TopicRouteData.from_json(loop.call(clients[0].invoke(addr, probe, 10), 20).body)
        if len(route.queue_datas) != broker_sets:
            raise SystemExit(f"route of S000000 names {len(route.queue_datas)} broker sets")
    finally:
        for client in clients:
            loop.call(client.close(), 10)
        loop.stop()
        proc.stop()
    one_topic = TopicRouteData(queue_datas=[QueueData("broker-a", 8, 8, 6)]).to_json()
    return {"topics": topics, "broker_sets": broker_sets, "rss_mb": {"before": before, "after": after},
            "rss_per_1k_topics_mb": round((after["VmRSS"] - before["VmRSS"]) * 1000 / topics, 3),
            "register_s": round(register_s, 2), "whole_registration_bytes": len(body),
            "one_topic_registration_bytes": len(one_topic)}


# -- 5. restart at a million queues and a large commit log ------------------------------------
PAD_BATCH_MESSAGES = 15
PAD_MESSAGE_BYTES = 256 * 1024  # batches under 4 MiB: the commit log grows at the disk's pace
SAMPLE_QUEUES = 2000  # queues whose message is pulled back after the restart
OFFSET_GROUPS = 1000  # groups that commit an offset before the kill


FILL_WINDOW = 256  # sends in flight while the queues are filled
FILL_TIMEOUT_S = 60.0  # one answer's bound (a broker creating queue files by the thousand)
DISPATCH_WAIT_MAX_S = 1800.0  # until the filled queues are all dispatched


async def _fill_queues(broker: str, topics: list[str]) -> int:
    """One message in every queue of ``topics``, sent straight to the broker (SEND_MESSAGE_V2 as
    a producer sends it, no route lookup per topic: the setup of a million queues is not what
    is measured) with FILL_WINDOW in flight; every answer must be SUCCESS. Returns how many."""
    client = RemotingClient()
    work = iter([(t, q) for t in topics for q in range(QUEUES_PER_TOPIC)])
    born = int(time.time() * 1000)
    sent = 0

    async def worker() -> None:
        nonlocal sent
        for topic, queue_id in work:
            header = SendMessageRequestHeader(
                producer_group="scale-restart", topic=topic, default_topic="TBW102",
                default_topic_queue_nums=QUEUES_PER_TOPIC, queue_id=queue_id, sys_flag=0,
                born_timestamp=born, flag=0, properties=f"UNIQ_KEY\x01{topic}-{queue_id}\x02")
            cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, header.to_v2_ext_fields(),
                                          f"{topic}:{queue_id}".encode())
            resp = await client.invoke(broker, cmd, FILL_TIMEOUT_S)
            if resp.code != ResponseCode.SUCCESS:
                raise SystemExit(f"send to {topic}:{queue_id} refused: {resp.code} {resp.remark}")
            sent += 1

    try:
        await asyncio.gather(*(worker() for _ in range(FILL_WINDOW)))
    finally:
        await client.close()
    return sent


def _pad_log(namesrv: str, topic: str, log_bytes: int) -> int:
    """Batches into one queue until the commit log holds about ``log_bytes``."""
    body = b"p" * PAD_MESSAGE_BYTES
    sent = 0
    with Producer("scale-pad", namesrv) as producer:
        while sent < log_bytes:
            producer.send_batch([Message(topic, body) for _ in range(PAD_BATCH_MESSAGES)])
            sent += PAD_BATCH_MESSAGES * PAD_MESSAGE_BYTES
    return sent


SERVED_WAIT_MAX_S = 300.0


def _served(call: Callable[[], Any]) -> Any:
    """``call()`` once the restarted broker serves it: a topic is routed once the broker has
    registered it with the (restarted) name server, which may follow its ready line."""
    deadline = time.monotonic() + SERVED_WAIT_MAX_S
    while True:
        try:
            return call()
        except OrbitMQError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def million_restart(root: str, queues: int, log_gb: float) -> dict[str, Any]:
    """``queues`` queues holding a message each (store_type compact, what a broker of that
    many queues runs) and a commit log of ``log_gb`` GB, offsets committed by OFFSET_GROUPS
    groups, then kill -9: the seconds until the restarted broker is ready and serves a send and
    a pull, and a check of SAMPLE_QUEUES queues' messages and every committed offset."""
    store = os.path.join(root, "million-store")
    args = ("--store-type", "compact", "--topics-max", str(2 * queues // QUEUES_PER_TOPIC + 100))
    topics = [f"M{i:07d}" for i in range(-(-queues // QUEUES_PER_TOPIC))]
    proc = standalone_process(store, *args)
    doc: dict[str, Any] = {"queues": len(topics) * QUEUES_PER_TOPIC}
    try:
        namesrv = proc.wait_ready("namesrv", "broker")["namesrv"]
        started = time.perf_counter()
        with Admin(namesrv) as admin:
            for topic in topics:
                admin.create_topic(topic, read_queue_nums=QUEUES_PER_TOPIC,
                                   write_queue_nums=QUEUES_PER_TOPIC)
            admin.create_topic("MPad", read_queue_nums=1, write_queue_nums=1)
        doc["create_s"] = round(time.perf_counter() - started, 1)
        print(f"  {len(topics):,} topics created in {doc['create_s']:,.1f} s", flush=True)
        started = time.perf_counter()
        asyncio.run(_fill_queues(proc.addresses["broker"], topics))
        doc["fill_s"] = round(time.perf_counter() - started, 1)
        with Admin(namesrv) as admin:  # the queues' files made: the broker at rest again
            deadline = time.monotonic() + DISPATCH_WAIT_MAX_S
            while admin.broker_runtime_info(proc.addresses["broker"])["dispatchBehindBytes"] != "0":
                if time.monotonic() > deadline:
                    raise SystemExit(f"not dispatched after {DISPATCH_WAIT_MAX_S} s")
                time.sleep(0.5)
        doc["dispatched_s"] = round(time.perf_counter() - started, 1)
        print(f"  a message in each of {doc['queues']:,} queues in {doc['fill_s']:,.1f} s, "
              f"dispatched (every queue's file made) in {doc['dispatched_s']:,.1f} s", flush=True)
        started = time.perf_counter()
        doc["padding_bytes"] = _pad_log(namesrv, "MPad", int(log_gb * 1e9))
        doc["pad_s"] = round(time.perf_counter() - started, 1)
        committed = {}
        for g in range(OFFSET_GROUPS):
            topic = topics[g * 7919 % len(topics)]
            with PullConsumer(f"scale-group-{g}", namesrv) as consumer:
                mq = next(m for m in consumer.fetch_queues(topic) if m.queue_id == g % 8)
                consumer.update_offset(mq, 1)
                consumer.persist_offsets()
            committed[f"scale-group-{g}"] = (topic, g % 8)
        log_bytes = sum(f.stat().st_size for f in Path(store, "commitlog").iterdir())
        doc["commit_log_gb"] = round(log_bytes / 1e9, 2)
        print(f"  commit log {doc['commit_log_gb']} GB; {OFFSET_GROUPS} offsets committed; "
              "kill -9", flush=True)
        proc.kill()
        started = time.perf_counter()
        proc = standalone_process(store, *args)
        namesrv = proc.wait_ready("namesrv", "broker", timeout=1800)["namesrv"]
        doc["ready_s"] = round(time.perf_counter() - started, 2)
        probe = topics[len(topics) // 2]
        with Producer("scale-restart", namesrv) as producer:
            after = _served(lambda: producer.send(Message(probe, b"after the restart"),
                                                  _by_id(3)))
        with PullConsumer("scale-restart-pull", namesrv) as puller:
            got = puller.pull(after.queue, offset=0, max_nums=2)
        doc["send_and_pull_s"] = round(time.perf_counter() - started, 2)
        if [m.body for m in got.messages] != [f"{probe}:3".encode(), b"after the restart"]:
            raise SystemExit(f"queue {probe}:3 after the restart: {got}")
        rng = random.Random(38)
        missing = 0
        with PullConsumer("scale-restart-pull", namesrv) as puller:
            for _ in range(SAMPLE_QUEUES):
                topic, queue_id = rng.choice(topics), rng.randrange(QUEUES_PER_TOPIC)
                queues = _served(lambda t=topic: puller.fetch_queues(t))
                mq = next(m for m in queues if m.queue_id == queue_id)
                pulled = puller.pull(mq, offset=0, max_nums=1)
                missing += [m.body for m in pulled.messages] != [f"{topic}:{queue_id}".encode()]
        lost_offsets = 0
        for group, (topic, queue_id) in committed.items():
            with PullConsumer(group, namesrv) as consumer:
                queues = _served(lambda t=topic, c=consumer: c.fetch_queues(t))
                mq = next(m for m in queues if m.queue_id == queue_id)
                lost_offsets += consumer.fetch_offset(mq) != 1
        doc["sampled_queues"], doc["sampled_missing"] = SAMPLE_QUEUES, missing
        doc["offsets"], doc["offsets_lost"] = len(committed), lost_offsets
        if missing or lost_offsets:
            raise SystemExit(f"after the restart: {missing} sampled messages missing, "
                             f"{lost_offsets} committed offsets lost")
    finally:
        proc.kill()
        shutil.rmtree(store, ignore_errors=True)
    return doc


# -- 6. lite topics ---------------------------------------------------------------------------
LITE_PARENT = "LiteScale"


def _p99_ms(samples: list[float]) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3)


def lite_topics(root: str, count: int, index: bool = True) -> dict[str, Any]:
    store = os.path.join(root, f"lite-store-{'index' if index else 'noindex'}")
    proc = standalone_process(store, *STORE_ARGS, "--message-index-enable", str(index).lower())
    try:
        namesrv = proc.wait_ready("namesrv", "broker")["namesrv"]
        pid = proc.proc.pid
        with Admin(namesrv) as admin:
            admin.create_topic(LITE_PARENT, read_queue_nums=1, write_queue_nums=1,
                               attributes="+message.type=LITE")
        with Producer("scale-lite", namesrv, retry_times_when_send_failed=0) as producer:
            for i in range(50):  # warm the connection and the send path
                producer.send(Message(LITE_PARENT, b"w", lite_topic=f"warm{i}"))
            time.sleep(IDLE_S)
            before = _rss_mb(pid)
            half = count // 2
            for i in range(half):
                producer.send(Message(LITE_PARENT, b"l" * 100, lite_topic=f"lt{i:07d}"))
            time.sleep(IDLE_S)
            after = _rss_mb(pid)
            create: list[float] = []
            existing: list[float] = []
            rng = random.Random(39)
            for i in range(half, count):
                new = Message(LITE_PARENT, b"l" * 100, lite_topic=f"lt{i:07d}")
                old = Message(LITE_PARENT, b"l" * 100, lite_topic=f"lt{rng.randrange(i):07d}")
                t0 = time.perf_counter()
                producer.send(new)
                t1 = time.perf_counter()
                producer.send(old)
                existing.append(time.perf_counter() - t1)
                create.append(t1 - t0)
    finally:
        proc.stop()
    per_k = 1000 / half
    grown = {k: round((after.get(k, 0.0) - before.get(k, 0.0)) * per_k, 3) for k in before}
    p_create, p_existing = _p99_ms(create), _p99_ms(existing)
    return {"lite_topics": count, "message_index": index, "create_p99_ms": p_create, "existing_p99_ms": p_existing,
            "create_median_ms": round(statistics.median(create) * 1000, 3),
            "existing_median_ms": round(statistics.median(existing) * 1000, 3),
            "p99_ratio": round(p_create / p_existing, 2) if p_existing else None,
            "rss_mb": {"before": before, "after": after}, "idle_per_1k_mb": grown}


def render_lite(runs: list[dict[str, Any]]) -> list[str]:
    lines = []
    for lt in runs:
        g = lt["idle_per_1k_mb"]
        index = "on" if lt["message_index"] else "off"
        lines += [f"  lite topics, {lt['lite_topics']:,} under one parent (message index {index}): "
                  f"create-on-first-send p99 {lt['create_p99_ms']:.2f} ms (median "
                  f"{lt['create_median_ms']:.2f}), send to an existing one p99 "
                  f"{lt['existing_p99_ms']:.2f} ms (median {lt['existing_median_ms']:.2f}): "
                  f"{lt['p99_ratio']}x",
                  f"    broker RSS per 1,000 idle lite topics: {g['VmRSS']:+.2f} MB (anonymous "
                  f"{g.get('RssAnon', 0.0):+.2f}, file {g.get('RssFile', 0.0):+.2f})"]
    return lines


# -- the run ----------------------------------------------------------------------------------
def run(root: str, sizes: list[int], queues: int, messages: int, ns_topics: int,
        store_types: tuple[str, ...] = STORE_TYPES, restart_queues: int = 1_000_000,
        restart_log_gb: float = 10.0, sections: frozenset[int] = frozenset(SECTIONS),
        lite_count: int = 100_000,
        save: Callable[[dict[str, Any]], None] = lambda doc: None) -> dict[str, Any]:
    """The sections asked for; ``save(doc)`` after each, so that a later failure keeps them."""
    doc: dict[str, Any] = {}
    if sections & {1, 2}:
        store = os.path.join(root, "scale-store")
        # (topics_max counts the broker's own topics too: room for them past the largest size)
        args = (*STORE_ARGS, "--topics-max", str(sizes[-1] + 1000))
        proc = standalone_process(store, *args)
        try:
            namesrv = proc.wait_ready("namesrv", "broker")["namesrv"]
            print(f"1. create cost: topics of {QUEUES_PER_TOPIC} queues, one by one (admin "
                  "client)", flush=True)
            started = time.perf_counter()
            timings = create_topics(namesrv, sizes[-1], sizes)
            doc["create"] = {"total_s": round(time.perf_counter() - started, 1),
                             "windows": windows(timings, sizes)}
            save(doc)
            if 2 in sections:
                print(f"2. restart after kill -9 with {sizes[-1]:,} topics", flush=True)
                proc, doc["restart"] = restart_after_kill(proc, store, "Scale000000", args)
                doc["restart"]["topics"] = sizes[-1]
                save(doc)
        finally:
            proc.kill()
            shutil.rmtree(store, ignore_errors=True)
    if 3 in sections:
        doc["queues"] = {}
        for store_type in store_types:
            print(f"3. broker memory, store_type {store_type}: {queues:,} queues idle, then with "
                  f"{messages} messages each", flush=True)
            doc["queues"][store_type] = queue_memory(root, queues, messages, store_type)
            save(doc)
    if 4 in sections:
        print(f"4. name server memory: {ns_topics:,} topics of {QUEUES_PER_TOPIC} queues on 2 "
              "broker sets", flush=True)
        doc["namesrv"] = namesrv_memory(ns_topics)
        save(doc)
    if 5 in sections:
        print(f"5. restart after kill -9 with {restart_queues:,} queues holding a message and a "
              f"{restart_log_gb:g} GB commit log", flush=True)
        doc["million"] = million_restart(root, restart_queues, restart_log_gb)
        save(doc)
    if 6 in sections:
        print(f"6. lite topics: {lite_count:,} under one parent, created by their first send",
              flush=True)
        doc["lite"] = [lite_topics(root, lite_count, index) for index in (True, False)]
        save(doc)
    return doc


def render(doc: dict[str, Any]) -> str:
    lines = ["", f"OrbitMQ metadata at scale (topics of {QUEUES_PER_TOPIC} queues)"]
    if "create" in doc:
        c = doc["create"]
        lines.append(f"  create, admin client one by one ({c['total_s']:,.1f} s in all):")
        for w in c["windows"]:
            lines.append(f"    creates {w['window']:>13}: {w['mean_ms']:7.2f} ms mean, "
                         f"{w['median_ms']:7.2f} ms median; {w['ratio_to_first']:.2f}x the first "
                         f"(medians {w['median_ratio_to_first']:.2f}x)")
    if "restart" in doc:
        r = doc["restart"]
        lines.append(f"  restart after kill -9 with {r['topics']:,} topics: ready in "
                     f"{r['ready_s']:.2f} s, a send and a pull served in {r['send_and_pull_s']:.2f} s")
    for store_type, q in doc.get("queues", {}).items():
        for label, key in (("idle", "idle_per_1k_mb"),
                           (f"{q['messages_per_queue']} messages each", "used_per_1k_mb")):
            g = q[key]
            lines.append(f"  broker RSS per 1,000 queues, {store_type:>7} {label:>17}: "
                         f"{g['VmRSS']:+.2f} MB (anonymous {g.get('RssAnon', 0.0):+.2f}, file "
                         f"{g.get('RssFile', 0.0):+.2f}; {q['queues']:,} queues)")
    if "namesrv" in doc:
        n = doc["namesrv"]
        a, b = n["rss_mb"]["before"], n["rss_mb"]["after"]
        lines.append(f"  name server, {n['topics']:,} topics on {n['broker_sets']} broker sets: "
                     f"VmRSS {a['VmRSS']:.1f} -> {b['VmRSS']:.1f} MB (peak {b['VmHWM']:.1f} MB), "
                     f"{n['rss_per_1k_topics_mb']:.3f} MB per 1,000 topics")
        lines.append(f"    a whole registration {n['whole_registration_bytes'] / 1e6:,.2f} MB "
                     f"(registered in {n['register_s']:.2f} s for both); one topic's "
                     f"{n['one_topic_registration_bytes']} B")
    if "million" in doc:
        m = doc["million"]
        lines.append(f"  restart after kill -9 with {m['queues']:,} queues holding a message, a "
                     f"{m['commit_log_gb']} GB commit log: ready in {m['ready_s']:.2f} s, a send "
                     f"and a pull served in {m['send_and_pull_s']:.2f} s; {m['sampled_missing']} of "
                     f"{m['sampled_queues']:,} sampled messages and {m['offsets_lost']} of "
                     f"{m['offsets']:,} committed offsets missing")
    if "lite" in doc:
        lines.extend(render_lite(doc["lite"]))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="sizes 100 and 500, 800 queues, 10,000 name server topics (< 1 min)")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated topic counts, the first 100 (default 100,10000,100000)")
    ap.add_argument("--queues", type=int, default=None, help="queues for the RSS section")
    ap.add_argument("--namesrv-topics", type=int, default=None, help="topics at the name server")
    ap.add_argument("--store-types", default=",".join(STORE_TYPES),
                    help="consume queue store types of the RSS section (default default,compact)")
    ap.add_argument("--json", default=None, help="result file (default bench/results/scale-<time>.json)")
    ap.add_argument("--restart-queues", type=int, default=None,
                    help="queues of the restart section (default 1,000,000; --quick 8,000)")
    ap.add_argument("--restart-log-gb", type=float, default=None,
                    help="commit log GB of the restart section (default 10; --quick 0.2)")
    ap.add_argument("--sections", default=",".join(map(str, SECTIONS)),
                    help="sections to run, e.g. 1,5 (default all, 1-6; 2 needs 1)")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--lite-topics", type=int, default=None,
                    help="lite topics of section 6 (default 100,000; --quick 2,000)")
    opts = ap.parse_args()
    try:
        sections = frozenset(int(x) for x in opts.sections.split(","))
    except ValueError:
        sections = frozenset({0})
    if not sections or not sections <= set(SECTIONS) or (2 in sections and 1 not in sections):
        ap.error("--sections takes numbers 1-6 separated by commas (2 needs 1)")
    restart_queues = opts.restart_queues or (8000 if opts.quick else 1_000_000)
    restart_log_gb = opts.restart_log_gb or (0.2 if opts.quick else 10.0)
    if restart_queues < QUEUES_PER_TOPIC or not 0 < restart_log_gb <= 1000:
        ap.error("--restart-queues must be 8 or more and --restart-log-gb in (0, 1000]")
    sizes = ([int(s) for s in opts.sizes.split(",")] if opts.sizes
             else list(QUICK_SIZES if opts.quick else FULL_SIZES))
    if sizes != sorted(set(sizes)) or sizes[0] < 2:
        ap.error("--sizes must increase and start at 2 or more")
    queues = opts.queues or (800 if opts.quick else 8000)
    messages = 2 if opts.quick else 3
    ns_topics = opts.namesrv_topics or (10_000 if opts.quick else 100_000)
    store_types = tuple(opts.store_types.split(","))
    if not store_types or any(t not in STORE_TYPES for t in store_types):
        ap.error(f"--store-types takes {', '.join(STORE_TYPES)} separated by commas")
    lite_count = opts.lite_topics or (2_000 if opts.quick else 100_000)
    if lite_count < 100:
        ap.error("--lite-topics takes 100 or more")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "quick": opts.quick, "sizes": sizes,
            "cpus": os.cpu_count(), "note": "one sitting on a shared machine: figures, not assertions"}
    path = (Path(opts.json) if opts.json
            else RESULTS / f"scale-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)

    def save(doc: dict[str, Any]) -> None:
        path.write_text(json.dumps({**doc, "meta": meta}, indent=1))

    root = tempfile.mkdtemp(prefix="orbitmq-scale-", dir=opts.dir)
    try:
        doc = run(root, sizes, queues, messages, ns_topics, store_types, restart_queues,
                  restart_log_gb, sections, lite_count, save)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(render(doc))
    print(f"\nresults written to {path}")


if __name__ == "__main__":
    main()
