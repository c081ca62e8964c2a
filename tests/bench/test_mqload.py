"""bench/mqload, the load tool `make bench` drives: it builds from the repository with a C compiler
alone (the peers' client libraries are optional), and its OrbitMQ load does what the bench counts
on: every message of a publish answered, a signed publish admitted where authentication is on (and
an unsigned one refused), the messages read back by pulls, bad options refused with one line.
Where `make bench-peers` has installed them, Redis and NATS JetStream are loaded too (RabbitMQ,
slower to start, with --run-slow). Real processes on 127.0.0.1; no figure is asserted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "bench" / "mqload" / "build.sh"
RUN_TIMEOUT_S = 60
BUILD_TIMEOUT_S = 120

sys.path.insert(0, str(ROOT / "bench"))
try:
    import systems as sysmod  # bench/ is not a package
finally:
    sys.path.remove(str(ROOT / "bench"))

CC = os.environ.get("CC", "cc")
needs_cc = pytest.mark.skipif(shutil.which(CC) is None, reason=f"no C compiler ({CC}) on PATH")


def _build(out: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(["bash", str(BUILD), str(out)], capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _run(tool: Path, *args: str) -> tuple[int, dict[str, str], str]:
    """mqload's exit status, its RESULT fields and all it printed."""
    done = subprocess.run([str(tool), *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    text = done.stdout + done.stderr
    fields: dict[str, str] = {}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            fields.update(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
    return done.returncode, fields, text


@pytest.fixture(scope="module")
def mqload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    out = tmp_path_factory.mktemp("mqload") / "mqload"
    _build(out)
    return out


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[sysmod.System]:
    system = sysmod.orbitmq("ASYNC_FLUSH", str(tmp_path))
    try:
        yield system
    finally:
        system.stop()


@needs_cc
def test_builds_without_the_peers_client_libraries(tmp_path: Path) -> None:
    out = tmp_path / "mqload"
    said = _build(out, {"PKG_CONFIG_LIBDIR": str(tmp_path / "no-pkgconfig")})
    assert f"mqload built: {out} (rocketmq)" in said
    assert subprocess.run([str(out), "-sys", "rocketmq", "-mode", "built"]).returncode == 0
    assert subprocess.run([str(out), "-sys", "redis", "-mode", "built"]).returncode == 3
    rc, _, text = _run(out, "-sys", "redis", "-n", "1")
    assert rc == 2 and "built without hiredis (make bench-peers" in text, text


@pytest.mark.parametrize(("args", "says"), [
    (["-p", "0"], "-p 0: expected a whole number in 1..64"),
    (["-n", "ten"], "-n ten: expected a whole number in 1..1099511627776"),
    (["-ak", "user"], "-ak and -sk go together"),
    (["-mode", "drain"], "-mode drain: expected pub, sub, e2e, setup, purge or built"),
    (["-mode", "e2e"], "-mode e2e needs -rate MSGS_PER_S"),
    (["-rate", "100"], "-rate is for -mode e2e only"),
    (["-mode", "e2e", "-rate", "100", "-s", "16"], "-mode e2e: -s 16: the send time needs 24 bytes"),
    (["-dump", "/dev/null"], "-dump is for -mode e2e only"),
    (["-mode", "e2e", "-rate", "100", "-sys", "rabbit"],
     "-mode e2e: not for -sys rabbit (rocketmq, redis or nats)"),
    (["-sys", "kafka"], "-sys kafka: expected rocketmq, redis, nats or rabbit"),
    (["-addr", "localhost"], "-addr localhost: expected HOST:PORT"),
    (["-sys", "redis", "-batch", "8"], "-batch is for -sys rocketmq only"),
])
def test_refuses_bad_options_with_one_line(mqload: Path, args: list[str], says: str) -> None:
    rc, fields, text = _run(mqload, *args)
    assert rc == 2 and not fields, text
    assert text.strip() == f"mqload: {says}", text


def test_orbitmq_publish_batch_and_pull_back(mqload: Path, broker: sysmod.System) -> None:
    addr = ["-addr", broker.addrs["broker"]]
    rc, pub, text = _run(mqload, *addr, "-q", "load-t", "-n", "3000", "-p", "2", "-w", "100")
    assert rc == 0, text
    assert (pub["sys"], pub["mode"], pub["n"], pub["errors"]) == ("rocketmq", "pub", "3000", "0")
    rc, batch, text = _run(mqload, *addr, "-q", "load-t", "-n", "1280", "-batch", "64", "-w", "4")
    assert rc == 0 and (batch["n"], batch["batch"], batch["errors"]) == ("1280", "64", "0"), text
    rc, one, text = _run(mqload, *addr, "-q", "load-sync", "-n", "200", "-w", "1")
    assert rc == 0 and one["n"] == "200" and 0 < float(one["p50_us"]) <= float(one["p99_us"]), text
    # Every message the two publishes stored, read back by pulls over the topic's 8 queues.
    rc, sub, text = _run(mqload, *addr, "-q", "load-t", "-mode", "sub", "-n", "4280", "-b", "64",
                         "-maxsec", "20")
    assert rc == 0 and sub["errors"] == "0", text
    assert int(sub["n"]) >= 4280, text


def _check_e2e(fields: dict[str, str], sent: int) -> None:
    """Every message sent delivered once, with latencies (no figure compared with a goal)."""
    assert fields["mode"] == "e2e" and fields["errors"] == "0", fields
    assert (fields["n"], fields["e2e_n"], fields["e2e_lost"], fields["e2e_dup"]) == (
        str(sent), str(sent), "0", "0"), fields
    p50, p99, p999 = (float(fields[k]) for k in ("e2e_p50_us", "e2e_p99_us", "e2e_p999_us"))
    assert 0 < p50 <= p99 <= p999 <= float(fields["e2e_max_us"]), fields
    assert float(fields["e2e_msgs_s"]) > 0, fields  # deliveries a second, send to last delivery
    # Each delivery split at the system's store time: in (send to store) and out (store to
    # delivery), each part within the whole (give or take the half millisecond of a store time
    # kept in whole milliseconds).
    longest = float(fields["e2e_max_us"]) + 500
    for part in ("in", "out"):
        p50, p99 = (float(fields[f"e2e_{part}_{q}_us"]) for q in ("p50", "p99"))
        assert -500 <= p50 <= p99 <= longest, (part, fields)
        assert -500 <= float(fields[f"e2e_tail_{part}_us"]) <= longest, (part, fields)


def test_orbitmq_end_to_end(mqload: Path, broker: sysmod.System, tmp_path: Path) -> None:
    """A consumer waiting in held pulls gets every message of a producer at a fixed rate, each
    once; a second run on the same topic starts at the queues' ends, not at their first messages."""
    addr = ["-addr", broker.addrs["broker"], "-q", "load-e2e", "-mode", "e2e", "-maxsec", "20"]
    dump = tmp_path / "deliveries.txt"
    for _ in range(2):
        rc, fields, text = _run(mqload, *addr, "-rate", "500", "-n", "300", "-dump", str(dump))
        assert rc == 0, text
        _check_e2e(fields, 300)
        assert (fields["rate"], fields["queues"]) == ("500", "8"), fields
        # -dump: a line a delivery, "seq sent_ns stored_ns delivered_ns", the store time within
        # half a millisecond of the way from the send to the delivery
        lines = [[int(v) for v in line.split()] for line in dump.read_text().splitlines()]
        assert sorted(seq for seq, *_ in lines) == list(range(300)), lines[:3]
        for _seq, sent, stored, delivered in lines:
            assert sent - 500_000 <= stored <= delivered + 500_000 and sent < delivered, lines


def test_signed_publish_is_admitted_and_unsigned_refused(mqload: Path, tmp_path: Path) -> None:
    (system,) = sysmod.orbitmq_auth(True, str(tmp_path))
    try:
        addr = ["-addr", system.addrs["broker"], "-q", "bench-signed", "-n", "500", "-w", "50"]
        user, secret = sysmod.AUTH_USER
        rc, signed, text = _run(mqload, *addr, "-ak", user, "-sk", secret)
        assert rc == 0 and (signed["n"], signed["signed"], signed["errors"]) == ("500", "1", "0"), text
        rc, bare, text = _run(mqload, *addr)
        assert rc == 1 and bare["n"] == "0" and int(bare["errors"]) > 0, text
        rc, wrong, text = _run(mqload, *addr, "-ak", user, "-sk", "not-the-secret")
        assert rc == 1 and wrong["n"] == "0", text
    finally:
        system.stop()


def _peer_ready(peer: str) -> None:
    why = sysmod.peer_unavailable(peer)
    if why:
        pytest.skip(f"{peer}: {why}")


def _pub_then_sub(tool: Path, kind: str, *extra: str) -> None:
    rc, pub, text = _run(tool, "-sys", kind, *extra, "-n", "2000", "-p", "2", "-w", "200",
                         "-maxsec", "20")
    assert rc == 0 and (pub["n"], pub["errors"]) == ("2000", "0"), text
    rc, one, text = _run(tool, "-sys", kind, *extra, "-n", "50", "-w", "1", "-maxsec", "20")
    assert rc == 0 and one["n"] == "50" and float(one["p50_us"]) > 0, text
    rc, sub, text = _run(tool, "-sys", kind, *extra, "-mode", "sub", "-n", "2050", "-b", "100",
                         "-maxsec", "20")
    assert rc == 0 and int(sub["n"]) >= 2050 and sub["errors"] == "0", text
    if kind != "rabbit":
        rc, e2e, text = _run(tool, "-sys", kind, *extra, "-mode", "e2e", "-rate", "500", "-n",
                             "300", "-maxsec", "20")
        assert rc == 0, text
        _check_e2e(e2e, 300)


def test_redis_stream_and_nats_jetstream() -> None:
    _peer_ready("redis")
    _peer_ready("nats")
    tool = Path(sysmod.mqload())
    redis = sysmod.redis(["everysec"])[0]
    try:
        redis.prepare("pub p1", 0)  # a fresh stream
        subprocess.run(["redis-cli", "-h", "127.0.0.1", "xgroup", "create", "bench", "g", "0",
                        "mkstream"], capture_output=True, check=True, timeout=RUN_TIMEOUT_S)
        _pub_then_sub(tool, "redis")
    finally:
        redis.stop()
    nats = sysmod.nats()
    try:
        _pub_then_sub(tool, "nats")
    finally:
        nats.stop()


@pytest.mark.slow
def test_rabbitmq_quorum_and_classic() -> None:
    _peer_ready("rabbit")
    tool = Path(sysmod.mqload())
    systems = sysmod.rabbit(["bench-quorum", "bench-classic"])
    try:
        for queue in ("bench-quorum", "bench-classic"):
            subprocess.run([str(tool), "-sys", "rabbit", "-q", queue, "-mode", "purge"],
                           check=True, timeout=RUN_TIMEOUT_S)
            _pub_then_sub(tool, "rabbit", "-q", queue)
    finally:
        systems[0].stop()
