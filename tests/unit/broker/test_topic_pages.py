"""GET_ALL_TOPIC_CONFIG in pages (broker/tables/topic_pages.py) and a slave's copy through them
(SlaveSynchronize.fetch_topics): pages in name order within the frame bound, a table that moves
during a copy, an older peer's whole-table request (and its refusal past the frame bound), the
new header fields' ranges, and a master that answers the whole table (an older broker)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, cast

import pytest

from orbitmq.broker.replication.slave_sync import TOPIC_COPY_STARTS_MAX, SlaveSynchronize
from orbitmq.broker.tables.topic_config_manager import TopicConfigManager
from orbitmq.broker.tables.topic_pages import FRAME_HEADROOM_BYTES, topic_config_answer
from orbitmq.config import TEST_MIN_STORE, BrokerConfig
from orbitmq.errors import BrokerError, OrbitMQError, RemoteProtocolError
from orbitmq.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import GetAllTopicConfigRequestHeader, GetAllTopicConfigResponseHeader

FRAME = 16 * 1024 * 1024


def _topics(root: Path, count: int) -> TopicConfigManager:
    store = dataclasses.replace(TEST_MIN_STORE, store_path=str(root / "store"))
    topics = TopicConfigManager(BrokerConfig(listen_port=0, grpc_listen_port=-1, store=store,
                                             topics_max=100_000))
    topics.load()
    for i in range(count):
        topics.update(TopicConfig(f"T{i:04d}", 2, 2))
    return topics


def _page(topics: TopicConfigManager, seq: int | None, count: int | None = None,
          version: DataVersion | None = None, *, page_max: int = 10, frame: int = FRAME,
          split: bool = True) -> tuple[TopicConfigSerializeWrapper, int]:
    header = GetAllTopicConfigRequestHeader(
        seq, None if version is None else version.to_json().decode(), count)
    body, total = topic_config_answer(topics, header, split_enable=split, page_max=page_max,
                                      frame_max=frame)
    assert len(body) <= frame - FRAME_HEADROOM_BYTES
    return TopicConfigSerializeWrapper.from_json(body), total


def test_pages_go_in_name_order_and_hold_at_most_the_smaller_bound(tmp_path: Path) -> None:
    topics = _topics(tmp_path, 25)
    names = sorted(topics.table)
    first, total = _page(topics, 0, 100, page_max=7)
    assert total == len(names) == 26  # TBW102 too
    assert list(first.topic_config_table) == names[:7]  # split_metadata_size wins over 100
    version = first.data_version
    second, _ = _page(topics, 7, 3, version, page_max=7)  # maxTopicNum wins over 7
    assert list(second.topic_config_table) == names[7:10]
    last, _ = _page(topics, 24, 7, version, page_max=7)
    assert list(last.topic_config_table) == names[24:]
    beyond, total = _page(topics, 26, 7, version)
    assert beyond.topic_config_table == {} and total == 26
    assert second.topic_config_table["T0008"] == topics.get("T0008")


def test_a_table_that_moved_is_answered_from_its_first_topic(tmp_path: Path) -> None:
    topics = _topics(tmp_path, 12)
    first, _ = _page(topics, 0, 5)
    topics.update(TopicConfig("A-new", 1, 1))  # a name before every other, and a new version
    moved, _ = _page(topics, 5, 5, first.data_version)
    assert moved.data_version != first.data_version
    assert list(moved.topic_config_table)[:2] == ["A-new", "T0000"]
    # without a dataVersion the asker has none yet: the first topics as well
    assert list(_page(topics, 5, 5)[0].topic_config_table)[0] == "A-new"
    # a deleted name leaves the order too
    topics.delete("A-new")
    again, total = _page(topics, 0, 100)
    assert "A-new" not in again.topic_config_table and total == 13


def test_a_page_past_the_frame_bound_holds_fewer_topics(tmp_path: Path) -> None:
    topics = _topics(tmp_path, 60)
    whole = len(topics.wrapper().to_json())
    frame = FRAME_HEADROOM_BYTES + whole // 5  # about a fifth of the table fits
    seen: list[str] = []
    version = None
    while True:
        page, total = _page(topics, len(seen), 1000, version, page_max=1000, frame=frame)
        version = page.data_version
        assert 0 < len(page.topic_config_table) < 20
        seen += page.topic_config_table
        if len(seen) >= total:
            break
    assert seen == sorted(topics.table)


def test_an_older_peers_request_gets_the_whole_table_or_a_clear_refusal(tmp_path: Path) -> None:
    topics = _topics(tmp_path, 40)
    body, total = topic_config_answer(topics, GetAllTopicConfigRequestHeader(),
                                      split_enable=True, page_max=5, frame_max=FRAME)
    assert total == 41
    assert TopicConfigSerializeWrapper.from_json(body).topic_config_table == topics.table
    small = FRAME_HEADROOM_BYTES + len(body) - 1
    with pytest.raises(BrokerError) as refused:
        topic_config_answer(topics, GetAllTopicConfigRequestHeader(), split_enable=True,
                            page_max=5, frame_max=small)
    assert refused.value.code == ResponseCode.LIMIT_EXCEEDED
    assert "41 topics" in refused.value.remark and "ask in pages" in refused.value.remark
    # enable_split_metadata off: every request is answered whole (RocketMQ's), within the bound
    page, total = _page(topics, 3, 2, split=False)
    assert len(page.topic_config_table) == total == 41
    with pytest.raises(BrokerError, match="enable_split_metadata = true") as refused:
        _page(topics, 0, 2, split=False, frame=small)
    assert refused.value.code == ResponseCode.LIMIT_EXCEEDED


def test_the_new_fields_are_range_checked(tmp_path: Path) -> None:
    topics = _topics(tmp_path, 3)
    for fields, name in (({"topicSeq": "-1"}, "topicSeq"), ({"topicSeq": "0", "maxTopicNum": "0"},
                                                             "maxTopicNum"),
                         ({"topicSeq": "2147483648"}, "topicSeq"),
                         ({"topicSeq": "x"}, "topicSeq")):
        with pytest.raises(RemoteProtocolError, match=name):
            GetAllTopicConfigRequestHeader.from_ext_fields(fields)
    for header, what in ((GetAllTopicConfigRequestHeader(None, None, 5), "topicSeq is required"),
                         (GetAllTopicConfigRequestHeader(0, "{not json", 5), "dataVersion"),
                         (GetAllTopicConfigRequestHeader(0, '{"counter": "x"}', 5),
                          "dataVersion")):
        with pytest.raises(BrokerError, match=what) as refused:
            topic_config_answer(topics, header, split_enable=True, page_max=5, frame_max=FRAME)
        assert refused.value.code == ResponseCode.INVALID_PARAMETER
    assert not GetAllTopicConfigRequestHeader.from_ext_fields({}).paged
    assert GetAllTopicConfigResponseHeader.from_ext_fields({}).total_topic_num is None


class _Master:
    """A master's GET_ALL_TOPIC_CONFIG answers from a table, counting the requests; ``before``
    runs before each answer (a change made during a copy)."""

    def __init__(self, topics: TopicConfigManager, page_max: int, *, older: bool = False) -> None:
        self.topics, self.page_max, self.older = topics, page_max, older
        self.requests: list[dict[str, str]] = []
        self.before: Any = None
        self.refuse = False

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        assert cmd.code == RequestCode.GET_ALL_TOPIC_CONFIG and addr == "master:10911"
        self.requests.append(dict(cmd.ext_fields))
        if self.before is not None:
            self.before(len(self.requests))
        if self.refuse:
            return cmd.response(ResponseCode.LIMIT_EXCEEDED, "refused for the test")
        if self.older:  # a broker before pages: the whole table, no totalTopicNum
            return cmd.response(ResponseCode.SUCCESS, body=self.topics.wrapper().to_json())
        try:
            body, total = topic_config_answer(
                self.topics, GetAllTopicConfigRequestHeader.from_ext_fields(cmd.ext_fields),
                split_enable=True, page_max=self.page_max, frame_max=FRAME)
        except BrokerError as e:
            return cmd.response(e.code, e.remark)
        return cmd.response(ResponseCode.SUCCESS, body=body, ext_fields=(
            GetAllTopicConfigResponseHeader(total).to_ext_fields()))


def _slave(tmp_path: Path, master: _Master, page_max: int) -> SlaveSynchronize:
    none = cast(Any, None)  # offsets, delay offsets and groups are not copied here
    return SlaveSynchronize(master.invoke, lambda: "master:10911", 1000,
                            _topics(tmp_path / "slave", 0), none, none, none,
                            topic_page_max=page_max)


def test_a_slave_copies_a_table_in_pages_then_only_checks_the_version(tmp_path: Path) -> None:
    master = _Master(_topics(tmp_path / "master", 30), page_max=4)
    slave = _slave(tmp_path, master, page_max=6)
    wrapper = asyncio.run(slave.fetch_topics("master:10911"))
    assert wrapper is not None and wrapper.topic_config_table == master.topics.table
    assert wrapper.data_version == master.topics.data_version
    assert len(master.requests) == 8  # 31 topics, 4 a page (the master's bound is the smaller)
    assert [r["topicSeq"] for r in master.requests] == [str(4 * i) for i in range(8)]
    assert {r["maxTopicNum"] for r in master.requests} == {"6"}
    assert "dataVersion" not in master.requests[0] and "dataVersion" in master.requests[1]
    slave.topics.replace_from_master(wrapper)
    master.requests.clear()
    assert asyncio.run(slave.fetch_topics("master:10911")) is None  # the same version: one page
    assert len(master.requests) == 1


def test_a_copy_starts_again_when_the_table_moves_and_gives_up_if_it_never_rests(
        tmp_path: Path) -> None:
    master = _Master(_topics(tmp_path / "master", 10), page_max=3)
    slave = _slave(tmp_path, master, page_max=3)
    master.before = lambda n: master.topics.update(TopicConfig("Added", 1, 1)) if n == 2 else None
    wrapper = asyncio.run(slave.fetch_topics("master:10911"))
    assert wrapper is not None and "Added" in wrapper.topic_config_table
    assert wrapper.topic_config_table == master.topics.table
    assert wrapper.data_version == master.topics.data_version

    master.before = lambda n: master.topics.update(TopicConfig(f"Moving{n}", 1, 1))
    with pytest.raises(OrbitMQError, match=f"changed during {TOPIC_COPY_STARTS_MAX} copies"):
        asyncio.run(slave.fetch_topics("master:10911"))


def test_a_slave_takes_an_older_masters_whole_table_and_reports_a_refusal(
        tmp_path: Path) -> None:
    master = _Master(_topics(tmp_path / "master", 5), page_max=2, older=True)
    slave = _slave(tmp_path, master, page_max=2)
    wrapper = asyncio.run(slave.fetch_topics("master:10911"))
    assert wrapper is not None and wrapper.topic_config_table == master.topics.table
    assert len(master.requests) == 1
    master.older = False
    master.refuse = True
    with pytest.raises(OrbitMQError, match="code 9002: refused for the test"):
        asyncio.run(slave.fetch_topics("master:10911"))
    master.refuse = False
    master.page_max = 0  # a master whose pages hold nothing: no endless loop
    with pytest.raises(OrbitMQError, match="brought no new topic"):
        asyncio.run(slave.fetch_topics("master:10911"))


def test_a_rocketmq_5_admin_clients_pages_are_answered(tmp_path: Path) -> None:
    """RocketMQ 5's MQClientAPIImpl.getAllTopicConfig sends ``dataVersion`` empty on its first
    page and Java's DataVersion JSON (with ``stateVersion``) after it."""
    topics = _topics(tmp_path, 6)
    first = GetAllTopicConfigRequestHeader.from_ext_fields(
        {"topicSeq": "0", "maxTopicNum": "4", "dataVersion": ""})
    assert first.paged and first.data_version is None
    body, total = topic_config_answer(topics, first, split_enable=True, page_max=2000,
                                      frame_max=FRAME)
    page = TopicConfigSerializeWrapper.from_json(body)
    assert len(page.topic_config_table) == 4 and total == 7
    v = page.data_version
    java = (f'{{"counter":{v.counter},"stateVersion":0,"timestamp":{v.timestamp}}}')
    body, _ = topic_config_answer(topics, GetAllTopicConfigRequestHeader.from_ext_fields(
        {"topicSeq": "4", "maxTopicNum": "4", "dataVersion": java}), split_enable=True,
        page_max=2000, frame_max=FRAME)
    assert list(TopicConfigSerializeWrapper.from_json(body).topic_config_table) == sorted(
        topics.table)[4:]
