"""Queue selection of the SDK: round robin, retry broker avoidance, selectors, routes."""

from __future__ import annotations

import collections

import pytest

from orbitmq.client.producer.selectors import key_hash, select_by_hash, select_random
from orbitmq.client.route import (
    derive_route_from_default,
    publish_info_from_route,
    subscribe_queues_from_route,
)
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import BrokerData, MessageQueue, QueueData, TopicRouteData
from orbitmq.protocol.message import Message, java_string_hash


def route(*brokers: tuple[str, int, int, int], masterless: tuple[str, ...] = ()) -> TopicRouteData:
    """A route with (name, read queues, write queues, perm) per broker; listed out of order on
    purpose, since clients must sort."""
    return TopicRouteData(
        queue_datas=[QueueData(name, r, w, perm) for name, r, w, perm in reversed(brokers)],
        broker_datas=[
            BrokerData("c", name, {1: f"10.0.0.{i}:2"} if name in masterless else {0: f"10.0.0.{i}:1"})
            for i, (name, *_rest) in enumerate(brokers)
        ],
    )


def test_publish_queues_are_ordered_by_broker_then_id_and_skip_unwritable_or_masterless():
    r = route(("b", 2, 2, 6), ("a", 3, 3, 6), ("ro", 2, 2, 4), ("slave-only", 2, 2, 6),
              masterless=("slave-only",))
    info = publish_info_from_route("T", r)
    assert info.queues == [MessageQueue("T", "a", 0), MessageQueue("T", "a", 1),
                           MessageQueue("T", "a", 2), MessageQueue("T", "b", 0),
                           MessageQueue("T", "b", 1)]
    assert info.ok and info.route is r


def test_read_queues_use_read_counts_and_read_permission():
    r = route(("b", 1, 4, 6), ("a", 2, 2, 2), ("c", 3, 0, 4))
    assert subscribe_queues_from_route("T", r) == [
        MessageQueue("T", "b", 0), MessageQueue("T", "c", 0), MessageQueue("T", "c", 1),
        MessageQueue("T", "c", 2)]


def test_order_topic_conf_fixes_the_layout():
    r = route(("a", 8, 8, 6))
    r.order_topic_conf = "b:2;a:1"
    info = publish_info_from_route("T", r)
    assert info.queues == [MessageQueue("T", "b", 0), MessageQueue("T", "b", 1),
                           MessageQueue("T", "a", 0)]


def test_round_robin_visits_every_queue_evenly():
    info = publish_info_from_route("T", route(("a", 4, 4, 6), ("b", 4, 4, 6)))
    counts = collections.Counter(info.select_queue() for _ in range(800))
    assert set(counts) == set(info.queues)
    assert set(counts.values()) == {100}


def test_retry_avoids_the_broker_that_just_failed():
    info = publish_info_from_route("T", route(("a", 4, 4, 6), ("b", 4, 4, 6)))
    for _ in range(50):
        assert info.select_queue(avoid="a").broker_name == "b"
        assert info.select_queue(avoid="b").broker_name == "a"


def test_several_brokers_can_be_avoided_until_none_is_left():
    info = publish_info_from_route("T", route(("a", 2, 2, 6), ("b", 2, 2, 6), ("c", 2, 2, 6)))
    assert {info.select_queue(avoid={"a", "b"}).broker_name for _ in range(20)} == {"c"}
    assert {info.select_queue(avoid={"a", "b", "c"}).broker_name for _ in range(20)} == {
        "a", "b", "c"}


def test_retry_with_a_single_broker_still_gets_a_queue():
    info = publish_info_from_route("T", route(("a", 2, 2, 6)))
    assert info.select_queue(avoid="a").broker_name == "a"


def test_no_queue_means_not_ok():
    info = publish_info_from_route("T", route(("a", 4, 4, 4)))
    assert not info.ok
    with pytest.raises(IndexError):
        info.select_queue()


def test_default_route_is_capped_at_the_producer_queue_count():
    derived = derive_route_from_default(route(("a", 8, 8, 7), ("b", 2, 2, 7)), 4)
    info = publish_info_from_route("NewTopic", derived, from_default=True)
    assert [(q.broker_name, q.queue_id) for q in info.queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1)]
    assert info.from_default


QUEUES = [MessageQueue("T", "a", i) for i in range(4)]
MSG = Message("T", b"x")


def test_select_by_hash_matches_java_and_cpp():
    # A Java String arg hashes with String.hashCode; the C++ client's int key is used as is.
    assert select_by_hash(QUEUES, MSG, "order-17") == QUEUES[abs(java_string_hash("order-17")) % 4]
    assert select_by_hash(QUEUES, MSG, 7) == QUEUES[3]
    assert select_by_hash(QUEUES, MSG, -7) == QUEUES[3]


def test_select_by_hash_is_stable_and_spreads():
    picks = {select_by_hash(QUEUES, MSG, f"order-{i}") for i in range(100)}
    assert picks == set(QUEUES)
    assert all(select_by_hash(QUEUES, MSG, "k") == select_by_hash(QUEUES, MSG, "k")
               for _ in range(10))


def test_key_hash_is_non_negative_for_any_arg():
    for arg in ("", "polygenelubricants", -(2**31), b"bytes", 3.5, ("t", 1), True):
        assert key_hash(arg) >= 0


def test_selectors_refuse_empty_queues_and_missing_key():
    with pytest.raises(ClientError):
        select_by_hash([], MSG, "k")
    with pytest.raises(ClientError):
        select_by_hash(QUEUES, MSG, None)
    with pytest.raises(ClientError):
        select_random([], MSG, None)
    assert select_random(QUEUES, MSG, None) in QUEUES
