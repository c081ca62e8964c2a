"""README's and docs' examples, in order, against one `make run`-like server.

The server is `orbitmq standalone` started as a child process with the Makefile's RUN_FLAGS (the
flags of `make run`), on free ports and a temporary store. Every fenced block of README.md and
docs/*.md is classified below: run here (Python with the name server's address put in, shell
commands with `.venv/bin/` and the addresses put in, a page's `export` lines kept for its later
blocks, long-running servers started on free ports and seen ready, then stopped or kept for the
page's next blocks, error transcripts checked), or not run here, with the reason (a diagram, an output
sample, a fragment, or an example that starts its own servers, run by the test named). A block
that is new or changed and matches no entry fails the test, so it is looked at.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orbitmq.testing.process import ServerProcess, standalone_process

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# A command that starts a server (not `orbitmq broker status`, a client command).
SERVER_CMD = re.compile(r"^(?:\S+=\S+ )*(?:\.venv/bin/)?orbitmq (namesrv|broker|standalone|console)(?= -|$)")
PORT_FLAG = re.compile(r"(--(?:port|grpc-port|namesrv-port|broker-port|console-port)) \d+")
RMQ5_PY = ROOT / ".venv-rmq5" / "bin" / "python"


def run_flags() -> list[str]:
    """The flags `make run` gives `orbitmq standalone` (RUN_FLAGS in the Makefile)."""
    makefile = (ROOT / "Makefile").read_text()
    m = re.search(r"^RUN_FLAGS := (.*)$", makefile, re.M)
    assert m, "Makefile: RUN_FLAGS := ... is gone"
    assert re.search(r"^run:.*\n\t.*orbitmq standalone .*\$\(RUN_FLAGS\)", makefile, re.M), \
        "Makefile: make run no longer starts orbitmq standalone with $(RUN_FLAGS)"
    return shlex.split(m.group(1))


Check = Callable[[str], None]


@dataclasses.dataclass(frozen=True)
class Run:
    """Run the block (or only the commands at ``lines``, 0-based) and check its output."""
    check: Check | None = None
    lines: tuple[int, ...] | None = None
    needs: Path | None = None  # skipped (with a pytest skip reason) when this file is missing


@dataclasses.dataclass(frozen=True)
class Refused:
    """A transcript: ``$ command`` then the error it prints (up to the next ``$ ``): the command
    must fail and print it."""


@dataclasses.dataclass(frozen=True)
class Keep:
    """A server the page's next blocks use (next to make run's): started on free ports and kept
    until the end; the page's ``127.0.0.1:PORT`` of its name server means that one."""


@dataclasses.dataclass(frozen=True)
class NotHere:
    reason: str


def _has(*parts: str) -> Check:
    def check(out: str) -> None:
        for part in parts:
            assert part in out, f"{part!r} not in output:\n{out}"
    return check


def _lines(expected: list[str], *, sort: bool = True) -> Check:
    def check(out: str) -> None:
        got = out.splitlines()
        assert (sorted(got) if sort else got) == expected, out
    return check


def _quickstart(out: str) -> None:
    status, message = out.splitlines()
    assert status.startswith("SendStatus.OK")
    assert "created" in message and "order-18" in message and '{"order": 18}' in message, out


DIAGRAM = NotHere("a diagram or file layout, not a command")
OUTPUT = NotHere("an output sample of the command shown before it")
# Keyed by (file, how the block begins); the longest beginning that matches a block is its entry.
BLOCKS: dict[tuple[str, str], Run | Refused | Keep | NotHere] = {
    ("README.md", "make run     # installs what running needs, then starts a development broker on 127.0.0.1 (data"):
        NotHere("the server of this test is make run's (Makefile RUN_FLAGS)"),
    ("README.md", "pip install -e .                          # the servers, the CLI, the console and the SDK"):
        NotHere("installs packages"),
    ("README.md", ".venv/bin/orbitmq send --topic OrderTopic --tags created --keys order-17 '{\"order\": 17}'"):
        Run(_has('{"order": 17}', "order-17", "OrderTopic")),
    ("README.md", "from orbitmq import Message, Producer, PullConsumer"): Run(_quickstart),
    ("README.md", "import asyncio"): Run(_has("BatchedOrders")),
    ("README.md", "import pyarrow as pa"): Run(_has("40 requests;")),
    ("README.md", "from orbitmq import Message, Producer, PullConsumer\nfrom orbitmq.protocol.stored import body_of, iter_peek"):
        Run(_lines(["event 0", "event 2"])),
    ("README.md", "import threading"): Run(_has("paid ['order-19'] b'{\"order\": 19}'")),
    ("README.md", "from orbitmq import Message, MessageSelector, Producer, PullConsumer"):
        Run(_lines(["order 1 250 eu", "order 3 120 eu"])),
    ("README.md", ".venv/bin/orbitmq consume --topic SqlOrders --group big-eu --from first --count 2 --sql \"amount > 100 AND region = 'eu'\""):
        Run(_has("order 1", "order 3")),
    ("README.md", ".venv/bin/orbitmq dlq list --group coupon-service"): Run(),
    ("README.md", ".venv/bin/python examples/points/demo.py --db sqlite:///points-demo.db"):
        NotHere("starts its own broker: tests/reliable/test_reliable_examples.py"),
    ("README.md", "from orbitmq.spark import register"):
        NotHere("a fragment needing a SparkSession: docs/spark.md's script runs in tests/spark/test_spark_docs.py"),
    ("README.md", "from orbitmq import Admin"): Run(_lines(["True", "['broker-a']"])),
    ("README.md", "orbitmq namesrv    [--port 9876]"): NotHere("a synopsis"),
    ("README.md", ".venv/bin/orbitmq broker --print-config --flush-disk-type SYNC_FLUSH > broker.toml"): Run(),
    ("README.md", "$ orbitmq broker --namesrv 127.0.0.1:9876 --port 99999"): Refused(),
    ("README.md", "Error: cannot start: name server 127.0.0.1:9876 refused broker broker-a id 0 at 127.0.0.1:10921: broker-a id 0 is held by 127.0.0.1:10911, which is alive (use another broker name or id, or stop that broker)"):
        OUTPUT,
    ("README.md", ".venv/bin/orbitmq standalone --authentication-enabled true --authorization-enabled true \\"):
        NotHere("a server instead of make run's: tests/integration/test_credentials_docs.py"),
    ("README.md", "from orbitmq import Admin, Credentials, Message, Producer, PullConsumer"):
        NotHere("needs the server with authentication: tests/integration/test_credentials_docs.py"),
    ("README.md", "export ORBITMQ_ACCESS_KEY=admin ORBITMQ_SECRET_KEY=admin-secret"):
        NotHere("needs the server with authentication: tests/integration/test_credentials_docs.py"),
    ("README.md", ".venv/bin/python examples/ha/run.py   # name server + SYNC_MASTER + SLAVE; send, kill -9 the master, read from the slave"):
        NotHere("starts its own servers: tests/integration/test_examples.py"),
    ("README.md", ".venv/bin/orbitmq cluster list                                  # brokers, TPS, today's totals, disk"):
        Run(_has("broker-a")),
    ("README.md", ".venv/bin/orbitmq console --namesrv 127.0.0.1:9876 --port 8082   # 8080 is make run's own console"):
        Run(lines=(0,)),
    ("README.md", "import orbitmq\n\ndef test_an_order_event_is_published(orbitmq_namesrv, orbitmq_topic):"):
        NotHere("a pytest test: tests/integration/test_pytest_plugin.py runs it"),
    ("README.md", "import orbitmq\n\nwith orbitmq.Producer(\"reminders\", namesrv=\"127.0.0.1:9876\") as producer:"): Run(),
    ("README.md", "make install   #"): NotHere("make targets"),
    ("README.md", "ORBITMQ_PURE_PYTHON=1 .venv/bin/python bench/hotpath_bench.py --only send --batch 64"):
        Run(_has("orbitmq"), lines=(1,)),
    # docs/, in the order of their names
    ("docs/architecture.md", " producer / consumer socket"): DIAGRAM,
    ("docs/architecture.md", " socket read -> FastPath (broker/fast_path.py) -> C FastPath.take, under the put lock:"): DIAGRAM,
    ("docs/chaos.md", "make chaos                                   # 3 minutes of faults over every cluster, a fresh seed"):
        NotHere("starts its own servers for minutes: tests/chaos/test_chaos.py runs a seeded slice"),
    ("docs/reliability.md", "make chaos                                   # 3 minutes of faults over every cluster, a fresh seed"):
        NotHere("starts its own servers for minutes: tests/chaos/test_chaos.py runs a seeded slice"),
    ("docs/chaos.md", "from orbitmq.testing.chaos import SYNC_MASTER, Outcome, Read, Send, check"):
        Run(_lines(["['w1-1'] ['w1-4'] False",
                    "  verdict: VIOLATED: 1 acknowledged lost (at most 0 allowed; 1 lost-middle)"],
                   sort=False)),
    ("docs/chaos.md", "== master-slave: seed 15"): OUTPUT,
    ("docs/chaos.md", ".venv/bin/pytest -q tests/chaos/test_chaos.py"): NotHere("tests/chaos/test_chaos.py itself"),
    ("docs/cli.md", "orbitmq cluster list                      # brokers, version, in/out TPS, today's totals, disk"):
        Run(_has("deleteWhen", "OrderTopic")),
    ("docs/console.md", "make run                                     # name server, broker and console: http://127.0.0.1:8080"):
        Run(lines=(1,)),
    ("docs/console.md", "$ orbitmq console --namesrv 10.0.0.5:9876 --host 0.0.0.0"): Refused(),
    ("docs/console.md", "curl -H \"Authorization: Bearer $ORBITMQ_CONSOLE_TOKEN\" http://10.0.0.5:8080/api/brokers/series"):
        NotHere("a console on another machine"),
    ("docs/console.md", "export ORBITMQ_CONSOLE_ACCESS_KEY=console ORBITMQ_CONSOLE_SECRET_KEY='its password'"):
        NotHere("a console of a cluster with authentication on another machine"),
    ("docs/failover.md", "broker-a member 2: epoch 2, in sync [2,3], master of epoch 2"): OUTPUT,
    ("docs/failover.md", "from pathlib import Path"):
        NotHere("starts etcd and its own broker set: tests/faults (controller mode)"),
    ("docs/filtering.md", "from orbitmq import MessageSelector"): Run(),
    ("docs/filtering.md", "orbitmq standalone --enable-property-filter true"):
        NotHere("servers instead of make run's, which has the flag"),
    ("docs/filtering.md", "a > 5 AND (color = 'red' OR color IN ('blue', 'green'))"): NotHere("SQL92 expressions"),
    ("docs/operations.md", "orbitmq broker --namesrv 127.0.0.1:9876 --metrics-exporter-type PROM   # http://127.0.0.1:5557/metrics"):
        NotHere("servers instead of make run's, with metrics"),
    ("docs/operations.md", "import tempfile, urllib.request"):
        NotHere("starts its own cluster: tests/integration/test_ops_admin.py"),
    ("docs/performance.md", "make bench-peers            # once: redis-server, rabbitmq-server, nats-server and the C client"):
        NotHere("benchmarks, never part of make test"),
    ("docs/performance.md", "mqload -sys rocketmq|redis|nats|rabbit [-mode pub|sub|e2e|setup|purge|built] [-addr HOST:PORT]"):
        NotHere("the load tool's usage; tests/bench/test_mqload.py runs it"),
    ("docs/performance.md", "import asyncio"): NotHere("starts its own broker: tests/integration/test_fast_path_broker.py"),
    ("docs/reliable.md", ".venv/bin/python examples/points/demo.py --db sqlite:///points-demo.db"):
        NotHere("starts its own broker: tests/reliable/test_reliable_examples.py"),
    ("docs/reliable.md", "import sqlite3"): Run(_has("<OutboxStatus.SENT: 1>: 1")),
    ("docs/reliable.md", "orbitmq outbox relay --db sqlite:///shop.db --namesrv 127.0.0.1:9876"):
        NotHere("runs until stopped, on the database of the example before: tests/reliable/test_reliable_cli.py"),
    ("docs/reliable.md", "import time"): Run(_lines(["[('order-17', 'DONE')]"])),
    ("docs/reliable.md", "orbitmq outbox init     --db URL                  create the table"): NotHere("a synopsis"),
    ("docs/reliable.md", "CREATE TABLE orbitmq_outbox ("): NotHere("a table schema"),
    ("docs/replication.md", ".venv/bin/orbitmq namesrv --port 9876"):
        NotHere("its own servers, instead of make run's: tests/integration/test_replication_docs.py runs the page"),
    ("docs/replication.md", "from orbitmq import Message, Producer"): NotHere("tests/integration/test_replication_docs.py"),
    ("docs/replication.md", "$ .venv/bin/orbitmq cluster list --namesrv 127.0.0.1:9876"):
        NotHere("tests/integration/test_replication_docs.py"),
    ("docs/replication.md", "from orbitmq import PullConsumer"): NotHere("tests/integration/test_replication_docs.py"),
    ("docs/replication.md", "['order-0'] b'order 0'"): OUTPUT,
    ("docs/replication.md", ".venv/bin/orbitmq store info --store ./data/ha-slave"):
        NotHere("tests/integration/test_replication_docs.py"),
    ("docs/replication.md", "store: ./data/ha-slave"): OUTPUT,
    ("docs/replication.md", "ERROR orbitmq.store.corruption corrupt message in the commit"):
        OUTPUT,
    ("docs/replication.md", "ERROR orbitmq.broker.failover.service failover: master of epoch 3"):
        OUTPUT,
    ("docs/rocketmq5.md", "orbitmq standalone                       # remoting on 10911 (name server 9876), gRPC on 8081"):
        NotHere("servers instead of make run's"),
    ("docs/rocketmq5.md", "orbitmq topic create -t Orders"):
        Run(_has("sent order True", "sent reminder True",
                 "\nreceived ['order 17 created', 'pay order 17']\n"), needs=RMQ5_PY),
    ("docs/rocketmq5.md", "import sys"): NotHere("examples/rocketmq5_client.py, run by the block before"),
    ("docs/rocketmq5.md", "orbitmq topic create -t shop%Orders"):
        Run(_has("shop received [('Orders', 'shop', 'shop order 1')]",
                 "bank received [('Orders', 'bank', 'bank order 1')]"), needs=RMQ5_PY),
    ("docs/rocketmq5.md", "import sys\n\nfrom rocketmq import"):
        NotHere("examples/rocketmq5_namespaces.py, run by the block before"),
    ("docs/rocketmq5.md", "from orbitmq import Message, Producer, PullConsumer"):
        Run(_lines(["sent to Invoices", "pulled Invoices b'invoice 1'"], sort=False)),
    ("docs/rocketmq5.md", "orbitmq topic create -t Sessions --attributes +message.type=LITE"):
        Run(_has("\nreceived ['session-1:hello', 'session-1:bye']\n"), needs=RMQ5_PY),
    ("docs/rocketmq5.md", "import orbitmq\n\nwith orbitmq.Producer(\"sessions-app\""):
        NotHere("tests/integration/test_lite_topics.py runs it against its own broker"),
    ("docs/rocketmq5.md", "# A lite consumer of one session's lite topic"):
        NotHere("examples/rocketmq5_lite.py, run by the block before"),
    ("docs/rocketmq5.md", "orbitmq topic create -t FifoPayments --attributes +message.type=FIFO"): Run(),
    ("docs/rocketmq5.md", "producer.send(orbitmq.Message(\"Reminders\", b\"pay order 17\", properties={\"TIMER_DELAY_SEC\": \"30\"}))"):
        NotHere("a fragment: README's RocketMQ 5 block is the same, whole"),
    ("docs/rocketmq5.md", ".venv-rmq5/bin/python scripts/regen_grpc.py"): NotHere("regenerates the gRPC stubs"),
    ("docs/rocketmq5.md", "orbitmq topic create -t Tasks --read-queue-nums 10 --write-queue-nums 10 --attributes +message.type=PRIORITY"):
        Run(),
    ("docs/rocketmq5.md", ".venv-rmq5/bin/python examples/rocketmq5_priority.py 127.0.0.1:8081"):
        Run(_lines(["first: urgent task", "received 101"], sort=False), needs=RMQ5_PY),
    ("docs/rocketmq5.md", "import sys\n\nfrom rocketmq"):
        NotHere("examples/rocketmq5_priority.py, run by the block before"),
    ("docs/rocketmq5.md", "orbitmq send --topic Tasks --priority 9 'urgent task'"): Run(_has(":9 offset=")),
    ("docs/rocketmq5.md", "import orbitmq\n\nwith orbitmq.Producer(\"task-service\""):
        Run(_lines(["stored in queue 9"])),
    ("docs/rocketmq5.md", "import orbitmq\n\nwith orbitmq.Producer(\"CallbackService\""):
        Run(_has("recalled True")),
    ("docs/rocketmq5.md", "orbitmq broker config set -k recallMessageEnable -v true --broker broker-a"):
        Run(_has("recall_handle=", "RECALLED msg_id=")),
    ("docs/security.md", ".venv/bin/orbitmq standalone --store ./data/secure \\"): Keep(),
    ("docs/security.md", "authentication_enabled = true"): NotHere("a config file"),
    ("docs/security.md", ".venv/bin/orbitmq standalone --authentication-enabled true --authorization-enabled true \\\n  --authentication-strategy stateful"):
        Run(_has('authentication_strategy = "stateful"',
                 "stateful_authentication_cache_expired_second = 60")),
    ("docs/security.md", "export ORBITMQ_NAMESRV_ADDR=127.0.0.1:9886"): Run(_has("orders")),
    ("docs/security.md", "echo 'producer-secret' | .venv/bin/orbitmq user create --username order-service --password -"):
        Run(_has("User:order-service", "User:billing")),
    ("docs/security.md", "from orbitmq import Credentials, Message, Producer, PullConsumer"):
        Run(_has("SendStatus.OK")),
    ("docs/security.md", "# every name server, master and slave"): NotHere("a config file"),
    ("docs/security.md", "WARNING orbitmq.audit authentication_failed"): OUTPUT,
    ("docs/security.md", "Error: cannot start: the broker would listen on 0.0.0.0"): OUTPUT,
    ("docs/spark.md", "pip install -e '.[spark]'       # in a checkout; make test installs it (Java 17 too, when run as root)"):
        NotHere("installs packages"),
    ("docs/spark.md", "import os, sys, tempfile"): NotHere("tests/spark/test_spark_docs.py"),
    ("docs/spark.md", "spark.read.format(\"orbitmq\").schema(\"queue_offset long\").option(...).load().count()"):
        NotHere("fragments"),
    ("docs/spark.md", "RuntimeError: orbitmq is not installed in this Spark Python"): OUTPUT,
    ("docs/store.md", "DIR/commitlog/00000000000000000000          every message of every topic, appended; segments of"): DIAGRAM,
    ("docs/store.md", "$ orbitmq standalone --store ./data/broker-a &"):
        NotHere("a transcript of two servers on one store: tests/integration/test_store_lock_processes.py"),
    ("docs/store.md", "from orbitmq.errors import RemoteProtocolError"): NotHere("tests/unit/test_docs_examples.py"),
    ("docs/store.md", "orbitmq broker --page-cache-keep-mb 1024"):
        NotHere("a server setting"),
    ("docs/store.md", "from orbitmq.config import StoreConfig"): NotHere("tests/unit/test_docs_examples.py"),
    ("docs/store.md", "# store_type compact: small queues written and read without mapping their files"):
        NotHere("tests/unit/test_docs_examples.py"),
    ("docs/store.md", "orbitmq standalone --store-type compact"): NotHere("a server setting"),
    ("docs/store.md", ".venv/bin/orbitmq topic create -t Inventory"):
        Run(_has('"Inventory": {', '"topicName": "Inventory"')),
    ("docs/trace.md", "orbitmq broker --namesrv 127.0.0.1:9876 --trace-topic-enable true"):
        NotHere("a server instead of make run's (whose broker creates the trace topic at the first trace)"),
    ("docs/trace.md", "import time\n\nfrom orbitmq import Admin, ConsumeResult, Message, Producer, PushConsumer, TraceConfig"):
        Run(_lines(["sent by checkout status success", "stored on broker-a topic TracedOrders",
                    "consumed by ['shipping']"], sort=False)),
    ("docs/trace.md", "orbitmq message trace --msg-id ID [--topic T]"): NotHere("a synopsis"),
    ("docs/trace.md", "message 7F0000010F2A1B3C0000000000000001  topic TracedOrders"): OUTPUT,
    ("docs/trace.md", "orbitmq acl create --subject User:order-service --resources Topic:RMQ_SYS_TRACE_TOPIC --actions Pub"):
        NotHere("needs a server with authorization: tests/integration/test_message_trace_auth.py"),
    ("docs/testing.md", "import orbitmq"): NotHere("a pytest test: tests/integration/test_pytest_plugin.py"),
    ("docs/testing.md", "# pytest.ini (or [tool.pytest.ini_options] in pyproject.toml)"): NotHere("a config file"),
    ("docs/testing.md", "def test_sql_filters(orbitmq_cluster_factory):"): NotHere("a fragment of a pytest test"),
    ("docs/tls.md", ".venv/bin/python -m orbitmq.testing.certs certs"):
        NotHere("TLS set-up for servers instead of make run's: tests/integration/test_tls_cli.py"),
    ("docs/tls.md", "export ORBITMQ_TLS_SERVER_MODE=enforcing"): NotHere("servers with TLS: tests/integration/test_tls_cli.py"),
    ("docs/tls.md", "import orbitmq"): NotHere("a client of the TLS server: tests/integration/test_tls_cluster.py"),
    ("docs/tls.md", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=$PWD/certs/ca.pem python my_5x_app.py"): NotHere("your application"),
    ("docs/transactions.md", "from orbitmq import LocalTransactionState, Message, TransactionListener, TransactionProducer"):
        NotHere("a listener to fill in: the next block runs it whole"),
    ("docs/transactions.md", "import dataclasses, json, tempfile"):
        NotHere("starts its own cluster: tests/integration/test_examples.py"),
}


@dataclasses.dataclass
class Block:
    path: str
    line: int
    lang: str
    text: str


def blocks() -> Iterator[Block]:
    """Every fenced block of README.md, then docs/*.md by name."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in FENCE.finditer(text):
            yield Block(str(path.relative_to(ROOT)), text.count("\n", 0, m.start()) + 1,
                        m.group(1), m.group(2))


def spec_of(block: Block) -> Run | Refused | Keep | NotHere | None:
    """The entry whose text begins the block (the longest such, the most specific)."""
    found = [(len(start), spec) for (path, start), spec in BLOCKS.items()
             if path == block.path and block.text.startswith(start)]
    return max(found, key=lambda f: f[0])[1] if found else None


def commands(text: str) -> list[str]:
    """The shell commands of a block: continuations joined, trailing comments dropped."""
    out = []
    for cmd in text.replace("\\\n", " ").splitlines():
        cmd = re.sub(r"\s{2,}#.*$", "", cmd).strip()
        if cmd and not cmd.startswith("#"):
            out.append(cmd)
    return out


@dataclasses.dataclass
class DevServer:
    namesrv: str
    grpc: str
    tmp: Path
    # A page's other servers (Keep): the address it names -> the one it has here.
    others: dict[str, str] = dataclasses.field(default_factory=dict)

    def localize(self, cmd: str) -> str:
        """A README command as run here: our venv, our addresses, repository files by path."""
        cmd = cmd.replace("127.0.0.1:9876", self.namesrv).replace("127.0.0.1:8081", self.grpc)
        cmd = cmd.replace("--store ./data/broker-a", f"--store {self.tmp / 'store'}")  # make run's
        for named, real in self.others.items():
            cmd = cmd.replace(named, real)
        cmd = re.sub(r"(?<![\w/.])(examples|bench|scripts)/", f"{ROOT}/\\1/", cmd)
        cmd = re.sub(r"(?<![\w/])\.venv-rmq5/bin/python\b", str(RMQ5_PY), cmd)
        cmd = re.sub(r"(?<![\w/])\.venv/bin/python\b", sys.executable, cmd)
        return re.sub(r"(?<![\w/])\.venv/bin/", f"{BIN}/", cmd)

    def env(self) -> dict[str, str]:
        env = dict(os.environ, ORBITMQ_NAMESRV_ADDR=self.namesrv)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        return env

    def shell(self, script: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``script`` in bash, in the test's directory, with the name server in the environment."""
        return subprocess.run(["bash", "-ec", script], cwd=self.tmp, env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def start(self, cmd: str) -> ServerProcess:
        """A long-running server command, started on free ports and seen ready; a standalone's
        name server then stands for the one the command names (``--namesrv-port N``)."""
        named = re.search(r"--namesrv-port (\d+)", cmd)
        args = shlex.split(PORT_FLAG.sub(r"\1 0", self.localize(cmd)))
        args = args[args.index(next(a for a in args if a.endswith("orbitmq"))) + 1:]
        role = {"standalone": "broker"}.get(args[0], args[0])
        args = [a if not (a.startswith("./") or a.endswith(".toml")) else str(self.tmp / a)
                for a in args]
        server = ServerProcess(args)
        try:
            ready = server.wait_ready(role, timeout=60)
        except BaseException:
            server.stop()
            raise
        if named and "namesrv" in ready:
            self.others[f"127.0.0.1:{named.group(1)}"] = ready["namesrv"]
        return server

    def serve(self, cmd: str) -> None:
        """A long-running server command: started on free ports, seen ready, stopped."""
        with self.start(cmd):
            pass


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    flags = run_flags()
    if "--grpc-port" in flags:  # make run's fixed port, moved to a free one here
        i = flags.index("--grpc-port")
        del flags[i:i + 2]
    tmp = tmp_path_factory.mktemp("docs-run")
    with standalone_process(str(tmp / "store"), *flags) as server:
        ready = server.wait_ready("namesrv", "broker", "grpc", timeout=60)
        yield DevServer(ready["namesrv"], ready["grpc"], tmp)


def test_make_run_turns_property_filtering_on_and_keeps_readme_ports_apart() -> None:
    flags = run_flags()
    assert flags[flags.index("--enable-property-filter") + 1] == "true"
    grpc = flags[flags.index("--grpc-port") + 1]
    taken = {grpc, "8080", "9876", "10911", "10912"}  # make run's: gRPC, console, namesrv, broker, HA
    beside = [b.text for b in blocks() if isinstance(spec_of(b), Run)]  # run next to make run
    for cmd in commands("\n".join(beside)):
        if SERVER_CMD.match(cmd) and "--print-config" not in cmd:
            used = set(re.findall(r"--(?:port|grpc-port|console-port|namesrv-port|broker-port) (\d+)", cmd))
            assert not used & taken, f"{cmd!r} takes a port of make run's: {used & taken}"
            if " broker " in f" {cmd} ":
                assert "--grpc-port" in cmd, f"{cmd!r} would take make run's gRPC port"


def test_every_block_is_classified() -> None:
    missing = [f"{b.path}:{b.line}: {b.text.splitlines()[0]!r}" for b in blocks() if spec_of(b) is None]
    assert not missing, "blocks with no entry in BLOCKS (run them, or say why not):\n" + "\n".join(missing)


def test_readme_and_docs_examples_run_in_order(dev: DevServer) -> None:
    with contextlib.ExitStack() as kept:
        ran = _run_blocks(dev, kept)
    assert ran >= 15


def _run_blocks(dev: DevServer, kept: contextlib.ExitStack) -> int:
    ran = 0
    exports: dict[str, list[str]] = {}  # a page's `export` lines hold for its later blocks
    for block in blocks():
        spec = spec_of(block)
        where = f"{block.path}:{block.line}"
        if spec is None or isinstance(spec, NotHere):
            continue
        if isinstance(spec, Keep):
            (cmd,) = commands(block.text)
            kept.enter_context(dev.start(cmd))
            ran += 1
            continue
        if isinstance(spec, Refused):
            cmd, *rest = block.text.strip().splitlines()
            expected = rest[:next((i for i, r in enumerate(rest) if r.startswith("$ ")), len(rest))]
            out = dev.shell(dev.localize(cmd.removeprefix("$ ")))
            assert out.returncode != 0, f"{where}: {cmd} was not refused"
            for line in expected:
                line = re.sub(r"\s+", " ", line.replace("127.0.0.1:9876", dev.namesrv))
                assert line.strip() in re.sub(r"\s+", " ", out.stderr), f"{where}: {out.stderr}"
            ran += 1
            continue
        if spec.needs is not None and not spec.needs.exists():
            continue  # the rmq5 venv is made by make install; make test has it
        if block.lang == "python":
            code = dev.localize(block.text)
            out = subprocess.run([sys.executable, "-c", code], cwd=dev.tmp, env=dev.env(),
                                 capture_output=True, text=True, timeout=90)
            text = out.stdout
        else:
            cmds = commands(block.text)
            if spec.lines is not None:
                cmds = [cmds[i] for i in spec.lines]
            text, out = "", subprocess.CompletedProcess([], 0, "", "")
            session = exports.setdefault(block.path, [])
            for cmd in cmds:
                if SERVER_CMD.match(cmd) and "--print-config" not in cmd:
                    dev.serve(cmd)
                    continue
                if cmd.startswith("export "):
                    session.append(dev.localize(cmd))
                    continue
                out = dev.shell("\n".join([*session, dev.localize(cmd)]))
                assert out.returncode == 0, f"{where}: {cmd}\n{out.stdout}\n{out.stderr}"
                text += out.stdout
        assert out.returncode == 0, f"{where}:\n{out.stdout}\n{out.stderr}"
        if spec.check is not None:
            try:
                spec.check(text)
            except AssertionError as e:
                raise AssertionError(f"{where}: {e}") from None
        ran += 1
    return ran
