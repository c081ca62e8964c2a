"""The source and the sink with the ``tls*`` options against a cluster of its own in ``enforcing``
mode with client certificates required: the driver's and the executors' clients connect in TLS;
options that cannot work are refused naming the option."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orbitmq import Admin, ClientTls, Message, Producer
from orbitmq.config import NamesrvConfig
from orbitmq.spark.options import OptionError, parse_read_options, parse_write_options
from orbitmq.testing.certs import TestCerts, make_test_certs
from orbitmq.testing.embedded import EmbeddedCluster

TOPIC, SINK_TOPIC = "SparkTlsIn", "SparkTlsOut"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_test_certs(tmp_path_factory.mktemp("spark-certs"))


def client_tls(certs: TestCerts) -> ClientTls:
    return ClientTls(str(certs.ca), str(certs.client_cert), str(certs.client_key))


@pytest.fixture(scope="module")
def tls_namesrv(certs: TestCerts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = {"tls_server_mode": "enforcing", "tls_server_cert_path": str(certs.server_cert),
              "tls_server_key_path": str(certs.server_key),
              "tls_server_trust_cert_path": str(certs.ca), "tls_server_need_client_auth": "require"}
    ns = NamesrvConfig(listen_port=0, **server)  # type: ignore[arg-type]
    with EmbeddedCluster(tmp_path_factory.mktemp("spark-tls"), namesrv_config=ns, **server,
                         tls_enable=True, tls_client_trust_cert_path=str(certs.ca),
                         tls_client_cert_path=str(certs.client_cert),
                         tls_client_key_path=str(certs.client_key)) as cluster:
        with Admin(cluster.namesrv, tls=client_tls(certs)) as admin:
            for topic in (TOPIC, SINK_TOPIC):
                admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        with Producer("spark-tls-feed", cluster.namesrv, tls=client_tls(certs)) as producer:
            for i in range(20):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        yield cluster.namesrv


def tls_options(certs: TestCerts) -> dict[str, str]:
    return {"tls": "true", "tlsTrustCertPath": str(certs.ca),
            "tlsCertPath": str(certs.client_cert), "tlsKeyPath": str(certs.client_key)}


def test_a_read_and_a_write_connect_with_the_tls_options(spark, tls_namesrv: str,
                                                         certs: TestCerts) -> None:
    df = (spark.read.format("orbitmq").option("namesrv", tls_namesrv).option("topic", TOPIC)
          .options(**tls_options(certs)).load())
    assert sorted(bytes(r.body) for r in df.select("body").collect()) == sorted(
        f"m{i}".encode() for i in range(20))
    (df.selectExpr("body").write.format("orbitmq").option("namesrv", tls_namesrv)
     .option("topic", SINK_TOPIC).options(**tls_options(certs)).mode("append").save())
    with Admin(tls_namesrv, tls=client_tls(certs)) as admin:
        assert sum(s.max_offset for s in admin.topic_status(SINK_TOPIC)) == 20


def test_tls_options_are_checked_where_they_are_parsed(certs: TestCerts,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"namesrv": "127.0.0.1:9876", "topic": "T"}
    opts = parse_read_options({**base, **tls_options(certs)}, streaming=False)
    assert opts.tls == client_tls(certs)
    assert parse_write_options({**base, "tls": "false"}, streaming=False).tls is None
    with pytest.raises(OptionError, match="tlsTrustCertPath needs tls=true"):
        parse_read_options({**base, "tlsTrustCertPath": str(certs.ca)}, streaming=False)
    with pytest.raises(OptionError, match="tlsKeyPath"):
        parse_write_options({**base, "tls": "true", "tlsCertPath": str(certs.client_cert)},
                            streaming=False)
    monkeypatch.setenv("ORBITMQ_TLS_ENABLE", "true")
    monkeypatch.setenv("ORBITMQ_TLS_CLIENT_TRUST_CERT_PATH", str(certs.ca))
    assert parse_read_options(base, streaming=False).tls == ClientTls(str(certs.ca))
    assert parse_read_options({**base, "tls": "false"}, streaming=False).tls is None
