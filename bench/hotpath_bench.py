"""CPU cost per message of the broker's send and pull paths, in process, without sockets.

    .venv/bin/python bench/hotpath_bench.py [--n N] [--flush ASYNC_FLUSH|SYNC_FLUSH] [--profile]
        [--sort tottime|cumulative] [--only send|pull|e2e|sink] [--metrics]

A real BrokerController (store in a temporary directory) gets the frames mqload sends
(SEND_MESSAGE_V2 with headers a..m and a UNIQ_KEY property, 1 KiB bodies; PULL_MESSAGE of 32;
the same by a TAG subscription to half of the messages, per message delivered; then pulls at
the end of the queues, as a consumer that caught up sends them: answered at once without the
suspend bit, held with it, and the held ones answered by a send to each queue: per pull;
last a caught-up push consumer's steady state, a lone send and the next held pull a message:
``run_e2e``) fed straight into a RemotingConnection whose transport only counts bytes. What is measured is
``time.process_time`` (every thread of the process: event loop, dispatch, flush) per message, so
the figure does not depend on how busy the rest of the machine is, and the kernel's share
(socket writes) is left out on purpose: it is the same for every Python design. ``--only sink``
runs the same frames against bench/ack_sink.py's handler (transport + codec only): the floor.
Each is run ``--repeat`` times and the minimum kept. ``--profile`` prints the top functions by
own time (or ``--sort cumulative``; cProfile adds its own overhead).
Not a test: never run by pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from orbitmq.assembly import build_broker
from orbitmq.config import BrokerConfig, FlushDiskType, MetricsExporterType, StoreConfig
from orbitmq.protocol.batch import encode_batch
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand, SerializeType, encode
from orbitmq.transport import RemotingServer, new_event_loop
from orbitmq.transport.connection import RemotingConnection

BODY = os.urandom(1024)
QUEUES = 8
FRAMES_PER_READ = 48  # about what one 64 KiB socket read holds of 1 KiB sends
PULL_BATCH = 32
END_PULLS = 4000  # pulls a run at the end of the queues (held: under HELD_PER_CONNECTION_MAX)


class CountingTransport:
    """Stands in for a socket: takes what is written and counts it; never blocks."""

    def __init__(self) -> None:
        self.written = 0
        self.writes = 0

    def writelines(self, parts: list[Any]) -> None:
        self.writes += 1
        for p in parts:
            self.written += len(p)

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def send_frame(opaque: int, topic: str, qid: int, ser: SerializeType, tag: str = "") -> bytes:
    """One SEND_MESSAGE_V2 as mqload builds it (same extFields, same property; a TAGS property
    too when ``tag`` is given)."""
    props = f"UNIQ_KEY\x017F000001{os.getpid() & 0xFFFF:04X}000000000000{opaque:08X}\x02"
    if tag:
        props += f"TAGS\x01{tag}\x02"
    ext = {"a": "bench_producer", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(qid),
           "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0",
           "k": "false", "m": "false"}
    cmd = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=opaque, ext_fields=ext,
                          body=BODY, serialize_type=ser)
    return encode(cmd)


def batch_frame(opaque: int, topic: str, qid: int, ser: SerializeType, size: int) -> bytes:
    """One SEND_BATCH_MESSAGE of ``size`` messages, each with its own UNIQ_KEY, as mqload's."""
    body = encode_batch((0, BODY, {"UNIQ_KEY": f"7F000001000000000000{opaque:06X}{i:06X}"})
                        for i in range(size))
    ext = {"a": "bench_producer", "b": topic, "c": "TBW102", "d": str(QUEUES), "e": str(qid),
           "f": "0", "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0",
           "k": "false", "m": "true"}
    return encode(RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE, opaque=opaque,
                                  ext_fields=ext, body=body, serialize_type=ser))


def pull_frame(opaque: int, topic: str, qid: int, offset: int, sys_flag: int = 2,
               suspend_ms: int = 1000, subscription: str = "*") -> bytes:
    ext = {"consumerGroup": "bench_consumer", "topic": topic, "queueId": str(qid),
           "queueOffset": str(offset), "maxMsgNums": str(PULL_BATCH), "sysFlag": str(sys_flag),
           "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
           "subscription": subscription, "subVersion": "0", "expressionType": "TAG"}
    return encode(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque, ext_fields=ext))


async def attach(server: RemotingServer) -> RemotingConnection:
    """A server-side connection on a CountingTransport (connection_made needs the running loop)."""
    conn = server._new_connection()
    conn.connection_made(CountingTransport())  # type: ignore[arg-type]
    return conn


def chunks(frames: list[bytes], per: int) -> list[bytes]:
    return [b"".join(frames[i : i + per]) for i in range(0, len(frames), per)]


def received(conn: RemotingConnection, data: bytes) -> None:
    """``data`` handed to the connection as a socket read hands it: copied into the buffer
    ``get_buffer`` lends, then ``buffer_updated`` (more than one round when it does not fit)."""
    view = memoryview(data)
    while view:
        buf = conn.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        conn.buffer_updated(n)
        view = view[n:]


async def feed(conn: RemotingConnection, reads: list[bytes]) -> None:
    """Each read goes in as one socket read would; the loop runs between reads (responses
    flushed, SYNC_FLUSH waiters resumed)."""
    for data in reads:
        while conn._paused:  # in-flight limit reached (SYNC_FLUSH): wait as TCP would
            await asyncio.sleep(0)
        received(conn, data)
        await asyncio.sleep(0)
    while conn._in_flight or conn._flush_scheduled:
        await asyncio.sleep(0.0005)


def measure(label: str, messages: int, run: Callable[[], Any], profile: bool,
            sort: str = "tottime") -> float:
    prof = cProfile.Profile() if profile else None
    t0 = time.process_time()
    if prof is not None:
        prof.enable()
    run()
    if prof is not None:
        prof.disable()
    us = (time.process_time() - t0) / messages * 1e6
    print(f"{label:<44} {us:8.2f} us CPU/msg  ({messages} msgs)")
    if prof is not None:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats(sort).print_stats(22)
        print("\n".join(out.getvalue().splitlines()[6:34]))
    return us


def broker_config(path: str, flush: str, metrics: bool = False) -> BrokerConfig:
    store = StoreConfig(store_path=path, flush_disk_type=FlushDiskType(flush),
                        mapped_file_size_commitlog=512 * 1024 * 1024, message_index_enable=True)
    exporter = MetricsExporterType.PROM if metrics else MetricsExporterType.DISABLE
    return BrokerConfig(listen_port=0, grpc_listen_port=0, store=store, metrics_exporter_type=exporter,
                        metrics_prom_exporter_port=0)


def run_broker(args: argparse.Namespace) -> dict[str, float]:
    loop = new_event_loop()
    base = tempfile.mkdtemp(prefix="orbitmq-hotpath-")
    results: dict[str, float] = {}
    ser = SerializeType(args.ser)
    try:
        broker = build_broker(broker_config(base, args.flush, args.metrics))
        loop.run_until_complete(broker.start())
        conn = loop.run_until_complete(attach(broker.server))
        topic = "hotpath"
        warm = [send_frame(i, topic, i % QUEUES, ser) for i in range(2000)]
        loop.run_until_complete(feed(conn, chunks(warm, FRAMES_PER_READ)))
        if args.batch > 1:
            frames = [batch_frame(10_000 + i, topic, i % QUEUES, ser, args.batch)
                      for i in range(args.n // args.batch)]
            reads = chunks(frames, 1)
        else:
            frames = [send_frame(10_000 + i, topic, i % QUEUES, ser) for i in range(args.n)]
            reads = chunks(frames, FRAMES_PER_READ)

        def sends(reads: list[bytes]) -> Callable[[], None]:
            def run() -> None:
                loop.run_until_complete(feed(conn, reads))
                broker.store.wait_dispatched()
            return run

        if args.dry:  # frames built, nothing sent: the setup's share of an instruction count
            loop.run_until_complete(broker.stop())
            return results
        label = f"broker send ({args.flush}, {ser.name} headers, batch {args.batch})"
        for r in range(args.repeat if args.only != "e2e" else 0):
            batch = reads if r == 0 or args.batch > 1 else chunks(
                [send_frame(100_000 * (r + 1) + i, topic, i % QUEUES, ser) for i in range(args.n)],
                FRAMES_PER_READ)
            us = measure(label, args.n, sends(batch), args.profile, args.sort)
            results["send"] = min(results.get("send", us), us)
        if args.only in (None, "pull"):
            total = 2000 + args.n * args.repeat
            per_queue = total // QUEUES
            pulls = [pull_frame(50_000 + i, topic, q, off)
                     for i, (q, off) in enumerate((q, off) for off in range(0, per_queue - PULL_BATCH,
                                                                              PULL_BATCH)
                                                  for q in range(QUEUES))]
            pulled = len(pulls) * PULL_BATCH
            for _ in range(args.repeat):
                us = measure("broker pull 32", pulled,
                             lambda: loop.run_until_complete(feed(conn, chunks(pulls, 8))),
                             args.profile, args.sort)
                results["pull"] = min(results.get("pull", us), us)
            # A TAG subscription to one of two tags that alternate: CPU per message delivered.
            tagged = f"{topic}-tags"
            loop.run_until_complete(feed(conn, chunks(
                [send_frame(300_000 + i, tagged, i % QUEUES, ser, "TagA" if i // QUEUES % 2 else
                            "TagB") for i in range(args.n)], FRAMES_PER_READ)))
            broker.store.wait_dispatched()
            tag_pulls = [pull_frame(400_000 + i, tagged, q, off, subscription="TagA")
                         for i, (q, off) in enumerate(
                             (q, off) for off in range(0, args.n // QUEUES - 2 * PULL_BATCH,
                                                       2 * PULL_BATCH) for q in range(QUEUES))]
            for _ in range(args.repeat):
                us = measure("broker pull 32, TAG subscription (1 in 2)", len(tag_pulls) * PULL_BATCH,
                             lambda: loop.run_until_complete(feed(conn, chunks(tag_pulls, 8))),
                             args.profile, args.sort)
                results["pull tag"] = min(results.get("pull tag", us), us)
            broker.store.wait_dispatched()
            ends = [broker.store.get_max_offset_in_queue(topic, q) for q in range(QUEUES)]
            for key, label, flag, suspend_ms in (
                    ("pull end", "broker pull at the queue's end, answered", 1, 0),
                    ("pull held", "broker pull at the queue's end, held", 3, 600_000)):
                for r in range(args.repeat):  # a connection a run: it may hold END_PULLS
                    ended = loop.run_until_complete(attach(broker.server))
                    frames = [pull_frame(70_000 + i, topic, i % QUEUES, ends[i % QUEUES], flag,
                                         suspend_ms) for i in range(END_PULLS)]
                    us = measure(label, END_PULLS, lambda: loop.run_until_complete(
                        feed(ended, chunks(frames, 8))), args.profile, args.sort)  # noqa: B023
                    results[key] = min(results.get(key, us), us)
                    if key == "pull held":  # a send to each queue answers its held pulls
                        sent = [send_frame(200_000 * (r + 1) + q, topic, q, ser)
                                for q in range(QUEUES)]
                        us = measure("broker held pull answered by a send", END_PULLS,
                                     sends([b"".join(sent)]), args.profile, args.sort)
                        results["held answered"] = min(results.get("held answered", us), us)
                        ends = [end + 1 for end in ends]
        if args.only in (None, "e2e"):
            results["e2e"] = min(run_e2e(loop, broker, topic, ser, args) for _ in range(args.repeat))
        loop.run_until_complete(broker.stop())
    finally:
        loop.close()
        shutil.rmtree(base, ignore_errors=True)
    return results


def run_e2e(loop: asyncio.AbstractEventLoop, broker: Any, topic: str, ser: SerializeType,
            args: argparse.Namespace) -> float:
    """A caught-up push consumer's steady state, as at a rate where every pull answer carries
    one message (mqload -mode e2e below a few thousand msgs/s): one pull held on each queue;
    then, message by message, a read of one send (which answers its queue's held pull in the
    same call) and a read of the consumer's next pull of that queue (held again), the loop
    running an iteration after each. CPU per message delivered, and how the event loop's
    thread spent it: the send's read, the pull's read, the iterations after them."""
    broker.store.wait_dispatched()
    ends = [broker.store.get_max_offset_in_queue(topic, q) for q in range(QUEUES)]
    producer = loop.run_until_complete(attach(broker.server))
    consumer = loop.run_until_complete(attach(broker.server))
    first = [pull_frame(80_000 + q, topic, q, ends[q], 3, 600_000) for q in range(QUEUES)]
    loop.run_until_complete(feed(consumer, [b"".join(first)]))
    n = args.n
    sends, pulls = [], []
    for i in range(n):
        q = i % QUEUES
        sends.append(send_frame(900_000 + i, topic, q, ser))
        ends[q] += 1
        pulls.append(pull_frame(90_000 + i, topic, q, ends[q], 3, 600_000))
    written = consumer._transport.written  # type: ignore[attr-defined]
    spent = [0.0, 0.0, 0.0]  # the loop thread's: send reads, pull reads, iterations
    clock = time.thread_time

    async def go() -> None:
        for send, pull in zip(sends, pulls, strict=True):
            t0 = clock()
            received(producer, send)
            t1 = clock()
            await asyncio.sleep(0)
            t2 = clock()
            received(consumer, pull)
            t3 = clock()
            await asyncio.sleep(0)
            spent[0] += t1 - t0
            spent[1] += t3 - t2
            spent[2] += t2 - t1 + clock() - t3
        await feed(producer, [])

    us = measure("e2e: a send, its held pull answered, the next held", n,
                 lambda: loop.run_until_complete(go()), args.profile, args.sort)
    send_us, pull_us, loop_us = (x / n * 1e6 for x in spent)
    print(f"  the loop's thread, us a message: send read {send_us:.1f}, pull read {pull_us:.1f}, "
          f"iterations {loop_us:.1f}")
    answered = consumer._transport.written - written  # type: ignore[attr-defined]
    assert answered > n * len(BODY), f"the held pulls were not answered ({answered} bytes)"
    return us


def run_sink(args: argparse.Namespace) -> dict[str, float]:
    """The same frames against ack_sink's handler: decode, answer, encode, nothing else."""
    loop = new_event_loop()
    server = RemotingServer("127.0.0.1", 0, name="sink")

    def ack(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"msgId": "0" * 32, "queueId": "0",
                                                             "queueOffset": "1"})

    server.register(RequestCode.SEND_MESSAGE_V2, ack)
    conn = loop.run_until_complete(attach(server))

    async def go() -> None:
        await feed(conn, reads)

    frames = [send_frame(i, "sink", i % QUEUES, SerializeType(args.ser)) for i in range(args.n)]
    reads = chunks(frames, FRAMES_PER_READ)
    try:
        return {"sink": min(measure("sink send (transport + codec only)", args.n,
                                    lambda: loop.run_until_complete(go()), args.profile, args.sort)
                            for _ in range(args.repeat))}
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000, help="sends measured")
    ap.add_argument("--flush", default="ASYNC_FLUSH", choices=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--ser", type=int, default=0, help="0 JSON headers, 1 binary (ROCKETMQ)")
    ap.add_argument("--only", choices=["send", "pull", "sink", "e2e"])
    ap.add_argument("--batch", type=int, default=1, help="messages per SEND_BATCH_MESSAGE")
    ap.add_argument("--dry", action="store_true", help="build the frames, send nothing")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--sort", default="tottime", choices=["tottime", "cumulative"],
                    help="--profile's order")
    ap.add_argument("--metrics", action="store_true",
                    help="metrics_exporter_type PROM (sampled request timings, /metrics served)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each; the minimum is kept")
    args = ap.parse_args()
    if args.only == "sink":
        run_sink(args)
        return
    results = run_broker(args)
    if args.only is None:
        results.update(run_sink(args))
    print({k: round(v, 2) for k, v in results.items()}, file=sys.stderr)


if __name__ == "__main__":
    main()
