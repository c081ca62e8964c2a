"""The requests of incremental registration, as a broker builds and reads them (the
name server's side is namesrv/topic_registration.py, the headers protocol/registration_headers.py).

Pure: commands in and out, no I/O; RegisterService sends them.
"""

from __future__ import annotations

from typing import NamedTuple

from orbitmq.errors import OrbitMQError
from orbitmq.protocol.bodies import DataVersion, QueueData, TopicConfig, TopicRouteData
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import DeleteTopicFromNamesrvRequestHeader
from orbitmq.protocol.registration_headers import (
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterTopicRequestHeader,
    TopicRegistrationResponseHeader,
)

__all__ = ["BrokerIdentity", "VersionKey", "topic_command", "query_command", "version_accepted", "version_changed"]

VersionKey = tuple[int, int]  # a DataVersion's (timestamp, counter)


class BrokerIdentity(NamedTuple):
    """Who registers: the fields every registration request names the broker by."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int


def topic_command(identity: BrokerIdentity, topic: str, config: TopicConfig | None,
                  move: tuple[VersionKey, VersionKey] | None) -> RemotingCommand:
    """REGISTER_TOPIC_IN_NAMESRV for a topic the broker holds (its queues in a TopicRouteData,
    as RocketMQ's ``registerSingleTopicAll``), DELETE_TOPIC_IN_NAMESRV for one it no longer
    does; ``move``: (base, new)
    data version on the last request of a round."""
    bt = bc = vt = vc = None
    if move is not None:
        (bt, bc), (vt, vc) = move
    name, addr, cluster, bid = identity
    if config is None:
        header = DeleteTopicFromNamesrvRequestHeader(
            topic=topic, cluster_name=cluster, broker_name=name, broker_addr=addr, broker_id=bid,
            base_version_timestamp=bt, base_version_counter=bc, version_timestamp=vt,
            version_counter=vc)
        return RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, header.to_ext_fields())
    reg = RegisterTopicRequestHeader(
        topic=topic, cluster_name=cluster, broker_name=name, broker_addr=addr, broker_id=bid,
        base_version_timestamp=bt, base_version_counter=bc, version_timestamp=vt,
        version_counter=vc)
    queue = QueueData(name, config.read_queue_nums,
                      config.write_queue_nums, config.perm, config.topic_sys_flag)
    return RemotingCommand.request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, reg.to_ext_fields(),
                                   TopicRouteData(queue_datas=[queue]).to_json())


def query_command(identity: BrokerIdentity, version: DataVersion) -> RemotingCommand:
    """QUERY_DATA_VERSION: the broker's identity, body the DataVersion asked about."""
    header = QueryDataVersionRequestHeader(*identity)
    return RemotingCommand.request(RequestCode.QUERY_DATA_VERSION, header.to_ext_fields(),
                                   version.to_json())


def version_changed(resp: RemotingCommand) -> bool:
    """A QUERY_DATA_VERSION answer: True unless it says plainly "not changed" (a refusal or a
    malformed answer counts as changed: the whole table is the safe side)."""
    if resp.code != ResponseCode.SUCCESS:
        return True
    try:
        return QueryDataVersionResponseHeader.from_ext_fields(resp.ext_fields).changed
    except OrbitMQError:
        return True


def version_accepted(resp: RemotingCommand) -> bool | None:
    """A single-topic answer's verdict on the version move: True taken, False refused (the
    name server is behind), None not said (a RocketMQ name server, which does not track it)."""
    try:
        return TopicRegistrationResponseHeader.from_ext_fields(resp.ext_fields).version_accepted
    except OrbitMQError:
        return None
