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
