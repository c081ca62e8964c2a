"""The source and the sink with ``accessKey`` / ``secretKey`` against a cluster with
authentication and authorization on (its own, beside the shared one): the driver's and the
executors' clients sign; a wrong secret is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from orbitmq import Admin, Credentials, Message, Producer
from orbitmq.config import NamesrvConfig
from orbitmq.testing.embedded import EmbeddedCluster

ROOT = Credentials("root", "root-secret-1")
ALICE = Credentials("alice", "alice-secret-1")
TOPIC, SINK_TOPIC, GROUP = "SparkAuthIn", "SparkAuthOut", "spark-alice"


@pytest.fixture(scope="module")
def auth_namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    init = json.dumps({"username": ROOT.access_key, "password": ROOT.secret_key})
    auth = {"authentication_enabled": True, "authorization_enabled": True,
            "init_authentication_user": init}
    root = tmp_path_factory.mktemp("spark-auth")
    # the name server keeps users too (alice reads routes there); the Admin writes to both
    ns = NamesrvConfig(listen_port=0, auth_config_path=str(root / "namesrv-auth.json"),
                       **auth)  # type: ignore[arg-type]
    with EmbeddedCluster(root, namesrv_config=ns, **auth) as cluster:
        with Admin(cluster.namesrv, credentials=ROOT) as admin:
            for topic in (TOPIC, SINK_TOPIC):
                admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
            admin.create_user(ALICE.access_key, ALICE.secret_key)
            admin.create_acl("User:alice", [f"Topic:{TOPIC}", f"Group:{GROUP}"], "Sub")
            admin.create_acl("User:alice", [f"Topic:{SINK_TOPIC}"], "Pub")
        with Producer("spark-auth-feed", cluster.namesrv, credentials=ROOT) as producer:
            for i in range(20):
                producer.send(Message(TOPIC, f"m{i}".encode()))
        yield cluster.namesrv


def _read(spark, namesrv: str, secret: str):
    return (spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", TOPIC)
            .option("consumerGroup", GROUP).option("accessKey", ALICE.access_key)
            .option("secretKey", secret).load())


def test_a_read_and_a_write_sign_with_the_options(spark, auth_namesrv: str) -> None:
    df = _read(spark, auth_namesrv, ALICE.secret_key)
    assert sorted(bytes(r.body) for r in df.select("body").collect()) == sorted(
        f"m{i}".encode() for i in range(20))
    (df.selectExpr("body").write.format("orbitmq").option("namesrv", auth_namesrv)
     .option("topic", SINK_TOPIC).option("accessKey", ALICE.access_key)
     .option("secretKey", ALICE.secret_key).mode("append").save())
    with Admin(auth_namesrv, credentials=ROOT) as admin:
        assert sum(s.max_offset for s in admin.topic_status(SINK_TOPIC)) == 20


def test_a_wrong_secret_fails_the_read(spark, auth_namesrv: str) -> None:
    with pytest.raises(Exception, match="authentication failed") as info:
        _read(spark, auth_namesrv, "not-the-secret").count()
    assert "not-the-secret" not in str(info.value)
