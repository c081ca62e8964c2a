"""A name server and a broker in ``enforcing`` mode with client certificates required: the SDK
with ``tls=`` sends, consumes and administers; the broker's own registration goes over TLS; a
client without TLS or without a certificate gets nothing (docs/tls.md)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orbitmq import Admin, ClientTls, ConsumeResult, Message, Producer, PushConsumer
from orbitmq.assembly import grpc_endpoint
from orbitmq.config import NamesrvConfig
from orbitmq.errors import OrbitMQError
from orbitmq.security.tls import TlsClientAuth, TlsServerMode
from orbitmq.testing.certs import TestCerts, make_test_certs
from orbitmq.testing.embedded import EmbeddedCluster

WAIT_S = 20.0


def server_fields(certs: TestCerts) -> dict[str, object]:
    return {"tls_server_mode": TlsServerMode.ENFORCING,
            "tls_server_cert_path": str(certs.server_cert),
            "tls_server_key_path": str(certs.server_key),
            "tls_server_trust_cert_path": str(certs.ca),
            "tls_server_need_client_auth": TlsClientAuth.REQUIRE}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def cluster(certs: TestCerts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    ns = NamesrvConfig(listen_port=0, **server_fields(certs))  # type: ignore[arg-type]
    with EmbeddedCluster(tmp_path_factory.mktemp("tls-cluster"), namesrv_config=ns,
                         **server_fields(certs), tls_enable=True,
                         tls_client_trust_cert_path=str(certs.ca),
                         tls_client_cert_path=str(certs.client_cert),
                         tls_client_key_path=str(certs.client_key)) as found:
        yield found


def tls(certs: TestCerts) -> ClientTls:
    return ClientTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))


def wait_until(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S} s"
        time.sleep(0.02)


def test_the_sdk_with_tls_sends_consumes_and_administers(cluster: EmbeddedCluster,
                                                         certs: TestCerts) -> None:
    topic, group = f"Tls_{uuid.uuid4().hex[:8]}", f"tls_{uuid.uuid4().hex[:8]}"
    wait_until(lambda: cluster.namesrv_server.routes.cluster_info()[0], "registration over TLS")
    with Admin(cluster.namesrv, tls=tls(certs)) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    got: list[bytes] = []
    done = threading.Event()

    def listener(msgs: list[object], _ctx: object) -> ConsumeResult:
        got.extend(m.body for m in msgs)  # type: ignore[attr-defined]
        if len(got) >= 10:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(group, cluster.namesrv, tls=tls(certs), consume_from="first")
    consumer.subscribe(topic, "*", listener)
    with consumer, Producer("tls_producer", cluster.namesrv, tls=tls(certs)) as producer:
        for i in range(10):
            producer.send(Message(topic, b"m%d" % i))
        assert done.wait(WAIT_S), f"consumed {len(got)} of 10"
    assert sorted(got) == sorted(b"m%d" % i for i in range(10))


@pytest.mark.parametrize("how", ["plaintext", "no client certificate", "untrusted certificate"])
def test_a_client_without_tls_or_a_trusted_certificate_gets_nothing(
        cluster: EmbeddedCluster, certs: TestCerts, how: str, tmp_path: Path) -> None:
    setting: ClientTls | bool = {
        "plaintext": False,
        "no client certificate": ClientTls(str(certs.ca)),
        "untrusted certificate": ClientTls(str(certs.ca), str(certs.stranger_cert),
                                           str(certs.stranger_key)),
    }[how]
    with Admin(cluster.namesrv, tls=setting, timeout=2.0) as admin, \
            pytest.raises((OrbitMQError, TimeoutError)):
        admin.cluster_info()


def test_the_grpc_port_serves_tls_and_requires_a_client_certificate(
        cluster: EmbeddedCluster, certs: TestCerts) -> None:
    import grpc

    from orbitmq.grpc._generated import definition_pb2 as pb
    from orbitmq.grpc._generated import service_pb2 as spb
    from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc

    where = f"127.0.0.1:{grpc_endpoint(cluster.brokers[0]).port}"
    meta = (("x-mq-client-id", "tls-test"),)
    request = spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"))
    ca = certs.ca.read_bytes()
    good = grpc.ssl_channel_credentials(ca, certs.client_key.read_bytes(),
                                        certs.client_cert.read_bytes())
    with grpc.secure_channel(where, good) as channel:
        answer = spb_grpc.MessagingServiceStub(channel).QueryRoute(request, metadata=meta, timeout=10)
        assert answer.status.code == pb.TOPIC_NOT_FOUND
    for refused in (grpc.ssl_channel_credentials(ca), None):  # no certificate; plaintext
        channel = (grpc.secure_channel(where, refused) if refused is not None
                   else grpc.insecure_channel(where))
        with channel, pytest.raises(grpc.RpcError) as failed:
            spb_grpc.MessagingServiceStub(channel).QueryRoute(request, metadata=meta, timeout=3)
        assert failed.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]


def test_a_permissive_grpc_port_serves_tls_and_plaintext(certs: TestCerts, tmp_path: Path) -> None:
    """grpcio serves one kind per port: in permissive mode the port is a relay in front of it
    (grpc/front.py), which hands access control the client's address, not its own."""
    import grpc

    from orbitmq.grpc._generated import definition_pb2 as pb
    from orbitmq.grpc._generated import service_pb2 as spb
    from orbitmq.grpc._generated import service_pb2_grpc as spb_grpc

    permissive = {**server_fields(certs), "tls_server_mode": TlsServerMode.PERMISSIVE,
                  "tls_server_need_client_auth": TlsClientAuth.OPTIONAL}
    with EmbeddedCluster(tmp_path, **permissive) as found:
        endpoint = grpc_endpoint(found.brokers[0])
        where = f"127.0.0.1:{endpoint.port}"
        meta = (("x-mq-client-id", "tls-test"),)
        request = spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic"))
        secure = grpc.secure_channel(where, grpc.ssl_channel_credentials(certs.ca.read_bytes()))
        with secure, grpc.insecure_channel(where) as plain:
            for channel in (secure, plain):
                answer = spb_grpc.MessagingServiceStub(channel).QueryRoute(
                    request, metadata=meta, timeout=10)
                assert answer.status.code == pb.TOPIC_NOT_FOUND
            front = endpoint._front
            assert front is not None and len(front.relays) == 2
            inner = {f"ipv4:127.0.0.1:{port}": client for port, client in front._peers.items()}

            class Relayed:  # what grpcio says of a relayed call's peer
                def __init__(self, peer: str) -> None:
                    self._peer = peer

                def peer(self) -> str:
                    return self._peer

            for relayed, client in inner.items():
                assert endpoint.peer_of(Relayed(relayed)) == client != relayed
                assert client.startswith("ipv4:127.0.0.1:")
