"""A replicated broker set on one machine: a name server, a SYNC_MASTER and its SLAVE, each an
``orbitmq`` process on 127.0.0.1 (docs/replication.md).

    .venv/bin/python examples/ha/run.py [--messages 10] [--dir DIR]

It starts the three servers on free ports (printing each command line), waits until the slave
replicates, sends messages (a SYNC_MASTER answers SEND_OK only once the slave holds a message),
shows ``orbitmq cluster list``, kills the master with SIGKILL and reads every message back with
a PullConsumer: from the slave, the only broker of the set left. Exits with status 0 when every
message came back with its body and key, 1 otherwise. The stores go to a temporary directory,
removed at the end, unless ``--dir`` names one (kept, to look at with ``orbitmq store info``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orbitmq import Admin, Message, Producer, PullConsumer, SendStatus
from orbitmq.client.results import PullStatus
from orbitmq.testing.process import ServerProcess

BROKER = "broker-ha"
TOPIC = "HaDemo"
WAIT_S = 30.0


def start(*args: str) -> ServerProcess:
    """``orbitmq ARGS`` as a child process (the command line printed first)."""
    print("$ orbitmq " + " ".join(args), flush=True)
    return ServerProcess(list(args))


def wait(check, what: str, timeout: float = WAIT_S):  # type: ignore[no-untyped-def]
    """``check()``'s first truthy value, asked every 0.1 s for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(0.1)
    return value


def send(namesrv: str, count: int) -> dict[str, Message]:
    """``count`` messages, one by one; msg id -> message. Every answer must be SEND_OK."""
    sent: dict[str, Message] = {}
    with Producer("ha-demo-producer", namesrv=namesrv) as producer:
        for i in range(count):
            msg = Message(TOPIC, f"order {i}".encode(), tags="created", keys=[f"order-{i}"])
            result = producer.send(msg)
            if result.status is not SendStatus.OK:
                raise SystemExit(f"message {i}: {result.status.name} (the slave does not hold it)")
            sent[result.msg_id] = msg
    print(f"sent {count} messages, every one answered SEND_OK", flush=True)
    return sent


def read_back(namesrv: str) -> dict[str, tuple[bytes, list[str]]]:
    """Every message of the topic, each queue from offset 0: msg id -> (body, keys)."""
    got: dict[str, tuple[bytes, list[str]]] = {}
    with PullConsumer("ha-demo-reader", namesrv=namesrv) as consumer:
        for mq in consumer.fetch_queues(TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, offset, 32)
                for m in result.messages:
                    got[m.msg_id] = (bytes(m.body), list(m.keys))
                if result.status is not PullStatus.FOUND:
                    break
                offset = result.next_begin_offset
    return got


def cluster_list(namesrv: str) -> None:
    out = subprocess.run([sys.executable, "-m", "orbitmq.cli.main", "cluster", "list",
                          "--namesrv", namesrv], capture_output=True, text=True, timeout=60)
    print(f"$ orbitmq cluster list --namesrv {namesrv}\n{out.stdout}{out.stderr}", end="",
          flush=True)


def demo(work: Path, count: int) -> int:
    servers: list[ServerProcess] = []
    try:
        servers.append(start("namesrv", "--port", "0"))
        namesrv = servers[-1].wait_ready("namesrv", timeout=WAIT_S)["namesrv"]
        common = ("--namesrv", namesrv, "--port", "0", "--grpc-listen-port", "0",
                  "--broker-name", BROKER)
        servers.append(start("broker", *common, "--broker-role", "SYNC_MASTER",
                             "--store", str(work / "master")))
        master = servers[-1]
        found = master.wait_ready("broker", "ha", timeout=WAIT_S)
        servers.append(start("broker", *common, "--broker-role", "SLAVE", "--broker-id", "1",
                             "--store", str(work / "slave")))
        slave_addr = servers[-1].wait_ready("broker", timeout=WAIT_S)["broker"]
        print(f"name server {namesrv}; master {found['broker']} (HA {found['ha']}); "
              f"slave {slave_addr}", flush=True)
        with Admin(namesrv) as admin:
            wait(lambda: admin.broker_ha_status(found["broker"]).links, "the slave connects")
        print("the slave replicates from its master", flush=True)
        sent = send(namesrv, count)
        cluster_list(namesrv)
        master.kill()
        print("master killed (SIGKILL)", flush=True)
        with Admin(namesrv) as admin:
            wait(lambda: [sorted(bd.broker_addrs) for bd in admin.topic_route(TOPIC).broker_datas]
                 == [[1]], "the route lists the slave alone")
        got = read_back(namesrv)
        intact = sum(1 for msg_id, m in sent.items()
                     if got.get(msg_id) == (m.body, list(m.keys)))
        print(f"read {intact} of {count} messages back from the slave {slave_addr}, "
              "bodies and keys intact", flush=True)
        return 0 if intact == count else 1
    finally:
        for server in reversed(servers):
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10, help="how many to send (default 10)")
    parser.add_argument("--dir", default=None, help="keep the stores here (default: a temporary "
                                                    "directory, removed at the end)")
    args = parser.parse_args()
    if args.messages < 1:
        parser.error("--messages must be at least 1")
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="orbitmq-ha-"))
    try:
        code = demo(work, args.messages)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
