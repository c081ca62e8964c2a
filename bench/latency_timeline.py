#!/usr/bin/env python3
"""Per-stage timeline of one send and of one delivery, in microseconds.

The broker runs in this process (uvloop, the native fast path, ASYNC_FLUSH or ``--flush sync``)
with timestamps taken around its stages by wrappers this script installs (nothing in the broker
changes: the wrappers cost a few hundred ns each, the same in every stage). A client process
(this script with ``--client``) sends one SEND_MESSAGE_V2 at a time on one connection while a
second connection holds a long-polling PULL_MESSAGE on the same queue, and stamps, with the
same clock (CLOCK_MONOTONIC: ``time.perf_counter_ns`` in both processes), the send, the
send's answer and the delivery. After both answers it re-issues the pull, waits ``--gap-ms``
and sends the next message, so each message's stages lie alone between its send and the next.

Stages recorded on the broker (per message, the first of each after the client's send):

    read        the loop's read callback for the producer's bytes (RemotingConnection.buffer_updated)
    fast_in     the native fast path called (FastPath.__call__) ... fast_out: it returned
    sync_in     (SYNC_FLUSH) the lone send's sync (MessageStore.sync_now) ... sync_out
    ack_write   the send's answer handed to the socket (transport write/writelines) ...
                ack_written: that call returned (uvloop writes at once: the loopback's send)
    wake_in     MessageStore.wake (group commit round, dispatch) ... wake_out
    arrival     dispatch tells its arrival listeners (DispatchService._notify)
    notify      the long-poll service wakes the queue's held pulls (LongPollService.notify)
    resume      the held pull runs again (PullProcessor._resume)
    pull_write  the pull's answer handed to the socket ... pull_written: that call returned
    gc          a collection of the cyclic GC in the broker during the message (count, us)

Usage: .venv/bin/python bench/latency_timeline.py [-n 2000] [--flush async|sync] [--gap-ms 1]
"""

from __future__ import annotations

import argparse
import array
import asyncio
import gc
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

TOPIC = "LatTimeline"
GROUP = "lat-timeline"
BODY = b"x" * 1024
STAGES = ["read", "fast_in", "sync_in", "sync_out", "ack_write", "ack_written", "fast_out",
          "wake_in", "arrival", "notify", "resume", "pull_write", "pull_written", "wake_out"]
now_ns = time.perf_counter_ns


# ---------------------------------------------------------------------------------- client side
def _frames(port: int) -> tuple[Callable[[int], bytes], Callable[[int, int], bytes]]:
    from orbitmq.protocol.codes import RequestCode
    from orbitmq.protocol.command import RemotingCommand, encode
    from orbitmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader

    def send(i: int) -> bytes:
        h = SendMessageRequestHeader(
            producer_group="lat-p", topic=TOPIC, default_topic="TBW102",
            default_topic_queue_nums=1, queue_id=0, sys_flag=0, born_timestamp=0, flag=0,
            properties=f"UNIQ_KEY\x01lat-{i}\x02")
        cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, h.to_v2_ext_fields(), BODY)
        cmd.opaque = i
        return encode(cmd)

    def pull(i: int, offset: int) -> bytes:
        h = PullMessageRequestHeader(
            consumer_group=GROUP, topic=TOPIC, queue_id=0, queue_offset=offset, max_msg_nums=32,
            sys_flag=2, commit_offset=0, suspend_timeout_millis=15000, subscription="*")
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, h.to_ext_fields())
        cmd.opaque = 1_000_000_000 + i
        return encode(cmd)

    return send, pull


def _read_frame(sock: socket.socket, buf: bytearray) -> bytes:
    while True:
        if len(buf) >= 4:
            total = int.from_bytes(buf[:4], "big")
            if len(buf) >= 4 + total:
                frame = bytes(buf[4 : 4 + total])
                del buf[: 4 + total]
                return frame
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk


def client(port: int, n: int, gap_ms: float, offset: int) -> None:
    from orbitmq.protocol.command import decode_command

    send, pull = _frames(port)
    prod = socket.create_connection(("127.0.0.1", port))
    cons = socket.create_connection(("127.0.0.1", port))
    for s in (prod, cons):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pbuf, cbuf = bytearray(), bytearray()
    out = []
    cons.sendall(pull(0, offset))
    time.sleep(0.05)
    for i in range(n):
        frame = send(i)
        t0 = now_ns()
        prod.sendall(frame)
        ack = dlv = 0
        while not (ack and dlv):
            ready, _, _ = select.select([prod, cons], [], [], 5.0)
            if not ready:
                raise TimeoutError(f"message {i}: no answer")
            t = now_ns()
            if prod in ready and not ack:
                decode_command(_read_frame(prod, pbuf))
                ack = t
            if cons in ready and not dlv:
                resp = decode_command(_read_frame(cons, cbuf))
                if resp.code != 0:  # not found (timeout): pull again
                    cons.sendall(pull(i, offset))
                    continue
                dlv = t
        offset = int(resp.ext_fields["nextBeginOffset"])
        out.append((t0, ack, dlv))
        cons.sendall(pull(i + 1, offset))
        time.sleep(gap_ms / 1000)
    json.dump(out, sys.stdout)


# ---------------------------------------------------------------------------------- broker side
TAGS = [*STAGES, "gc_start", "gc_stop", "svc_in", "svc_out"]


class Recorder:
    """Stamps in two arrays of machine integers: recording allocates no object the cyclic GC
    tracks, so the GC collections seen are the broker's own."""

    def __init__(self) -> None:
        self.times = array.array("q")
        self.tags = array.array("b")
        self.sched_t = array.array("q")  # (time, the loop thread's run delay so far), ns
        self.sched_v = array.array("q")
        self.gcs: list[tuple[int, float]] = []  # (generation, us) of each collection
        self.gc_started = 0

    @property
    def events(self) -> list[tuple[int, str]]:
        return [(t, TAGS[k]) for t, k in zip(self.times, self.tags, strict=True)]

    def clear(self) -> None:
        del self.times[:], self.tags[:], self.sched_t[:], self.sched_v[:]
        self.gcs.clear()

    def sched(self) -> None:
        """The loop thread's time spent runnable but not running so far (ns, schedstat's second
        field): its growth across a message is what the machine's other work took from it."""
        with open("/proc/thread-self/schedstat", "rb") as f:
            waited = int(f.read().split()[1])
        self.sched_t.append(now_ns())
        self.sched_v.append(waited)

    def mark(self, tag: str) -> None:
        self.times.append(now_ns())
        self.tags.append(TAGS.index(tag))

    def wrap(self, cls: type, name: str, before: str, after: str | None = None) -> None:
        inner = getattr(cls, name)
        times, tags = self.times, self.tags
        b, a = TAGS.index(before), TAGS.index(after) if after is not None else -1

        def wrapper(*args: Any, **kw: Any) -> Any:
            times.append(now_ns())
            tags.append(b)
            try:
                return inner(*args, **kw)
            finally:
                if a >= 0:
                    times.append(now_ns())
                    tags.append(a)

        setattr(cls, name, wrapper)


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def instrument(rec: Recorder) -> None:
    from orbitmq.broker.fast_path import FastPath
    from orbitmq.broker.processor.long_poll_service import LongPollService
    from orbitmq.broker.processor.pull_processor import PullProcessor
    from orbitmq.store.dispatch import DispatchService
    from orbitmq.store.message_store import MessageStore
    from orbitmq.transport.connection import RemotingConnection

    rec.wrap(RemotingConnection, "buffer_updated", "read")
    updated = RemotingConnection.buffer_updated

    def updated_sched(self: Any, nbytes: int) -> None:
        rec.sched()
        updated(self, nbytes)

    RemotingConnection.buffer_updated = updated_sched  # type: ignore[method-assign]
    from orbitmq.store.service import ServiceThread
    for cls in {c for c in _subclasses(ServiceThread)} | {ServiceThread}:
        if "run_once" in vars(cls):
            rec.wrap(cls, "run_once", "svc_in", "svc_out")  # a store thread's round (or inline)
    wake = MessageStore.wake

    def wake_sched(self: Any, *args: Any, **kw: Any) -> None:
        wake(self, *args, **kw)
        rec.sched()

    MessageStore.wake = wake_sched  # type: ignore[method-assign]
    rec.wrap(FastPath, "__call__", "fast_in", "fast_out")
    rec.wrap(MessageStore, "sync_now", "sync_in", "sync_out")
    rec.wrap(MessageStore, "wake", "wake_in", "wake_out")
    rec.wrap(DispatchService, "_notify", "arrival")
    rec.wrap(LongPollService, "notify", "notify")
    rec.wrap(PullProcessor, "_resume", "resume")

    # Writes: which connection is the consumer's is known by what it asked (a pull).
    consumers: set[int] = set()
    pull_message = PullProcessor.pull_message

    def pull_wrapper(self: Any, cmd: Any, conn: Any) -> Any:
        consumers.add(id(conn))
        return pull_message(self, cmd, conn)

    PullProcessor.pull_message = pull_wrapper  # type: ignore[method-assign]
    connection_made = RemotingConnection.connection_made

    def made(self: Any, transport: Any) -> None:
        connection_made(self, transport)
        conn = self
        write, writelines = transport.write, transport.writelines

        class Spy:  # the transport with its writes stamped (uvloop's cannot be patched)
            def __getattr__(self, attr: str) -> Any:
                return getattr(transport, attr)

            def write(self, data: Any) -> None:
                pull = id(conn) in consumers
                rec.mark("pull_write" if pull else "ack_write")
                write(data)
                rec.mark("pull_written" if pull else "ack_written")

            def writelines(self, data: Any) -> None:
                pull = id(conn) in consumers
                rec.mark("pull_write" if pull else "ack_write")
                writelines(data)
                rec.mark("pull_written" if pull else "ack_written")

        self._transport = Spy()

    RemotingConnection.connection_made = made  # type: ignore[method-assign]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        rec.mark("gc_start" if phase == "start" else "gc_stop")
        if phase == "start":
            rec.gc_started = now_ns()
        else:
            rec.gcs.append((info["generation"], (now_ns() - rec.gc_started) / 1000))

    gc.callbacks.append(on_gc)


async def serve(opts: argparse.Namespace, rec: Recorder, store_path: str) -> list[Any]:
    from orbitmq.assembly import build_broker
    from orbitmq.config import BrokerConfig, FlushDiskType, StoreConfig
    from orbitmq.protocol.bodies import TopicConfig

    flush = FlushDiskType.SYNC_FLUSH if opts.flush == "sync" else FlushDiskType.ASYNC_FLUSH
    store = StoreConfig(store_path=store_path, flush_disk_type=flush)
    broker = build_broker(BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store))
    await broker.start()
    broker.topics.update(TopicConfig(TOPIC, 1, 1))
    gc.collect()  # as `orbitmq broker` does once started (cli/serving.py)
    gc.freeze()
    port = int(broker.address.rpartition(":")[2])
    env = dict(os.environ)
    args = [sys.executable, __file__, "--client", str(port), "-n", str(opts.n),
            "--gap-ms", str(opts.gap_ms)]
    if opts.pin:  # broker on the first CPU, client on the second: no preemption by the client
        os.sched_setaffinity(0, {0})
        args = ["taskset", "-c", "1", *args]
    # one message first: the store's first segment is made on the Python path
    warm = await asyncio.create_subprocess_exec(*args[:-4], "-n", "50", "--gap-ms", "0",
                                                stdout=subprocess.PIPE, env=env)
    out, _ = await warm.communicate()
    rec.clear()
    proc = await asyncio.create_subprocess_exec(*args, "--offset", "50",
                                                stdout=subprocess.PIPE, env=env)
    out, _ = await proc.communicate()
    await broker.stop()
    return json.loads(out)


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def analyse(samples: list[Any], events: list[tuple[int, str]],
            sched: list[tuple[int, int]]) -> dict[str, Any]:
    """Per message: the first time of each stage after its send, the GC and store-thread rounds
    (svc) within it, and the loop thread's run delay (runnable, not running) from the send to
    the delivery."""
    events.sort()
    m = 0  # the sched sample before the message's send
    rows: list[dict[str, float]] = []
    gcs: list[float] = []
    j = 0
    for k, (t0, ack, dlv) in enumerate(samples):
        end = samples[k + 1][0] if k + 1 < len(samples) else 1 << 62
        first: dict[str, float] = {}
        gc_us = 0.0
        gc_start = None
        while j < len(events) and events[j][0] < t0:
            j += 1
        svc_us = 0.0
        svc_start = None
        while j < len(events) and events[j][0] < end:
            t, tag = events[j]
            if tag == "gc_start":
                gc_start = t
            elif tag == "gc_stop" and gc_start is not None:
                gc_us += (t - gc_start) / 1000
            elif tag == "svc_in":
                svc_start = t
            elif tag == "svc_out" and svc_start is not None:
                if t0 <= svc_start <= dlv:
                    svc_us += (t - svc_start) / 1000
            elif tag not in first and (tag != "wake_out" or "wake_in" in first):
                first[tag] = (t - t0) / 1000
            j += 1
        first["ack_client"] = (ack - t0) / 1000
        first["deliver_client"] = (dlv - t0) / 1000
        # from the last sample before the send (the loop idle, not runnable: no run delay
        # accrues until the send's bytes wake it) to the last one before the delivery
        while m + 1 < len(sched) and sched[m + 1][0] < t0:
            m += 1
        waits = [v for t, v in sched[m : m + 64] if t <= dlv]
        first["run_delay"] = (waits[-1] - waits[0]) / 1000 if len(waits) >= 2 else 0.0
        first["svc"] = svc_us
        rows.append(first)
        gcs.append(gc_us)
    stages = STAGES + ["ack_client", "deliver_client"]
    table = {}
    for s in stages:
        vals = [r[s] for r in rows if s in r]
        if vals:
            table[s] = {"n": len(vals), "p50": _pct(vals, 0.5), "p99": _pct(vals, 0.99),
                        "max": max(vals)}
    slow = sorted(range(len(rows)), key=lambda i: rows[i]["deliver_client"])[-(len(rows) // 100 or 1):]
    causes = {"gc": 0, "store thread round": 0, "run delay >= half the excess": 0, "other": 0}
    median = table["deliver_client"]["p50"]
    for i in slow:
        excess = rows[i]["deliver_client"] - median
        if gcs[i]:
            causes["gc"] += 1
        elif rows[i]["svc"] > 0:
            causes["store thread round"] += 1
        elif rows[i]["run_delay"] >= excess / 2:
            causes["run delay >= half the excess"] += 1
        else:
            causes["other"] += 1
    return {"stages": table, "gc_messages": sum(1 for g in gcs if g),
            "gc_us_max": max(gcs, default=0.0), "slowest_1pct_causes": causes,
            "run_delay_p50": _pct([r["run_delay"] for r in rows], 0.5),
            "run_delay_p99": _pct([r["run_delay"] for r in rows], 0.99),
            "slowest_1pct": [{**rows[i], "gc_us": gcs[i]} for i in slow[-5:]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--flush", choices=("async", "sync"), default="async")
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--client", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--json", default="")
    ap.add_argument("--pin", action="store_true", help="broker on CPU 0, client on CPU 1")
    opts = ap.parse_args()
    if opts.client:
        client(opts.client, opts.n, opts.gap_ms, opts.offset)
        return
    from orbitmq.transport.loop import run

    rec = Recorder()
    instrument(rec)
    with tempfile.TemporaryDirectory() as store_path:
        samples = run(serve(opts, rec, store_path))
    result = analyse(samples, rec.events, list(zip(rec.sched_t, rec.sched_v, strict=True)))
    print(f"{len(samples)} messages, flush {opts.flush}; us after the client's send "
          "(p50 / p99 / max; a stage missing in some messages shows its count)")
    prev = 0.0
    for stage, s in result["stages"].items():
        print(f"  {stage:15s} {s['p50']:9.1f} {s['p99']:9.1f} {s['max']:9.1f}  "
              f"(+{s['p50'] - prev:6.1f} p50)  n={s['n']}")
        prev = s["p50"]
    print(f"  messages that met a GC collection: {result['gc_messages']} "
          f"(longest {result['gc_us_max']:.0f} us)")
    for generation in range(3):
        took = sorted(us for g, us in rec.gcs if g == generation)
        if took:
            print(f"  GC generation {generation}: {len(took)} collections, p50 "
                  f"{took[len(took) // 2]:.0f} us, max {took[-1]:.0f} us")
    print(f"  loop thread's run delay (runnable, not running) per message: p50 "
          f"{result['run_delay_p50']:.0f} us, p99 {result['run_delay_p99']:.0f} us")
    print(f"  the slowest 1% of deliveries met: {result['slowest_1pct_causes']}")
    print("  slowest deliveries:")
    for row in result["slowest_1pct"]:
        print("   ", {k: round(v, 1) for k, v in row.items()})
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)
    _ = statistics  # (kept for ad-hoc analysis)


if __name__ == "__main__":
    main()
