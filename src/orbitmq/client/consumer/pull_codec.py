"""PULL_MESSAGE requests and answers, built and read in one place (pure functions, like send_codec).

Every pull of the SDK goes through here: :class:`~orbitmq.client.AsyncPullConsumer`
(``pull`` and ``pull_raw``), the push consumer's long-polling loops
(:mod:`orbitmq.client.consumer.pull_service`) and the admin's queue reads (dead letters). Spark's source
pulls with ``pull_raw``. So the flags, the subscription that travels with every request and the
reading of the answer's header cannot drift apart between them.

An answer is read two ways: :func:`parse_pull_response` decodes the messages (CRC checked, bodies
inflated, tags re-checked); :func:`parse_raw_pull_response` hands the body back as the broker sent
it (back-to-back stored messages), for callers that decode in bulk with
:mod:`orbitmq.protocol.stored`.
"""

from __future__ import annotations

from orbitmq.client.consumer.message_selector import ExpressionLike, selector_of
from orbitmq.client.instance import check_response
from orbitmq.client.results import PullResult, PullStatus, RawPullResult
from orbitmq.protocol.bodies import MessageQueue, SubscriptionData
from orbitmq.protocol.codes import OrbitMQRequestCode, RequestCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
)
from orbitmq.protocol.stored import iter_stored_messages

__all__ = [
    "PULL_BATCH_SIZE_MAX",
    "BULK_PULL_NUMS_MAX",
    "build_pull_request",
    "parse_pull_response",
    "parse_raw_pull_response",
]

PULL_BATCH_SIZE_MAX = 1024  # RocketMQ caps a pull at 1,024 messages whatever is asked
# What a bulk pull (OrbitMQ's PULL_MESSAGE_BULK) may ask for; the broker's bulk_pull_count_max
# and bulk_pull_bytes_max decide what it gets.
BULK_PULL_NUMS_MAX = 1_000_000


def build_pull_request(
    group: str,
    mq: MessageQueue,
    offset: int,
    max_nums: int,
    expression: ExpressionLike | SubscriptionData,
    suspend: float | None,
    *,
    commit_offset: int = 0,
    bulk: bool = False,
) -> RemotingCommand:
    """PULL_MESSAGE for ``mq`` from ``offset`` (OrbitMQ's PULL_MESSAGE_BULK with ``bulk``: the
    same header, answered within the broker's bulk bounds).

    The subscription travels with every request (the SUBSCRIPTION flag), so the broker needs no
    heartbeat to filter. A push consumer passes its :class:`SubscriptionData` (parsed when it
    subscribed; its version goes along); everybody else a TAG expression or a MessageSelector.

    Args:
        suspend: long poll: when nothing is there the broker holds the request up to this many
            seconds (the SUSPEND flag); None or 0: answer at once.
        commit_offset: a clustering consumer's acknowledged progress of ``mq``, sent with the
            COMMIT_OFFSET flag when > 0 so that the broker learns it between offset commits.

    Raises:
        ExpressionError: the expression does not parse (nothing can be sent).
    """
    if isinstance(expression, SubscriptionData):
        subscription, expression_type = expression.sub_string, expression.expression_type
        sub_version = expression.sub_version
    else:
        selector = selector_of(expression)
        subscription, expression_type = selector.expression, selector.expression_type.value
        sub_version = 0
    flags = PullSysFlag.SUBSCRIPTION
    if suspend:
        flags |= PullSysFlag.SUSPEND
    if commit_offset > 0:
        flags |= PullSysFlag.COMMIT_OFFSET
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=max_nums,
        sys_flag=int(flags),
        commit_offset=max(commit_offset, 0),
        suspend_timeout_millis=int((suspend or 0) * 1000),
        subscription=subscription,
        sub_version=sub_version,
        expression_type=expression_type,
    )
    code = OrbitMQRequestCode.PULL_MESSAGE_BULK if bulk else RequestCode.PULL_MESSAGE
    return RemotingCommand.request(code, header.to_ext_fields())


def _status_and_header(resp: RemotingCommand) -> tuple[PullStatus, PullMessageResponseHeader]:
    status = PullStatus.from_response_code(resp.code)
    if status is None:
        check_response(resp)  # raises: SUCCESS would have given a status
    assert status is not None
    return status, PullMessageResponseHeader.from_ext_fields(resp.ext_fields)


def parse_pull_response(resp: RemotingCommand, tags: frozenset[str] | None) -> PullResult:
    """The PullResult of a broker's answer: messages decoded (CRC checked, bodies inflated) and
    kept only when their tag is one of ``tags`` (all when None).

    Raises:
        BrokerError: a failure code (e.g. SUBSCRIPTION_PARSE_FAILED, TOPIC_NOT_EXIST).
        RemoteProtocolError: a malformed header or body.
    """
    status, header = _status_and_header(resp)
    messages = []
    if status is PullStatus.FOUND and resp.body:
        messages = list(iter_stored_messages(resp.body, check_crc=True, decompress=True))
        if tags is not None:
            messages = [m for m in messages if m.tags in tags]
    return PullResult(status, header.next_begin_offset, header.min_offset, header.max_offset,
                      messages, header.suggest_which_broker_id)


def parse_raw_pull_response(resp: RemotingCommand, tags: frozenset[str] | None) -> RawPullResult:
    """The RawPullResult of a broker's answer: the body untouched (nothing decoded or checked
    here: the caller's decoder checks it), with the tags a decoder must re-check.

    Raises:
        BrokerError: a failure code (e.g. SUBSCRIPTION_PARSE_FAILED, TOPIC_NOT_EXIST).
        RemoteProtocolError: a malformed header.
    """
    status, header = _status_and_header(resp)
    body = resp.body if status is PullStatus.FOUND else b""
    return RawPullResult(status, header.next_begin_offset, header.min_offset, header.max_offset,
                         body if type(body) is bytes else bytes(body), tags, resp.remark or "",
                         header.suggest_which_broker_id)
