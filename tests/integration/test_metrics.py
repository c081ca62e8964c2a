"""Prometheus metrics (issue 17): ``orbitmq standalone --metrics-exporter-type PROM`` on a free
port, scraped over HTTP before and after real sends and pulls through the SDK. The counters
move by exactly what was sent and consumed and the text parses with prometheus_client's parser.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orbitmq import AccessDeniedError, Credentials, Message, Producer, PullConsumer
from orbitmq.client import Admin
from orbitmq.testing.process import ServerProcess, standalone_process

TOPIC, GROUP = "MetricsTopic", "metrics-group"
SINGLES, BATCHES, BATCH = 7, 3, 4
BODY = b"m" * 300


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, dict[str, str]]]:
    child = standalone_process(str(tmp_path_factory.mktemp("metrics") / "store"),
                               "--metrics-exporter-type", "PROM",
                               "--metrics-prom-exporter-port", "0",
                               "--metrics-rpc-latency-sample-every", "1")
    try:
        addrs = child.wait_ready("namesrv", "broker", "metrics")
        yield child, addrs
        assert child.stop() == 0, child.output()[-3000:]
    finally:
        child.kill()
    assert "Traceback" not in child.output()


def scrape(addr: str, token: str = "") -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)] of every sample of one scrape (parsed by prometheus_client)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://{addr}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    return sum(v for lbl, v in samples.get(name, []) if labels.items() <= lbl.items())


def test_counters_move_by_exactly_what_was_sent_and_consumed(server) -> None:
    _child, addrs = server
    ns = addrs["namesrv"]
    before = scrape(addrs["metrics"])
    assert value(before, "rocketmq_messages_in_total", topic=TOPIC) == 0
    with Admin(ns) as admin:
        admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    with Producer("metrics-producer", namesrv=ns) as producer:
        for i in range(SINGLES):
            producer.send(Message(TOPIC, BODY, keys=[f"k{i}"]))
        for _ in range(BATCHES):
            producer.send_batch([Message(TOPIC, BODY) for _ in range(BATCH)])
        after_send = scrape(addrs["metrics"])
        pulled = 0
        with PullConsumer(GROUP, namesrv=ns) as consumer:
            for mq in consumer.fetch_queues(TOPIC):
                offset = 0
                while True:
                    res = consumer.pull(mq, offset, max_nums=5)
                    if not res.messages:
                        break
                    pulled += len(res.messages)
                    offset = res.next_begin_offset
            after_pull = scrape(addrs["metrics"])
    sent = SINGLES + BATCHES * BATCH
    assert pulled == sent
    identity = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
    in_labels = {"topic": TOPIC, "message_type": "normal", "is_system": "false", **identity}
    assert value(after_send, "rocketmq_messages_in_total", **in_labels) == sent
    assert value(after_send, "rocketmq_message_size_count", **in_labels) == sent
    stored = value(after_send, "rocketmq_throughput_in_total", **in_labels)
    assert stored > sent * len(BODY)  # bodies plus the stored headers
    assert value(after_send, "rocketmq_message_size_sum", **in_labels) == stored
    assert value(after_send, "rocketmq_message_size_bucket", le="1024.0", **in_labels) == sent
    out = {"topic": TOPIC, "consumer_group": GROUP, "is_retry": "false", **identity}
    assert value(after_send, "rocketmq_messages_out_total", **out) == 0
    assert value(after_pull, "rocketmq_messages_out_total", **out) == sent
    assert value(after_pull, "rocketmq_throughput_out_total", **out) == stored
    # every send request was timed (sample every 1): the singles and the batches
    sends = sum(value(after_send, "rocketmq_rpc_latency_count", request_code=code,
                      response_code="success", node_type="broker")
                for code in ("send_message", "send_message_v2", "send_batch_message"))
    assert sends == SINGLES + BATCHES
    assert value(after_pull, "rocketmq_producer_connections", language="python") >= 1
    assert value(after_pull, "rocketmq_consumer_connections", consumer_group=GROUP) >= 1
    assert value(after_pull, "rocketmq_storage_size", storage_type="local") > 0
    assert "rocketmq_storage_flush_behind_bytes" in after_pull
    assert value(after_pull, "rocketmq_storage_message_reserve_time") >= 0
    # the name server's figures come through the same endpoint in standalone
    assert value(after_pull, "rocketmq_rpc_latency_count", node_type="nameserver") > 0
    assert value(after_pull, "orbitmq_namesrv_topics", node_type="nameserver") >= 1


def test_lag_gauges_follow_committed_offsets(server) -> None:
    _child, addrs = server
    ns = addrs["namesrv"]
    topic, group = "MetricsLag", "lag-group"
    with Admin(ns) as admin:
        admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        with Producer("lag-producer", namesrv=ns) as producer:
            for _ in range(5):
                producer.send(Message(topic, b"x"))
        mq = admin.topic_status(topic)[0].queue
        admin.reset_offset(group, topic, 0)  # commits offset 0 for the group
    labels = {"consumer_group": group, "topic": topic}
    samples = scrape(addrs["metrics"])
    assert value(samples, "rocketmq_consumer_lag_messages", **labels) == 5
    assert value(samples, "rocketmq_consumer_ready_messages", **labels) == 5
    assert value(samples, "rocketmq_consumer_inflight_messages", **labels) == 0
    assert value(samples, "rocketmq_consumer_lag_latency", **labels) >= 0
    with PullConsumer(group, namesrv=ns) as consumer:
        assert len(consumer.pull(mq, 0, max_nums=3).messages) == 3
    samples = scrape(addrs["metrics"])
    assert value(samples, "rocketmq_consumer_inflight_messages", **labels) == 3
    assert value(samples, "rocketmq_consumer_ready_messages", **labels) == 2


def test_only_get_metrics_is_served(server) -> None:
    _child, addrs = server
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://{addrs['metrics']}/nothing", timeout=10)
    missing.value.close()
    assert missing.value.code == 404
    request = urllib.request.Request(f"http://{addrs['metrics']}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()
    assert refused.value.code == 405


def test_disabled_by_default_and_a_taken_port_is_one_line(tmp_path: Path) -> None:
    with standalone_process(str(tmp_path / "a")) as child:
        child.wait_ready("namesrv", "broker")
        assert "metrics ready" not in child.output()
        assert child.stop() == 0
    with standalone_process(str(tmp_path / "b"), "--metrics-exporter-type", "PROM",
                            "--metrics-prom-exporter-port", "0") as first:
        port = first.wait_ready("metrics")["metrics"].rpartition(":")[2]
        second = standalone_process(str(tmp_path / "c"), "--metrics-exporter-type", "PROM",
                                    "--metrics-prom-exporter-port", port)
        try:
            assert second.proc.wait(timeout=60) == 1
            lines = [ln for ln in second.output().splitlines() if ln.startswith("Error")]
            assert len(lines) == 1 and "cannot start" in lines[0], second.output()[-2000:]
        finally:
            second.kill()
        assert first.stop() == 0


METRICS_TOKEN = "metrics-token-0123456789"
ROOT = Credentials("root", "root-secret-1")


def _status(addr: str, **headers: str) -> int:
    request = urllib.request.Request(f"http://{addr}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        e.close()
        return int(e.code)


def test_a_token_guards_the_endpoint_and_refused_requests_are_counted(tmp_path: Path) -> None:
    """``metrics_token``: 401 without it or with another, 200 with it, and never printed. With
    authentication on, refusals show up as counters by reason, from both servers."""
    env = {"ORBITMQ_METRICS_TOKEN": METRICS_TOKEN,
           "ORBITMQ_INIT_AUTHENTICATION_USER": json.dumps(
               {"username": ROOT.access_key, "password": ROOT.secret_key})}
    with standalone_process(str(tmp_path / "store"), "--metrics-exporter-type", "PROM",
                            "--metrics-prom-exporter-port", "0", "--authentication-enabled",
                            "true", "--authorization-enabled", "true", env=env) as child:
        addrs = child.wait_ready("namesrv", "broker", "metrics")
        metrics = addrs["metrics"]
        assert _status(metrics) == 401
        assert _status(metrics, Authorization="Bearer not-the-metrics-token") == 401
        assert _status(metrics, Authorization=f"Basic {METRICS_TOKEN}") == 401
        assert _status(metrics, Authorization=f"Bearer {METRICS_TOKEN}") == 200
        before = scrape(metrics, METRICS_TOKEN)
        assert value(before, "rocketmq_authentication_failures_total") == 0

        with Admin(addrs["namesrv"]) as anonymous, pytest.raises(AccessDeniedError):
            anonymous.list_topics()  # the name server refuses it: no credentials
        wrong = Credentials(ROOT.access_key, "not-the-secret")
        with Admin(addrs["namesrv"], credentials=wrong) as admin, \
                pytest.raises(AccessDeniedError):
            admin.list_topics()
        with Admin(addrs["namesrv"], credentials=ROOT) as admin:
            broker = admin.cluster_info().broker_addr_table["broker-a"].broker_addrs[0]
        with Admin(addrs["namesrv"], credentials=wrong) as admin, \
                pytest.raises(AccessDeniedError):
            admin.broker_runtime_info(broker)  # the broker refuses it: bad signature

        after = scrape(metrics, METRICS_TOKEN)
        failures = "rocketmq_authentication_failures_total"
        assert value(after, failures, node_type="nameserver", reason="no_credentials") == 1
        assert value(after, failures, node_type="nameserver", reason="bad_signature") == 1
        assert value(after, failures, node_type="broker", reason="bad_signature") == 1
        assert "rocketmq_authorization_denials_total" not in after  # no sample before a denial

        alice = Credentials("alice", "alice-secret-1")  # a Normal user without any rule
        with Admin(addrs["namesrv"], credentials=ROOT) as admin:
            admin.create_user(alice.access_key, alice.secret_key)
        with Admin(addrs["namesrv"], credentials=alice) as admin:
            with pytest.raises(AccessDeniedError, match="needs a Super user"):
                admin.update_broker_config(broker, {"fileReservedTime": "1"})
            with pytest.raises(AccessDeniedError, match="no rule allows"):
                admin.broker_runtime_info(broker)
        denied = scrape(metrics, METRICS_TOKEN)
        denials = "rocketmq_authorization_denials_total"
        assert value(denied, denials, node_type="broker", reason="super_only") == 1
        assert value(denied, denials, node_type="broker", reason="no_rule") == 1
        assert value(denied, denials, node_type="nameserver") == 0
        assert child.stop() == 0
    output = child.output()
    assert METRICS_TOKEN not in output and ROOT.secret_key not in output
    assert "alice-secret" not in output
