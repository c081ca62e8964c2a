"""Publish over TLS against plaintext on the same broker (the target: >= 0.6x, docs/tls.md).

    .venv/bin/python bench/tls_bench.py [--quick] [--seconds 8] [--rounds 3] [--json PATH]

One ``orbitmq standalone`` (ASYNC_FLUSH) in ``tls_server_mode permissive``, so that the TLS
load and the plaintext load reach the same process on the same port; rounds alternate between
them. The load is 4 producer processes, each with one connection pipelining SEND_BATCH_MESSAGE
requests of 64 messages of 1 KiB (16 requests in flight), encoded once before the run: the
clients cost little beside the broker, as mqload's do (mqload has no TLS). Every answer is
read and must be SUCCESS.

Prints msgs/s per round, the median ratio TLS / plaintext, and the CPU seconds per million
messages of the broker and of the load processes in each mode, which say what bounds it: the
machine has 2 cores, shared by the broker (one event loop thread doing the TLS records) and the
load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import systems as sysmod  # noqa: E402  (bench/ is not a package)

from orbitmq import Admin, Message  # noqa: E402
from orbitmq.client.producer.send_codec import build_send_request, prepare_batch  # noqa: E402
from orbitmq.protocol.bodies import MessageQueue  # noqa: E402
from orbitmq.protocol.command import decode_command, encode  # noqa: E402
from orbitmq.testing.certs import make_test_certs  # noqa: E402

PRODUCERS = 4
BATCH = 64
BODY_BYTES = 1024
WINDOW = 16
QUEUES = 8
TOPIC = "TlsBench"
TARGET = 0.6
_LENGTH = struct.Struct(">I")


def _frames(topic: str) -> list[bytes]:
    """One SEND_BATCH_MESSAGE frame per queue (64 messages of 1 KiB each, own UNIQ_KEYs)."""
    out = []
    for q in range(QUEUES):
        msgs = [Message(topic, os.urandom(BODY_BYTES)) for _ in range(BATCH)]
        prepared = prepare_batch(msgs, [uuid.uuid4().hex.upper() for _ in msgs], 4 * 1024 * 1024)
        cmd = build_send_request(prepared, MessageQueue(topic, "broker-a", q), "tls-bench", 8)
        out.append(bytes(encode(cmd)))
    return out


def _read_frame(sock: socket.socket, buf: bytearray) -> bytes:
    while len(buf) < 4:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    need = 4 + _LENGTH.unpack_from(buf)[0]
    while len(buf) < need:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    frame = bytes(buf[:need])
    del buf[:need]
    return frame


def _producer(addr: str, ca: str | None, frames: list[bytes], seconds: float,
              out: Any) -> None:
    """One connection: WINDOW requests in flight for ``seconds``; puts (messages acked,
    seconds, user+system CPU seconds)."""
    host, _, port = addr.rpartition(":")
    sock: socket.socket = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ca is not None:
        sock = ssl.create_default_context(cafile=ca).wrap_socket(sock, server_hostname=host)
    cpu0 = time.process_time()
    buf = bytearray()
    sent = acked = 0
    start = time.monotonic()
    end = start + seconds
    for _ in range(WINDOW):
        sock.sendall(frames[sent % len(frames)])
        sent += 1
    while acked < sent:
        answer = decode_command(_read_frame(sock, buf)[4:])
        if answer.code != 0:
            raise RuntimeError(f"send refused: code {answer.code} {answer.remark}")
        acked += 1
        if time.monotonic() < end:
            sock.sendall(frames[sent % len(frames)])
            sent += 1
    elapsed = time.monotonic() - start
    sock.close()
    out.put((acked * BATCH, elapsed, time.process_time() - cpu0))


def run_round(addr: str, ca: str | None, frames: list[bytes], seconds: float,
              broker_pid: int) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    results: Any = ctx.Queue()
    hz = os.sysconf("SC_CLK_TCK")
    ticks0 = sysmod_ticks(broker_pid)
    procs = [ctx.Process(target=_producer, args=(addr, ca, frames, seconds, results))
             for _ in range(PRODUCERS)]
    for p in procs:
        p.start()
    got = [results.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(30)
    msgs = sum(g[0] for g in got)
    elapsed = max(g[1] for g in got)
    broker_cpu = (sysmod_ticks(broker_pid) - ticks0) / hz
    client_cpu = sum(g[2] for g in got)
    return {"msgs_s": msgs / elapsed, "msgs": msgs, "elapsed_s": elapsed,
            "broker_cpu_s_per_m": broker_cpu / msgs * 1e6,
            "client_cpu_s_per_m": client_cpu / msgs * 1e6,
            "broker_cpu_pct": broker_cpu / elapsed * 100}


def sysmod_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="length of one round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each mode")
    ap.add_argument("--json", type=Path, help="write the results here too")
    ap.add_argument("--quick", action="store_true", help="one round of 2 s each (a smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rounds = 2.0, 1
    work = Path(tempfile.mkdtemp(prefix="orbitmq-tls-bench-"))
    certs = make_test_certs(work / "certs")
    cmd = [sys.executable, "-m", "orbitmq.cli.main", "standalone", "--namesrv-port", "0",
           "--broker-port", "0", "--console-port", "0", "--grpc-port", "0",
           "--ha-listen-port", "0", "--store", str(work / "store"),
           "--flush-disk-type", "ASYNC_FLUSH", "--tls-server-mode", "permissive",
           "--tls-server-cert-path", str(certs.server_cert),
           "--tls-server-key-path", str(certs.server_key)]
    proc, addrs = sysmod._start_python(cmd, "namesrv", "broker")
    try:
        with Admin(addrs["namesrv"], tls=False) as admin:
            admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        frames = _frames(TOPIC)
        run_round(addrs["broker"], None, frames, 1.0 if args.quick else 2.0, proc.pid)  # warm-up
        rounds: dict[str, list[dict[str, float]]] = {"plaintext": [], "tls": []}
        for i in range(args.rounds):
            order = ("plaintext", "tls") if i % 2 == 0 else ("tls", "plaintext")
            for mode in order:
                rec = run_round(addrs["broker"], str(certs.ca) if mode == "tls" else None,
                                frames, args.seconds, proc.pid)
                rounds[mode].append(rec)
                print(f"round {i + 1} {mode:9s} {rec['msgs_s']:>10,.0f} msgs/s  broker "
                      f"{rec['broker_cpu_pct']:.0f}% CPU, {rec['broker_cpu_s_per_m']:.2f} s/M msgs;"
                      f" load {rec['client_cpu_s_per_m']:.2f} s/M msgs", flush=True)
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    med = {m: statistics.median(r["msgs_s"] for r in rs) for m, rs in rounds.items()}
    cpu = {m: statistics.median(r["broker_cpu_s_per_m"] for r in rs) for m, rs in rounds.items()}
    ratio = med["tls"] / med["plaintext"]
    print(f"median plaintext {med['plaintext']:,.0f} msgs/s, TLS {med['tls']:,.0f} msgs/s: "
          f"ratio {ratio:.2f}x (target >= {TARGET}x: {'met' if ratio >= TARGET else 'MISSED'}); "
          f"broker CPU per M msgs {cpu['plaintext']:.2f} s plaintext, {cpu['tls']:.2f} s TLS")
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "median_msgs_s": med,
                                         "ratio": ratio, "target": TARGET}, indent=2))


if __name__ == "__main__":
    main()
