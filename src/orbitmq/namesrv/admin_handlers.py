"""Name server admin requests beyond routes: GET_TOPICS_BY_CLUSTER (224).

GET_TOPICS_BY_CLUSTER (header ``cluster``) answers Java's TopicList, ``{"topicList": [...]}``:
the topics with queues on a broker of that cluster, sorted; an empty list for a cluster the
name server does not know (as RocketMQ answers).
"""

from __future__ import annotations

from orbitmq.namesrv.route_table import RouteTable
from orbitmq.protocol.bodies import TopicList
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import GetTopicsByClusterRequestHeader
from orbitmq.transport.connection import RemotingConnection
from orbitmq.transport.server import RemotingServer

__all__ = ["NamesrvAdminHandlers"]


class NamesrvAdminHandlers:
    """Cluster-wide listings a name server answers from its route table."""

    def __init__(self, routes: RouteTable) -> None:
        self.routes = routes

    def register(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster)

    def get_topics_by_cluster(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_ext_fields(cmd.ext_fields)
        body = TopicList(self.routes.topics_of_cluster(h.cluster)).to_json()
        return cmd.response(ResponseCode.SUCCESS, body=body)
