"""GET_ALL_TOPIC_CONFIG (21) in pages: how a slave copies a topic table larger than a frame.

The whole table's JSON passes a 16 MiB frame at about 110,000 topics, and a frame larger than
the peer's bound closes the connection: the copy could never succeed. RocketMQ 5 asks in pages
(BrokerOuterAPI.getAllTopicConfig, enableSplitMetadata): the request carries ``topicSeq`` (the
first topic wanted, by position in name order), ``maxTopicNum`` and the ``dataVersion`` of the
pages read so far; the answer holds at most min(``split_metadata_size``, ``maxTopicNum``)
topics, the table's version now and, in its header, ``totalTopicNum``. A table whose version
moved is answered from its first topic with the new version, and the asker starts again. OrbitMQ
answers and asks that way, so its slaves copy from RocketMQ 5 masters and the reverse.

Beyond RocketMQ, no answer is ever larger than this broker's frame bound (``max_frame_size``,
which the brokers of a set share): a page whose JSON would pass it holds fewer topics (the asker
moves on by the topics it got), and a request for the whole table (an older peer's, or any with
``enable_split_metadata`` off) that would pass it is refused with LIMIT_EXCEEDED and a remark
saying to ask in pages, instead of a frame the peer cannot read.
"""

from __future__ import annotations

from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.errors import BrokerError, RemoteProtocolError
from orbitmq.protocol.bodies import DataVersion
from orbitmq.protocol.codes import ResponseCode
from orbitmq.protocol.headers import GetAllTopicConfigRequestHeader

__all__ = ["FRAME_HEADROOM_BYTES", "topic_config_answer"]

# Room in a frame for what is not the body: the length fields and the response's header (code,
# opaque, flag, totalTopicNum: about 150 bytes of JSON).
FRAME_HEADROOM_BYTES = 1024


def topic_config_answer(topics: TopicConfigManager, header: GetAllTopicConfigRequestHeader, *,
                        split_enable: bool, page_max: int, frame_max: int) -> tuple[bytes, int]:
    """The body of the answer (a TopicConfigSerializeWrapper's JSON, within ``frame_max``) and
    the table's size (``totalTopicNum``).

    Args:
        split_enable: ``enable_split_metadata``; off, every request gets the whole table.
        page_max: ``split_metadata_size``, the most topics a page holds.
        frame_max: ``max_frame_size``, the largest frame the peer reads.

    Raises:
        BrokerError: INVALID_PARAMETER for a paged request without ``topicSeq`` or with a
            ``dataVersion`` that is not a DataVersion's JSON; LIMIT_EXCEEDED for a whole table
            (or one topic) that does not fit in a frame.
    """
    body_max = frame_max - FRAME_HEADROOM_BYTES
    if not split_enable or not header.paged:
        wrapper = topics.wrapper()
        body = wrapper.to_json()
        total = len(wrapper.topic_config_table)
        if len(body) > body_max:
            how = ("ask in pages (topicSeq, maxTopicNum)" if split_enable else
                   "set enable_split_metadata = true on this broker and ask in pages")
            raise BrokerError(ResponseCode.LIMIT_EXCEEDED, (
                f"the topic table ({total} topics, {len(body)} bytes of JSON) does not fit in a "
                f"frame of max_frame_size = {frame_max} bytes: {how}"))
        return body, total
    if header.topic_seq is None:
        raise BrokerError(ResponseCode.INVALID_PARAMETER,
                          "topicSeq is required when dataVersion or maxTopicNum is given")
    version: DataVersion | None = None
    if header.data_version is not None:
        try:
            version = DataVersion.from_json(header.data_version)
        except RemoteProtocolError as e:
            raise BrokerError(ResponseCode.INVALID_PARAMETER, f"dataVersion: {e}") from None
    count = page_max if header.max_topic_num is None else min(page_max, header.max_topic_num)
    while True:
        wrapper, total = topics.page(version, header.topic_seq, count)
        body = wrapper.to_json()
        held = len(wrapper.topic_config_table)
        if len(body) <= body_max:
            return body, total
        if held <= 1:
            raise BrokerError(ResponseCode.LIMIT_EXCEEDED, (
                f"topic {next(iter(wrapper.topic_config_table), '?')!r}'s config ({len(body)} "
                f"bytes of JSON) does not fit in a frame of max_frame_size = {frame_max} bytes"))
        count = held // 2  # fewer topics: the asker moves on by what it got
