"""``orbitmq dlq list|resend`` and ``orbitmq group update`` against a real name server and broker
(an EmbeddedCluster), through click's CliRunner; messages sent and read with the SDK."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result

import orbitmq
from orbitmq.cli.main import cli
from orbitmq.config import TEST_MIN_STORE
from orbitmq.errors import BrokerError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster
from orbitmq.transport import RemotingClient

LEVELS = "1s 1s 1s"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    store = dataclasses.replace(TEST_MIN_STORE, message_delay_level=LEVELS)
    with EmbeddedCluster(tmp_path_factory.mktemp("dlq-cli"), store=store) as c:
        yield c


def run(cluster: EmbeddedCluster, *args: str, ok: bool = True) -> Result:
    result = CliRunner().invoke(cli, [*args, "--namesrv", cluster.namesrv])
    if ok:
        assert result.exit_code == 0, (args, result.output, result.exception)
    return result


def read_topic(cluster: EmbeddedCluster, topic: str, group: str = "dlq-cli-reader") -> list[MessageExt]:
    """Every message of every queue of ``topic`` from offset 0."""
    out: list[MessageExt] = []
    with orbitmq.PullConsumer(group, namesrv=cluster.namesrv) as consumer:
        for mq in consumer.fetch_queues(topic):
            offset = 0
            for _ in range(100):
                res = consumer.pull(mq, offset, max_nums=32)
                out.extend(res.messages)
                if res.status.name == "NO_NEW_MSG" or res.next_begin_offset <= offset:
                    break
                offset = res.next_begin_offset
    return out


def fail_message(cluster: EmbeddedCluster, msg: MessageExt, group: str) -> None:
    """What a consumer does with a message it failed: CONSUMER_SEND_MSG_BACK to its broker."""
    header = ConsumerSendMsgBackRequestHeader(msg.commit_log_offset, group, 0, msg.msg_id, msg.topic)
    client = RemotingClient()
    try:
        cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext_fields())
        resp = cluster.call(client.invoke(cluster.brokers[0].address, cmd, 5.0))
    finally:
        cluster.call(client.close())
    assert resp.code == ResponseCode.SUCCESS, resp.remark


def test_dlq_list_and_resend_bring_a_dead_letter_back(cluster: EmbeddedCluster) -> None:
    topic, group = "DlqCliTopic", "dlq-cli-group"
    assert "no dead letters" in run(cluster, "dlq", "list", "--group", group).output
    out = run(cluster, "group", "update", "--group", group, "--retry-max-times", "0").output
    assert f"group {group} updated on broker-a: retry_max_times=0" in out
    with orbitmq.Producer("dlq-cli-producer", namesrv=cluster.namesrv) as producer:
        sent = producer.send(orbitmq.Message(topic, b"poison pill", tags="bad", keys=["k-1"],
                                             properties={"color": "blue"}))
    [original] = read_topic(cluster, topic)
    fail_message(cluster, original, group)  # no retry allowed: straight to %DLQ%

    listing = run(cluster, "dlq", "list", "--group", group).output
    row = next(line for line in listing.splitlines() if line.startswith(sent.msg_id))
    assert topic in row and "poison pill" in row and row.split()[2] == "1"
    assert listing.splitlines()[-1] == "total: 1 (0 resent)"
    [entry] = [json.loads(line) for line in
               run(cluster, "dlq", "list", "--group", group, "--format", "json").output.splitlines()]
    assert entry["original_topic"] == topic and entry["msg_id"] == sent.msg_id
    assert entry["topic"] == f"%DLQ%{group}" and entry["reconsume_times"] == 1
    with orbitmq.Admin(cluster.namesrv) as admin:
        [dead] = admin.dead_letters(group)
    dead_letter_origin = dead.properties.get("ORIGIN_MESSAGE_ID") or dead.msg_id

    out = run(cluster, "dlq", "resend", "--group", group, "--msg-id", sent.msg_id).output
    retry = f"%RETRY%{group}"
    assert out.startswith(f"resent {sent.msg_id} to {retry} (original topic {topic}):")
    assert read_topic(cluster, topic) == [original]  # not to the topic: other groups read it
    [back] = read_topic(cluster, retry)  # to the group's own retry topic, as a retry
    assert back.body == b"poison pill" and back.tags == "bad" and back.keys == ["k-1"]
    assert back.msg_id == sent.msg_id and back.properties["color"] == "blue"
    assert back.reconsume_times == 0
    assert back.properties["RETRY_TOPIC"] == topic
    assert back.properties["ORIGIN_MESSAGE_ID"] == dead_letter_origin
    for bookkeeping in ("REAL_TOPIC", "REAL_QID", "DELAY", "MAX_RECONSUME_TIMES"):
        assert bookkeeping not in back.properties


def test_dlq_resend_all_twice_sends_each_dead_letter_once(cluster: EmbeddedCluster) -> None:
    """``dlq resend --all`` run twice used to send every dead letter twice."""
    topic, group = "DlqOnceTopic", "dlq-once-group"
    run(cluster, "group", "update", "--group", group, "--retry-max-times", "0")
    with orbitmq.Producer("dlq-cli-producer", namesrv=cluster.namesrv) as producer:
        for i in range(3):
            producer.send(orbitmq.Message(topic, f"dead-{i}".encode()))
    originals = read_topic(cluster, topic)
    for msg in originals:
        fail_message(cluster, msg, group)

    first = run(cluster, "dlq", "resend", "--group", group, "--all").output
    assert sum(line.startswith("resent ") and " to " in line for line in first.splitlines()) == 3
    second = run(cluster, "dlq", "resend", "--group", group, "--all").output
    assert second.splitlines()[-1] == (f"no dead letters to resend for group {group}; skipped 3 "
                                       "resent before (--force sends them again)")
    retry = f"%RETRY%{group}"
    assert sorted(m.body for m in read_topic(cluster, retry)) == [b"dead-0", b"dead-1", b"dead-2"]
    listing = run(cluster, "dlq", "list", "--group", group).output
    assert listing.splitlines()[-1] == "total: 3 (3 resent)"

    # One more dead letter: only it goes on the next resend; --force sends all four again.
    with orbitmq.Producer("dlq-cli-producer", namesrv=cluster.namesrv) as producer:
        producer.send(orbitmq.Message(topic, b"dead-3"))
    [late] = [m for m in read_topic(cluster, topic) if m.body == b"dead-3"]
    fail_message(cluster, late, group)
    again = run(cluster, "dlq", "resend", "--group", group, "--all")
    assert [line.split()[1] for line in again.output.splitlines() if line.startswith("resent ") and
            " to " in line] == [late.msg_id]
    assert again.stderr.splitlines()[-1] == ("resent 1 of 1 dead letter(s) read; skipped 3 resent "
                                             "before (--force sends them again)")
    forced = run(cluster, "dlq", "resend", "--group", group, "--all", "--force").output
    assert sum(line.startswith("resent ") and " to " in line for line in forced.splitlines()) == 4
    assert [m.msg_id for m in read_topic(cluster, topic)].count(late.msg_id) == 1
    resent_ids = [m.msg_id for m in read_topic(cluster, retry)]
    assert all(resent_ids.count(m.msg_id) == 2 for m in originals)  # resent, forced
    assert resent_ids.count(late.msg_id) == 2
    few = run(cluster, "dlq", "resend", "--group", group, "--all", "--force", "--max", "3")
    assert few.stderr.splitlines()[-1] == ("resent 3 of 3 dead letter(s) read; 1 not reached "
                                           "(--max 3): run it again")
    skipped = run(cluster, "dlq", "resend", "--group", group, "--msg-id", late.msg_id)
    assert "resent before" in skipped.output


def test_dlq_resend_input_errors(cluster: EmbeddedCluster) -> None:
    both = run(cluster, "dlq", "resend", "--group", "g-none", ok=False)
    assert both.exit_code == 2 and "exactly one of --msg-id ID and --all" in both.output
    missing = run(cluster, "dlq", "resend", "--group", "g-none", "--msg-id", "NOPE", ok=False)
    assert missing.exit_code == 1 and "no dead letter NOPE" in missing.output
    assert "no dead letters" in run(cluster, "dlq", "resend", "--group", "g-none", "--all").output


def test_group_update_disables_and_enables_consumption(cluster: EmbeddedCluster) -> None:
    topic, group = "GateCliTopic", "gate-cli-group"
    with orbitmq.Producer("gate-cli-producer", namesrv=cluster.namesrv) as producer:
        sent = producer.send(orbitmq.Message(topic, b"x"))
    out = run(cluster, "group", "update", "--group", group, "--consume-enable", "false").output
    assert "consume_enable=False" in out
    with orbitmq.PullConsumer(group, namesrv=cluster.namesrv) as consumer:
        with pytest.raises(BrokerError) as refused:
            consumer.pull(sent.queue, 0)
        assert refused.value.code == ResponseCode.NO_PERMISSION == 16
        run(cluster, "group", "update", "--group", group, "--consume-enable", "true",
            "--retry-max-times", "3")
        assert [m.body for m in consumer.pull(sent.queue, 0).messages] == [b"x"]
    groups = cluster.brokers[0].sub_groups.table
    assert groups[group].retry_max_times == 3 and groups[group].consume_enable
    nothing = run(cluster, "group", "update", "--group", group, ok=False)
    assert nothing.exit_code == 2 and "nothing to change" in nothing.output
