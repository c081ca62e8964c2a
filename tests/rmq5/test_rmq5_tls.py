"""The official Python 5.x client with ``tls_enable=True`` against a gRPC port in ``enforcing``
mode (docs/tls.md).

The client builds its channel with ``grpc.ssl_channel_credentials()``: the system's roots, no
client certificate. gRPC reads its default roots from ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, which
the driver process is given as the test CA, so the client trusts the test CA and nothing is
patched in the client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rmq5_support import Cluster, Rmq5Driver, unique, wait_until

import orbitmq
from orbitmq.testing.certs import TestCerts, make_test_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_cluster(rmq5_ready: None, certs: TestCerts,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    found = Cluster(tmp_path_factory.mktemp("rmq5-tls-store"),
                    "--tls-server-mode", "enforcing",
                    "--tls-server-cert-path", str(certs.server_cert),
                    "--tls-server-key-path", str(certs.server_key),
                    "--tls-enable", "true", "--tls-client-trust-cert-path", str(certs.ca))
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture
def tls_driver(rmq5_ready: None, certs: TestCerts, tmp_path: Path) -> Iterator[Rmq5Driver]:
    d = Rmq5Driver(tmp_path / "client-home", env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(certs.ca)})
    try:
        yield d
    finally:
        d.close()


def test_the_5x_client_sends_and_receives_over_tls(tls_cluster: Cluster, tls_driver: Rmq5Driver,
                                                    certs: TestCerts) -> None:
    tls = orbitmq.ClientTls(str(certs.ca))
    topic, group = unique("Tls"), unique("TlsG")
    with orbitmq.Admin(tls_cluster.namesrv, tls=tls) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        admin.update_group(group)
    tls_driver.call("producer", id="p", endpoint=tls_cluster.endpoint, topics=[topic], tls=True)
    sent = {tls_driver.call("send", id="p", topic=topic, body=f"m{i}")["message_id"]
            for i in range(5)}
    tls_driver.call("simple", id="c", endpoint=tls_cluster.endpoint, group=group, topic=topic,
                    await_s=1, tls=True)
    got: dict[str, str] = {}

    def received() -> bool:
        for m in tls_driver.call("receive", id="c", max=32, invisible_s=10)["messages"]:
            got[m["id"]] = m["body"]
            tls_driver.call("ack", id="c", handle=m["handle"])
        return set(got) >= sent

    wait_until("the 5 messages received over TLS", received)
    assert sorted(got.values()) == [f"m{i}" for i in range(5)]


def test_a_5x_client_without_tls_is_not_served(tls_cluster: Cluster, driver: Rmq5Driver) -> None:
    answer = driver.try_call("producer", id="plain", endpoint=tls_cluster.endpoint,
                             topics=[unique("Plain")], timeout_s=3)
    if answer.get("ok"):  # the client may start without a route; its first send must fail
        answer = driver.try_call("send", id="plain", topic=unique("Plain"), body="x")
    assert not answer.get("ok"), answer


def test_a_permissive_grpc_port_serves_the_5x_client_with_and_without_tls(
        rmq5_ready: None, certs: TestCerts, tls_driver: Rmq5Driver,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    found = Cluster(tmp_path_factory.mktemp("rmq5-permissive-store"),
                    "--tls-server-mode", "permissive",
                    "--tls-server-cert-path", str(certs.server_cert),
                    "--tls-server-key-path", str(certs.server_key))
    try:
        topic = found.topic(unique("Permissive"))  # the SDK in plaintext
        for tls in (True, False):
            tls_driver.call("producer", id=f"p{tls}", endpoint=found.endpoint, topics=[topic],
                            tls=tls)
            tls_driver.call("send", id=f"p{tls}", topic=topic, body=f"tls={tls}")
        tls_driver.call("simple", id="c", endpoint=found.endpoint, group=unique("PermG"),
                        topic=topic, await_s=1, tls=True)
        got: set[str] = set()

        def received() -> bool:
            for m in tls_driver.call("receive", id="c", max=32, invisible_s=10)["messages"]:
                got.add(m["body"])
                tls_driver.call("ack", id="c", handle=m["handle"])
            return got >= {"tls=True", "tls=False"}

        wait_until("both messages received", received)
    finally:
        found.stop()
