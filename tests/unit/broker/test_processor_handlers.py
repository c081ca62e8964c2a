"""processor/handlers.py, the one table of request codes, over a real broker's processors:
which reads wait for the store's dispatch, and what a slave refuses (code and remark, nothing
stored or changed) while it serves reads and offset commits; a role change takes effect at the
next request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from processor_support import RunningBroker, running_broker, send_request

from orbitmq.broker.processor.handlers import SLAVE_REFUSALS, handler_table
from orbitmq.broker.role import RoleState
from orbitmq.config import BrokerRole
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetMaxOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from orbitmq.transport.server import Handler

WAITED = {RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
          RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
          RequestCode.QUERY_MESSAGE, RequestCode.GET_TOPIC_STATS_INFO,
          RequestCode.GET_CONSUME_STATS, OrbitMQRequestCode.LIST_PENDING_TRANSACTIONS}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from running_broker(tmp_path_factory.mktemp("handlers"), auto_create_topic=False)


def test_reads_of_queues_and_stats_wait_for_the_dispatch_and_nothing_else_does(
        broker: RunningBroker) -> None:
    def after_dispatch(handler: Handler) -> Handler:
        def waiting(cmd: RemotingCommand, conn: object) -> object:
            return handler(cmd, conn)  # type: ignore[arg-type]
        waiting.waited = True  # type: ignore[attr-defined]
        return waiting  # type: ignore[return-value]

    table = handler_table(broker.processors, after_dispatch, broker.controller.role)
    waiting = {code for code, h in table.items() if getattr(h, "waited", False)}
    assert waiting == {int(c) for c in WAITED}
    assert table[RequestCode.VIEW_MESSAGE_BY_ID] == broker.processors.query.view_message_by_id
    # Sends are gated by the role (a master's pass straight through), under their own name.
    assert table[RequestCode.SEND_MESSAGE_V2].__name__ == "send_message"
    assert table[RequestCode.PULL_MESSAGE] == broker.processors.pull.pull_message


def test_a_slave_refuses_changes_with_rocketmq_s_answers_and_serves_reads(
        broker: RunningBroker) -> None:
    broker.run(lambda: broker.controller.topics.update(TopicConfig("HandlerT", 1, 1)))
    role = RoleState(BrokerRole.SLAVE, 1)
    table = handler_table(broker.processors, lambda h: h, role)
    store = broker.controller.store
    end = broker.run(store.max_physical_offset)

    send = broker.answer(table[RequestCode.SEND_MESSAGE_V2], send_request("HandlerT"))
    assert (send.code, send.remark) == SLAVE_REFUSALS[RequestCode.SEND_MESSAGE_V2]
    assert send.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert send.remark is not None and "slave" in send.remark
    assert broker.run(store.max_physical_offset) == end

    create = broker.answer(table[RequestCode.UPDATE_AND_CREATE_TOPIC], RemotingCommand.request(
        RequestCode.UPDATE_AND_CREATE_TOPIC, CreateTopicRequestHeader("HandlerNew").to_ext_fields()))
    assert create.code == ResponseCode.NO_PERMISSION
    assert create.remark is not None and "UPDATE_AND_CREATE_TOPIC is refused" in create.remark
    assert broker.run(lambda: broker.controller.topics.get("HandlerNew")) is None
    delete = broker.answer(table[RequestCode.DELETE_TOPIC_IN_BROKER], RemotingCommand.request(
        RequestCode.DELETE_TOPIC_IN_BROKER, DeleteTopicRequestHeader("HandlerT").to_ext_fields()))
    assert delete.code == ResponseCode.NO_PERMISSION
    assert broker.run(lambda: broker.controller.topics.get("HandlerT")) is not None

    # Reads and offset commits are served.
    read = broker.answer(table[RequestCode.GET_MAX_OFFSET], RemotingCommand.request(
        RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader("HandlerT", 0).to_ext_fields()))
    assert read.code == ResponseCode.SUCCESS
    commit = broker.answer(table[RequestCode.UPDATE_CONSUMER_OFFSET], RemotingCommand.request(
        RequestCode.UPDATE_CONSUMER_OFFSET,
        UpdateConsumerOffsetRequestHeader("HandlerG", "HandlerT", 0, 0).to_ext_fields()))
    assert commit.code == ResponseCode.SUCCESS
    query = broker.answer(table[RequestCode.QUERY_CONSUMER_OFFSET], RemotingCommand.request(
        RequestCode.QUERY_CONSUMER_OFFSET,
        QueryConsumerOffsetRequestHeader("HandlerG", "HandlerT", 0).to_ext_fields()))
    assert (query.code, query.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")

    # Promoted: the same table takes sends at its next request.
    role.change(BrokerRole.ASYNC_MASTER, 0)
    again = broker.answer(table[RequestCode.SEND_MESSAGE_V2], send_request("HandlerT"))
    assert again.code == ResponseCode.SUCCESS, again.remark
    assert broker.run(store.max_physical_offset) > end


def test_every_slave_refusal_of_the_table_is_gated(broker: RunningBroker) -> None:
    master = handler_table(broker.processors, lambda h: h, RoleState(BrokerRole.ASYNC_MASTER, 0))
    slave = handler_table(broker.processors, lambda h: h, RoleState(BrokerRole.SLAVE, 1))
    assert master.keys() == slave.keys()
    for code in SLAVE_REFUSALS:
        if code not in slave:
            continue  # the user and ACL codes: auth_handler_table's
        resp = broker.answer(slave[code], RemotingCommand.request(code))
        assert (resp.code, resp.remark) == SLAVE_REFUSALS[code], code
    gated = {c for c in SLAVE_REFUSALS if c in slave}
    assert {RequestCode.SEND_MESSAGE, RequestCode.SEND_BATCH_MESSAGE,
            RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION,
            RequestCode.CLONE_GROUP_OFFSET, RequestCode.DELETE_SUBSCRIPTIONGROUP} <= gated
