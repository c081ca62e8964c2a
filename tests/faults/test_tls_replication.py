"""A replicated set entirely in ``enforcing`` mode with client certificates required (issue 35's
acceptance): a name server, broker-a (a SYNC_MASTER and its SLAVE), broker-b, and the console,
real processes whose every port, the HA port included, speaks TLS only, and whose own
connections (registration, a slave's to its master's two ports, the console's to the cluster)
show the test client certificate. The settings reach every process and the SDK through the
environment (ORBITMQ_TLS_*: the servers' config fields and the SDK's default are the same
names).

The console answers over TLS and shows both broker sets; a plaintext frame to any server port
gets no answer; broker-a's master is killed with SIGKILL while two producers send, and every
message answered SEND_OK is read back intact."""

from __future__ import annotations

import json
import random
import socket
import ssl
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from test_replication_failover import (
    KILLED,
    PRODUCERS,
    Sent,
    check_acked,
    produce,
    read_all_from,
    start_broker_sets,
    until,
    wait_route_lists_the_slave_alone,
)

from orbitmq.protocol.command import RemotingCommand, encode
from orbitmq.testing.certs import TestCerts, make_test_certs
from orbitmq.testing.process import ServerProcess

COUNT = 2_000
SEED = 35
CLOSE_WAIT_S = 1.0


def tls_environment(certs: TestCerts) -> dict[str, str]:
    return {
        "ORBITMQ_TLS_SERVER_MODE": "enforcing",
        "ORBITMQ_TLS_SERVER_CERT_PATH": str(certs.server_cert),
        "ORBITMQ_TLS_SERVER_KEY_PATH": str(certs.server_key),
        "ORBITMQ_TLS_SERVER_TRUST_CERT_PATH": str(certs.ca),
        "ORBITMQ_TLS_SERVER_NEED_CLIENT_AUTH": "require",
        "ORBITMQ_TLS_ENABLE": "true",
        "ORBITMQ_TLS_CLIENT_TRUST_CERT_PATH": str(certs.ca),
        "ORBITMQ_TLS_CLIENT_CERT_PATH": str(certs.client_cert),
        "ORBITMQ_TLS_CLIENT_KEY_PATH": str(certs.client_key),
    }


def closed_unanswered(addr: str) -> bool:
    """A plaintext request frame to ``addr`` is met by a close, not an answer, within 1 s."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=CLOSE_WAIT_S) as s:
        s.sendall(encode(RemotingCommand.request(105)))  # GET_ROUTEINFO_BY_TOPIC
        try:
            return s.recv(4096) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def console_get(addr: str, path: str, certs: TestCerts) -> bytes:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    with urllib.request.urlopen(f"https://{addr}{path}", context=ctx, timeout=10) as answer:
        assert answer.status == 200
        return bytes(answer.read())


def test_an_enforcing_cluster_with_client_certificates_loses_no_acknowledged_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    certs = make_test_certs(tmp_path / "certs")
    for name, value in tls_environment(certs).items():
        monkeypatch.setenv(name, value)
    topic = f"TlsFailover{SEED}"
    sets = start_broker_sets(tmp_path / "sets", topic)  # registration, HA and the SDK over TLS
    console = ServerProcess(["console", "--namesrv", sets.namesrv, "--console-listen-port", "0"])
    try:
        addr = console.wait_ready("console", timeout=60)["console"]
        page = console_get(addr, "/", certs)
        assert b"broker-a" in page and b"broker-b" in page
        series = json.loads(console_get(addr, "/api/brokers/series", certs))
        assert len(series) == 3, series  # both masters and the slave, reached over TLS
        for server in (sets.namesrv, sets.a.addresses[0], sets.a.ha_addresses[0],
                       sets.a.addresses[1], sets.b.addresses[0]):
            assert closed_unanswered(server), server

        sent, stop = Sent(), threading.Event()
        share = COUNT // PRODUCERS
        threads = [threading.Thread(target=produce, args=(
            sets.namesrv, topic, SEED, range(i * share, (i + 1) * share), sent, stop))
            for i in range(PRODUCERS)]
        for t in threads:
            t.start()
        kill_after = random.Random(SEED).randrange(50, COUNT // 4)
        until(lambda: sent.on(KILLED) >= kill_after or not any(t.is_alive() for t in threads),
              "broker-a takes sends", 300)
        assert any(t.is_alive() for t in threads), "the run ended before the kill"
        sets.a.kill(0)
        for t in threads:
            t.join(300)
        assert not any(t.is_alive() for t in threads), "producers did not stop"
        wait_route_lists_the_slave_alone(sets.namesrv, topic)
        stored = read_all_from(sets.namesrv, topic, f"tls-reader{SEED}")
        check_acked(stored, sent.acked, topic, SEED, "SDK over TLS")
        assert sent.on(KILLED) >= kill_after and sent.on("broker-b") > 0
        print(f"TLS-KILL-RUN acked_a={sent.on(KILLED)} acked_b={sent.on('broker-b')} "
              f"read_back={len(stored)} at={time.strftime('%H:%M:%S')}")
    finally:
        console.stop()
        sets.close()
