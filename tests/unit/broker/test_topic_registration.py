"""The broker's single-topic registration requests (issue 38), built and read without a socket:
RocketMQ's codes and field names, the version move only where asked, the answers read safely."""

from orbitmq.broker.topic_registration import (
    BrokerIdentity,
    query_command,
    topic_command,
    version_accepted,
    version_changed,
)
from orbitmq.protocol.bodies import DataVersion, TopicConfig, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand

ME = BrokerIdentity("broker-a", "127.0.0.1:10911", "DefaultCluster", 0)


def test_a_held_topic_is_registered_with_its_queue_data_and_the_move_when_asked():
    cmd = topic_command(ME, "Orders", TopicConfig("Orders", 4, 8, 6), None)
    assert cmd.code == RequestCode.REGISTER_TOPIC_IN_NAMESRV
    assert cmd.ext_fields == {"topic": "Orders", "clusterName": "DefaultCluster",
                              "brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                              "brokerId": "0"}
    route = TopicRouteData.from_json(cmd.body)
    q = route.queue_datas[0]
    assert (q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) == ("broker-a", 4, 8, 6)
    moved = topic_command(ME, "Orders", TopicConfig("Orders", 4, 8, 6), ((10, 1), (12, 3)))
    assert {k: moved.ext_fields[k] for k in ("baseVersionTimestamp", "baseVersionCounter",
                                              "versionTimestamp", "versionCounter")} == {
        "baseVersionTimestamp": "10", "baseVersionCounter": "1", "versionTimestamp": "12",
        "versionCounter": "3"}


def test_a_topic_gone_is_deleted_naming_this_broker():
    cmd = topic_command(ME, "Orders", None, None)
    assert cmd.code == RequestCode.DELETE_TOPIC_IN_NAMESRV and not cmd.body
    assert cmd.ext_fields["brokerName"] == "broker-a" and cmd.ext_fields["topic"] == "Orders"


def test_version_query_and_the_answers():
    cmd = query_command(ME, DataVersion(5, 7))
    assert cmd.code == RequestCode.QUERY_DATA_VERSION
    assert DataVersion.from_json(cmd.body) == DataVersion(5, 7)
    assert set(cmd.ext_fields) == {"brokerName", "brokerAddr", "clusterName", "brokerId"}

    def answer(code: int, **fields: str) -> RemotingCommand:
        r = cmd.response(code)
        r.ext_fields = dict(fields)
        return r

    assert version_changed(answer(ResponseCode.SUCCESS, changed="false")) is False
    assert version_changed(answer(ResponseCode.SUCCESS, changed="true")) is True
    assert version_changed(answer(ResponseCode.SUCCESS)) is True  # malformed: the safe side
    assert version_changed(answer(ResponseCode.NOT_SUPPORTED)) is True
    assert version_accepted(answer(ResponseCode.SUCCESS, versionAccepted="true")) is True
    assert version_accepted(answer(ResponseCode.SUCCESS, versionAccepted="false")) is False
    assert version_accepted(answer(ResponseCode.SUCCESS)) is None  # RocketMQ's name server
    assert version_accepted(answer(ResponseCode.SUCCESS, versionAccepted="maybe")) is None
