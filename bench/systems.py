"""The systems `make bench` loads with mqload (bench/mqload/, built here on first use): OrbitMQ
(ASYNC_FLUSH, SYNC_FLUSH, a bare-transport sink, authentication and authorization on and off, the
load signing each request on the first) and the installed peers (Redis streams, NATS JetStream,
RabbitMQ), started and stopped here.

Peers are started with bench/peers/peer.sh (127.0.0.1 only, data under
``$PEER_DATA``); OrbitMQ as ``orbitmq standalone`` on free ports. Every system knows how to
reset itself before a workload (a fresh topic, a purged stream or queue) and which extra mqload
flags address it. Used by bench/run_bench.py; not a test.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
MQLOAD_BUILD = ROOT / "bench" / "mqload" / "build.sh"
MQLOAD = os.environ.get("MQLOAD", str(ROOT / "bench" / "mqload" / "build" / "mqload"))
PEERS = ROOT / "bench" / "peers"
PEER_DATA = os.environ.get("PEER_DATA", "/tmp/orbitmq-bench-peers")
BUILD_TIMEOUT_S = 120
READY = re.compile(r"orbitmq (\w+) ready on (\S+)")
START_TIMEOUT_S = 60
# Where what each OrbitMQ server process printed (its log: a SYSTEM_BUSY, a stall) is kept.
SERVER_LOGS = ROOT / "bench" / "results" / "logs"  # $ORBITMQ_BENCH_LOGS names another


def mqload() -> str:
    """The load tool's path, built by bench/mqload/build.sh when it is not there yet or older than
    its sources (``$MQLOAD`` names a binary to use as it is). Raises SystemExit when it cannot be
    built: every bench needs it."""
    if "MQLOAD" in os.environ:
        if not os.access(MQLOAD, os.X_OK):
            raise SystemExit(f"MQLOAD={MQLOAD}: not an executable")
        return MQLOAD
    sources = [*MQLOAD_BUILD.parent.glob("*.[ch]"), MQLOAD_BUILD]
    built = Path(MQLOAD)
    if built.exists() and built.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return MQLOAD
    done = subprocess.run(["bash", str(MQLOAD_BUILD), MQLOAD], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"cannot build bench/mqload: {(done.stdout + done.stderr).strip()[-600:]}")
    return MQLOAD


def mqload_speaks(kind: str) -> bool:
    """Whether the built mqload has ``kind``'s client library in it (see build.sh)."""
    return subprocess.run([mqload(), "-sys", kind, "-mode", "built"],
                          capture_output=True).returncode == 0


@dataclasses.dataclass
class System:
    """One thing under load. ``kind`` is mqload's ``-sys``; ``pid`` the server process whose CPU
    and memory are reported; ``prepare(workload, run_id)`` resets it and returns extra flags."""

    name: str
    kind: str
    pid: int | None
    prepare: Callable[[str, int], list[str]]
    stop: Callable[[], None]
    acks: str  # what an acknowledgement means, for the table's legend
    addrs: dict[str, str] = dataclasses.field(default_factory=dict)  # OrbitMQ: namesrv, broker
    workloads: frozenset[str] | None = None  # those it runs (None: all)


# ----------------------------------------------------------------------------------- OrbitMQ
def _start_python(args: list[str], *ready: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """Starts ``args`` and reads its output until it has logged ``orbitmq NAME ready on ADDR`` for
    every name in ``ready``; returns the process and the addresses by name. Everything it prints
    goes to ``SERVER_LOGS/<ready[0]>-<time>-<pid>.log``."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    logs = Path(os.environ.get("ORBITMQ_BENCH_LOGS", SERVER_LOGS))
    logs.mkdir(parents=True, exist_ok=True)
    name = f"{ready[0]}-{time.strftime('%Y%m%d-%H%M%S')}-{proc.pid}.log"
    log = open(logs / name, "w")  # noqa: SIM115 (_drain closes it, or the failure below)
    found: dict[str, str] = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        log.write(line)
        m = READY.search(line)
        if m:
            found[m.group(1)] = m.group(2)
            if all(name in found for name in ready):
                # Keep draining its output so that the process never blocks on a full pipe.
                drain = threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True)
                drain.start()
                _DRAINS[proc.pid] = drain
                return proc, found
    log.close()
    proc.kill()
    raise SystemExit(f"{' '.join(args)} did not become ready")


_DRAINS: dict[int, threading.Thread] = {}  # by pid: the threads reading a server's output
DRAIN_JOIN_MAX_S = 5.0


def _drain(out: IO[str], log: IO[str]) -> None:
    """Copies a server's output to its log to the end, then closes both (no pipe left for the
    collector)."""
    with out, log:
        for line in out:
            log.write(line)


def _stopper(proc: subprocess.Popen[str], cleanup: Callable[[], None] | None = None
             ) -> Callable[[], None]:
    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        drain = _DRAINS.pop(proc.pid, None)
        if drain is not None:
            drain.join(DRAIN_JOIN_MAX_S)
        if cleanup is not None:
            cleanup()
    return stop


def orbitmq(flush: str, store_base: str, metrics: bool = False,
            python: str = sys.executable) -> System:
    """``orbitmq standalone`` with a fresh store; each pub workload writes a topic of its own.
    ``python``: the interpreter whose OrbitMQ runs (another tree's venv, for bench/tree_ab.py).

    ``metrics``: the Prometheus endpoint on (``--metrics-exporter-type PROM``) and scraped once
    every SCRAPE_INTERVAL_S while the system runs, so that the run shows what counting and
    scraping cost the data path next to the same broker without them."""
    store = tempfile.mkdtemp(prefix=f"orbitmq-bench-{flush.lower()}-", dir=store_base)
    args = [python, "-m", "orbitmq.cli.main", "standalone", "--namesrv-port", "0",
            "--broker-port", "0", "--console-port", "0", "--grpc-port", "0", "--store", store,
            "--flush-disk-type", flush]
    if metrics:
        args += ["--metrics-exporter-type", "PROM", "--metrics-prom-exporter-port", "0"]
    proc, addrs = _start_python(args, "broker", *(["metrics"] if metrics else []))
    addr = addrs["broker"]

    def prepare(workload: str, run_id: int) -> list[str]:
        # A topic per workload (the store is new): sub reads the first messages pub p1 wrote.
        topic = "bench-" + ("pub p1" if workload == "sub" else workload).replace(" ", "-")
        topic = topic.replace("%", "pct")  # e2e 50%: a topic of letters, digits, - and _
        return ["-addr", addr, "-q", topic]

    short = "async" if flush == "ASYNC_FLUSH" else "sync"
    acks = ("after the write to the page cache (fsync every 500 ms)" if short == "async"
            else "after fdatasync (group commit)")
    stop = _stopper(proc, lambda: shutil.rmtree(store, ignore_errors=True))
    if not metrics:
        return System(f"orbitmq-{short}", "rocketmq", proc.pid, prepare, stop, acks, addrs)
    halt_scraper = _scraper(f"http://{addrs['metrics']}/metrics")

    def stop_scraped() -> None:
        halt_scraper()  # before the server goes, so that no scrape fails on its way out
        stop()
    return System(f"orbitmq-{short}-prom", "rocketmq", proc.pid, prepare, stop_scraped,
                  acks + f"; /metrics scraped every {SCRAPE_INTERVAL_S:g} s", addrs)


SCRAPE_INTERVAL_S = 1.0  # 15x Prometheus's default scrape interval: an upper bound of its cost

# The access control rows: a Super init user, and a Normal user whose one rule lets it
# publish to the bench topics, which the load signs as (authorization is checked, not bypassed).
AUTH_ROOT = ("root", "bench-root-secret-1")
AUTH_USER = ("bench", "bench-user-secret-1")
SIGNED_WORKLOADS = frozenset({"pub p1", "pub p4", "batch64", "sync p1"})


def orbitmq_auth(on: bool, store_base: str, stateful: bool = False) -> list[System]:
    """``orbitmq standalone`` (ASYNC_FLUSH) with authentication and authorization on, loaded by
    mqload signing as :data:`AUTH_USER` (``-ak``/``-sk``), under the stateless strategy or
    (``stateful``, ``orbitmq-auth-on-stateful``) the stateful one; or the same with both off, loaded
    unsigned, and (a second System on the same process, ``orbitmq-auth-off-signing``)
    signed all the same: the broker ignores the signature, so that row shows what signing costs
    the load tool, and on / off-signing what checking costs the broker. Each workload writes a
    topic of its own, auto-created by its first send, as the other OrbitMQ rows' are."""
    name = "orbitmq-auth-on-stateful" if stateful else "orbitmq-auth-on" if on else "orbitmq-auth-off"
    store = tempfile.mkdtemp(prefix=f"{name}-", dir=store_base)
    args = [sys.executable, "-m", "orbitmq.cli.main", "standalone", "--namesrv-port", "0",
            "--broker-port", "0", "--console-port", "0", "--grpc-port", "0", "--store", store,
            "--flush-disk-type", "ASYNC_FLUSH"]
    if on:
        args += ["--authentication-enabled", "true", "--authorization-enabled", "true",
                 "--init-authentication-user",
                 f'{{"username": "{AUTH_ROOT[0]}", "password": "{AUTH_ROOT[1]}"}}']
        if stateful:
            args += ["--authentication-strategy", "stateful"]
    proc, addrs = _start_python(args, "broker")
    stop = _stopper(proc, lambda: shutil.rmtree(store, ignore_errors=True))
    signing: list[str] = []
    if on:
        try:
            _create_bench_user(addrs["namesrv"])
        except Exception:
            stop()
            raise
        signing = ["-ak", AUTH_USER[0], "-sk", AUTH_USER[1]]
    addr = addrs["broker"]

    def prepare(workload: str, run_id: int) -> list[str]:
        return ["-addr", addr, "-q", "bench-auth-" + workload.replace(" ", "-"), *signing]

    if on:
        strategy = ("; the stateful strategy: a connection's signature checked once" if stateful
                    else "")
        return [System(name, "rocketmq", proc.pid, prepare, stop,
                       "after the write to the page cache; every request signed by a Normal user "
                       "whose rule allows Pub on Topic:bench-*" + strategy, addrs,
                       SIGNED_WORKLOADS)]

    def prepare_signed(workload: str, run_id: int) -> list[str]:
        return ["-addr", addr, "-q", "bench-auth-signing-" + workload.replace(" ", "-"),
                "-ak", AUTH_USER[0], "-sk", AUTH_USER[1]]

    return [System("orbitmq-auth-off", "rocketmq", proc.pid, prepare, stop,
                   "after the write to the page cache; authentication off, the same load unsigned",
                   addrs, SIGNED_WORKLOADS),
            System("orbitmq-auth-off-signing", "rocketmq", proc.pid, prepare_signed,
                   lambda: None, "orbitmq-auth-off's broker, the load signed all the same (the "
                   "broker ignores it): what signing costs the load tool", addrs,
                   SIGNED_WORKLOADS)]


def _create_bench_user(namesrv: str) -> None:
    from orbitmq import Admin, Credentials

    with Admin(namesrv, credentials=Credentials(*AUTH_ROOT)) as admin:
        admin.create_user(*AUTH_USER)
        admin.create_acl(f"User:{AUTH_USER[0]}", ["Topic:bench-*"], "Pub")


def _scraper(url: str) -> Callable[[], None]:
    """Scrapes ``url`` every SCRAPE_INTERVAL_S in a thread; returns what stops it."""
    stop = threading.Event()
    failures: list[str] = []

    def run() -> None:
        while not stop.wait(SCRAPE_INTERVAL_S):
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    resp.read()
            except OSError as e:
                failures.append(str(e))

    thread = threading.Thread(target=run, name="metrics-scraper", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(15)
        if failures:
            print(f"  metrics scrapes failed {len(failures)} times: {failures[-1]}", file=sys.stderr)
    return halt


def sink() -> System:
    """bench/ack_sink.py: OrbitMQ's transport answering sends at once (the Python ceiling)."""
    proc, addrs = _start_python([sys.executable, str(ROOT / "bench" / "ack_sink.py"), "0"], "sink")
    addr = addrs["sink"]
    return System("orbitmq-sink", "rocketmq", proc.pid,
                  lambda workload, run_id: ["-addr", addr, "-q", "sink"], _stopper(proc),
                  "at once, nothing stored (transport + codec ceiling)")


# ----------------------------------------------------------------------------------- peers
def _peer_sh(op: str, name: str) -> str:
    """peer.sh OP NAME; its output goes to a file, not a pipe: a server it starts in the
    background inherits the descriptors and would hold a pipe open for its whole life."""
    env = {**os.environ, "PEER_DATA": PEER_DATA, "MQLOAD": mqload()}
    os.makedirs(PEER_DATA, exist_ok=True)
    log_path = Path(PEER_DATA, f"peer-{op}-{name}.log")
    with open(log_path, "w") as log:
        rc = subprocess.run(["bash", str(PEERS / "peer.sh"), op, name], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, env=env, timeout=180).returncode
    text = log_path.read_text()
    if rc != 0:
        raise RuntimeError(f"peer.sh {op} {name}: {text[-400:]}")
    return text


def _pid_of(name: str) -> int | None:
    try:
        return int(Path(PEER_DATA, f"{name}.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _clear_data(name: str) -> None:
    """Remove a stopped peer's data directory (a running one keeps it: peer.sh reuses it)."""
    pid = _pid_of(name)
    if pid is not None:
        try:
            os.kill(pid, 0)
            return
        except OSError:
            pass
    shutil.rmtree(Path(PEER_DATA, name), ignore_errors=True)


def _run(*cmd: str) -> None:
    subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=True)


def redis(modes: list[str]) -> list[System]:
    """One redis-server, one System per appendfsync mode (set before each run)."""
    _clear_data("redis")  # the last run's AOF: disposable
    _peer_sh("start", "redis")
    pid = _pid_of("redis")
    cli = ["redis-cli", "-h", "127.0.0.1"]
    stopped = {"done": False}

    def stop() -> None:
        if not stopped["done"]:
            stopped["done"] = True
            _peer_sh("stop", "redis")

    def make(mode: str) -> System:
        def prepare(workload: str, run_id: int) -> list[str]:
            _run(*cli, "config", "set", "appendfsync", mode)
            if workload == "sub":
                subprocess.run([*cli, "xgroup", "destroy", "bench", "g"], capture_output=True)
                _run(*cli, "xgroup", "create", "bench", "g", "0")
                return ["-b", "500"]
            _run(*cli, "del", "bench")
            return []
        acks = ("after fsync (appendfsync always)" if mode == "always"
                else "before fsync (appendfsync everysec)")
        return System(f"redis-{mode}", "redis", pid, prepare, stop, acks)

    return [make(m) for m in modes]


def nats() -> System:
    _clear_data("nats")  # the last run's stream files
    _peer_sh("start", "nats")

    def prepare(workload: str, run_id: int) -> list[str]:
        if workload == "sub":
            return ["-b", "500"]
        _run(mqload(), "-sys", "nats", "-mode", "purge")
        return []

    def stop() -> None:
        _peer_sh("stop", "nats")

    return System("nats-js", "nats", _pid_of("nats"), prepare, stop,
                  "after the write to the page cache (fsync every 2 min)")


def rabbit(queues: list[str]) -> list[System]:
    _peer_sh("start", "rabbit")
    pid = _pid_of("rabbit")
    stopped = {"done": False}

    def stop() -> None:
        if not stopped["done"]:
            stopped["done"] = True
            _peer_sh("stop", "rabbit")

    def make(queue: str) -> System:
        def prepare(workload: str, run_id: int) -> list[str]:
            if workload == "sub":
                return ["-q", queue, "-b", "500"]
            _run(mqload(), "-sys", "rabbit", "-q", queue, "-mode", "purge")
            return ["-q", queue]
        return System(f"rabbit-{queue.split('-')[1]}", "rabbit", pid, prepare, stop,
                      "publisher confirm after its batched fsync")

    return [make(q) for q in queues]


def installed_peers() -> dict[str, bool]:
    """Which peer servers are on this machine (PATH lookup only)."""
    return {"redis": shutil.which("redis-server") is not None,
            "nats": shutil.which("nats-server") is not None,
            "rabbit": shutil.which("rabbitmq-server") is not None}


def peer_unavailable(peer: str) -> str:
    """Why ``peer`` (redis, nats, rabbit) cannot run here, or "" when it can: its server on PATH
    and mqload built with its client library, both from `make bench-peers`."""
    if not installed_peers()[peer]:
        return "server not installed (make bench-peers)"
    if not mqload_speaks(peer):
        return "mqload built without its client library (make bench-peers)"
    return ""
