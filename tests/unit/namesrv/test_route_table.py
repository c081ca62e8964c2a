"""The name server's pure route table: registration, routes, expiry, unregistration."""

import pytest

from orbitmq.errors import BrokerError
from orbitmq.namesrv.route_table import RouteTable, TopicQueues
from orbitmq.protocol.codes import ResponseCode

Q8 = TopicQueues(8, 8)


def register(t: RouteTable, name: str, addr: str, topics: dict, now: int, bid: int = 0):
    return t.register_broker(cluster="c1", broker_addr=addr, broker_name=name, broker_id=bid,
                             ha_server_addr="", topics=topics, now_ms=now)


def test_route_lists_every_broker_of_a_topic():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8, "U": Q8}, 0)
    register(t, "b", "h:2", {"T": TopicQueues(4, 4)}, 0)
    queues, brokers = t.topic_route("T")
    assert queues == {"a": Q8, "b": TopicQueues(4, 4)}
    assert brokers == {"a": ("c1", {0: "h:1"}), "b": ("c1", {0: "h:2"})}
    assert t.topic_route("nope") is None
    assert t.topics() == ["T", "U"]


def test_master_reregistration_replaces_its_topics():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8, "U": Q8}, 0)
    register(t, "a", "h:1", {"T": Q8}, 10)
    assert t.topic_route("U") is None and t.topic_route("T") is not None


def test_expiry_drops_silent_brokers_only():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    register(t, "b", "h:2", {"T": Q8}, 0)
    register(t, "b", "h:2", {"T": Q8}, 100_000)
    assert t.expire(now_ms=130_000, expire_ms=120_000) == ["h:1"]
    queues, brokers = t.topic_route("T")
    assert list(queues) == ["b"] and list(brokers) == ["b"]
    assert t.expire(now_ms=300_000, expire_ms=120_000) == ["h:2"]
    assert t.topic_route("T") is None
    assert t.cluster_info() == ({}, {})


def test_slave_registration_reports_master_and_survives_master_removal():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    res = register(t, "a", "h:3", {"T": Q8}, 0, bid=1)
    assert res.master_addr == "h:1"
    t.remove_broker_addr("h:1")
    queues, brokers = t.topic_route("T")
    assert brokers["a"][1] == {1: "h:3"}


def test_delete_topic():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    t.delete_topic("T")
    assert t.topic_route("T") is None


def test_a_name_and_id_held_by_a_live_address_is_refused():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    with pytest.raises(BrokerError) as refused:
        register(t, "a", "h:2", {"T": Q8, "Stolen": Q8}, 10)
    assert refused.value.code == ResponseCode.ILLEGAL_OPERATION and "h:1" in refused.value.remark
    assert t.topic_route("T")[1] == {"a": ("c1", {0: "h:1"})}
    assert t.topic_route("Stolen") is None and t.live_broker_addrs() == ["h:1"]
    register(t, "a", "h:1", {"T": Q8}, 20)  # the holder itself (a restart on its address)
    register(t, "a", "h:2", {"T": Q8}, 20, bid=1)  # another id of the same name: a slave
    assert t.topic_route("T")[1]["a"][1] == {0: "h:1", 1: "h:2"}


def test_the_name_is_free_once_its_holder_is_gone():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    t.remove_broker_addr("h:1")  # its connection closed
    register(t, "a", "h:2", {"T": Q8}, 10)
    assert t.topic_route("T")[1] == {"a": ("c1", {0: "h:2"})}
    t.unregister_broker(broker_addr="h:2", broker_name="a", broker_id=0)  # it stopped
    register(t, "a", "h:3", {"T": Q8}, 20)
    # silent past the expiry: taken over even before the scan drops it
    t.register_broker(cluster="c1", broker_addr="h:4", broker_name="a", broker_id=0,
                      ha_server_addr="", topics={"T": Q8}, now_ms=20 + 121_000, expire_ms=120_000)
    assert t.topic_route("T")[1] == {"a": ("c1", {0: "h:4"})}
    assert t.live_broker_addrs() == ["h:4"]
    with pytest.raises(BrokerError):
        t.register_broker(cluster="c1", broker_addr="h:5", broker_name="a", broker_id=0,
                          ha_server_addr="", topics={}, now_ms=20 + 122_000, expire_ms=120_000)


def test_an_address_registering_under_a_new_name_leaves_its_old_name():
    t = RouteTable()
    register(t, "a", "h:1", {"T": Q8}, 0)
    register(t, "b", "h:1", {"T": Q8}, 10)
    assert t.topic_route("T")[1] == {"b": ("c1", {0: "h:1"})}


# -- incremental registration (issue 38) -----------------------------------------------------
def test_single_topic_registration_needs_a_registered_broker_and_replaces_its_queues():
    t = RouteTable()
    assert not t.register_topic("T", {"a": Q8})  # as RocketMQ: an unknown broker, nothing
    assert t.topic_route("T") is None
    register(t, "a", "h:1", {}, 0)
    register(t, "b", "h:2", {}, 0)
    assert t.register_topic("T", {"a": Q8})
    assert t.register_topic("T", {"b": TopicQueues(4, 4)})
    assert t.register_topic("T", {"a": TopicQueues(2, 2)})
    assert t.topic_route("T")[0] == {"a": TopicQueues(2, 2), "b": TopicQueues(4, 4)}
    assert not t.register_topic("T", {"a": Q8, "ghost": Q8})  # one unknown: none recorded
    assert t.topic_route("T")[0]["a"] == TopicQueues(2, 2)
    t.unregister_topic("T", "a")
    assert t.topic_route("T")[0] == {"b": TopicQueues(4, 4)}
    t.unregister_topic("T", "b")
    assert t.topic_route("T") is None and t.topics() == []


def test_data_version_query_compares_and_refreshes_the_heartbeat():
    t = RouteTable()
    t.register_broker(cluster="c1", broker_addr="h:1", broker_name="a", broker_id=0,
                      ha_server_addr="", topics={"T": Q8}, now_ms=0, data_version=(100, 3))
    assert t.query_data_version("h:1", "a", (100, 3), now_ms=90_000) is False
    assert t.query_data_version("h:1", "a", (100, 4), now_ms=90_000) is True
    assert t.query_data_version("h:1", "other-name", (100, 3), now_ms=90_000) is True
    assert t.query_data_version("h:9", "a", (100, 3), now_ms=90_000) is True
    # the queries at 90 s kept it alive past the 120 s expiry counted from its registration
    assert t.expire(now_ms=150_000, expire_ms=120_000) == []
    assert t.topic_route("T") is not None
    assert t.expire(now_ms=211_000, expire_ms=120_000) == ["h:1"]


def test_a_version_move_is_taken_only_from_the_version_held():
    t = RouteTable()
    t.register_broker(cluster="c1", broker_addr="h:1", broker_name="a", broker_id=0,
                      ha_server_addr="", topics={}, now_ms=0, data_version=(100, 3))
    assert not t.advance_data_version("h:1", "a", (100, 2), (100, 4))  # missed one
    assert t.query_data_version("h:1", "a", (100, 3), 0) is False
    assert t.advance_data_version("h:1", "a", (100, 3), (101, 4))
    assert t.query_data_version("h:1", "a", (101, 4), 0) is False
    assert not t.advance_data_version("h:2", "a", (101, 4), (101, 5))  # unknown address


ROUTE_BYTES_PER_TOPIC_MAX = 400  # 2 broker sets; measured about 270 (names included)


def test_memory_per_topic_is_bounded_and_queue_shapes_are_shared():
    """Issue 38's target is <= 300 MB of name server RSS at 100,000 topics of 8 queues on 2
    broker sets; the table's share is measured here with tracemalloc (bytes, not time)."""
    import gc
    import tracemalloc

    n = 20_000
    gc.collect()
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        t = RouteTable()
        for name, addr in (("broker-a", "h:1"), ("broker-b", "h:2")):
            # fresh strings and objects per registration, as a parsed body gives them
            topics = {f"topic-{i:06d}-orders": TopicQueues(8, 8, 6) for i in range(n)}
            t.register_broker(cluster="c1", broker_addr=addr, broker_name=name, broker_id=0,
                              ha_server_addr="", topics=topics, now_ms=0)
            del topics
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    per_topic = held / n
    assert per_topic <= ROUTE_BYTES_PER_TOPIC_MAX, f"{per_topic:.0f} B per topic"
    a, b = t.topic_route("topic-000001-orders")[0], t.topic_route("topic-019999-orders")[0]
    assert a["broker-a"] is b["broker-b"]  # one TopicQueues for every 8/8 read-write topic
