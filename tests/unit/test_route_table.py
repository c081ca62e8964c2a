"""The name server's pure route table: registration, routes, expiry, unregistration."""

from orbitmq.namesrv.route_table import RouteTable, TopicQueues

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
