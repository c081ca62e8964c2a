"""The official RocketMQ C++ client (PyPI `rocketmq` 0.4.4) against a real `orbitmq standalone`.

Every C++ call runs in a child process of .venv-compat (tests/compat/cpp_driver.py, one scenario per
process); see conftest.py. What each test checks is what a RocketMQ 4.x broker gives this client:
auto-creation of a new topic through TBW102 with the queue count the client asks for, the queue its
hashing selector picks, batches split into messages of their own, and pulls that return exactly the
messages stored (bodies, keys, tags, properties, ids, offsets) and that end.
"""

from __future__ import annotations

import base64
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from compat_support import (
    CppClient,
    OurClient,
    Outgoing,
    RawClient,
    Received,
    RunningDriver,
    Servers,
    unique,
)

pytestmark = pytest.mark.compat

UNIQ_KEY = re.compile(r"^[0-9A-F]{32}$")
CLIENT_QUEUE_NUMS = 4  # the C++ client's defaultTopicQueueNums: a new topic gets this many queues
ROUTE_WAIT_S = 5.0
UTF8_BODY = "héllo wörld ✓ 消息"


# ----------------------------------------------------------------------------- helpers
def spec(topic: str, i: int, *, tags: str | None = "TagA", prefix: str = "msg",
         props: dict[str, str] | None = None) -> dict[str, Any]:
    """A message for the driver: body, tag, two keys and two properties of its own."""
    return {"topic": topic, "body": f"{prefix}-{i} {UTF8_BODY}", "tags": tags,
            "keys": f"{prefix}-key-{i} order-{i % 3}",
            "properties": props if props is not None else {"color": f"c{i}", "note": f"café {i}"}}


def sent_ok(result: dict[str, Any], expected: int) -> list[dict[str, Any]]:
    """The per-message results of a send scenario, all of them successful."""
    assert "start" not in result, f"the C++ producer did not start: {result['start']}"
    results = result["results"]
    assert len(results) == expected, results
    failed = [r for r in results if "error" in r]
    assert not failed, f"C++ sends failed: {failed}"
    return results


def pulled(result: dict[str, Any]) -> list[Received]:
    """The messages of a pull scenario (which must have run without error)."""
    assert "start" not in result, f"the C++ pull consumer did not start: {result['start']}"
    assert "error" not in result, (
        f"C++ pull failed after {len(result.get('messages', []))} messages: "
        f"{result['error']}: {result['message']}")
    return [Received.from_cpp(m) for m in result["messages"]]


def cpp_pull(cpp: CppClient, topic: str, expression: str = "*", **extra: Any) -> list[Received]:
    props = ["color", "note", "origin"]
    return pulled(cpp.run("pull", group=unique("CompatPull"), topic=topic, expression=expression,
                          properties=props, **extra))


def assert_matches(got: Received, want: dict[str, Any]) -> None:
    """The received message carries exactly what the spec sent."""
    assert got.topic == want["topic"]
    assert got.body == want["body"].encode(), (got.body, want["body"])
    assert got.tags == want["tags"]
    assert got.keys == want["keys"]
    for name, value in want["properties"].items():
        assert got.properties.get(name) == value, (name, got.properties)
    assert UNIQ_KEY.match(got.msg_id), got.msg_id
    assert got.properties.get("UNIQ_KEY") == got.msg_id


def by_body(messages: list[Received]) -> dict[bytes, Received]:
    out = {m.body: m for m in messages}
    assert len(out) == len(messages), f"duplicate messages: {[m.body for m in messages]}"
    return out


def assert_exactly(got: list[Received], want: list[dict[str, Any]]) -> None:
    """`got` holds each wanted message once and nothing else; offsets rise within each queue."""
    received = by_body(got)
    assert sorted(received) == sorted(w["body"].encode() for w in want)
    for w in want:
        assert_matches(received[w["body"].encode()], w)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        per_queue[m.queue_id].append(m.queue_offset)
    for queue_id, offsets in per_queue.items():
        assert offsets == sorted(offsets), f"queue {queue_id} out of order: {offsets}"


def wait_route(raw: RawClient, topic: str) -> Any:
    """A topic the broker just created reaches the name server when it re-registers (at once)."""
    deadline = time.monotonic() + ROUTE_WAIT_S
    while (route := raw.route(topic)) is None:
        assert time.monotonic() < deadline, (
            f"GET_ROUTEINFO_BY_TOPIC {topic}: still TOPIC_NOT_EXIST {ROUTE_WAIT_S} s after the "
            "broker auto-created it (the broker must register the new topic with the name server)")
        time.sleep(0.05)
    return route


def wait_stored(raw: RawClient, topic: str, count: int) -> Any:
    """Waits until the topic's route is served and its queues hold ``count`` messages in all.

    A sent message becomes readable once the broker has dispatched it to its ConsumeQueue, a few
    milliseconds after the send's answer (as in RocketMQ); a pull that comes sooner rightly says
    NO_NEW_MSG, and the C++ wrapper's pull loop stops there. Returns the route."""
    route = wait_route(raw, topic)
    deadline = time.monotonic() + ROUTE_WAIT_S
    while sum(stored := raw.max_offsets(topic)) < count:
        assert time.monotonic() < deadline, f"{topic}: max offsets {stored}, {count} messages sent"
        time.sleep(0.01)
    assert sum(stored) == count, f"{topic}: max offsets {stored}, only {count} messages sent"
    return route


# ----------------------------------------------------------------------------- producer
def test_send_sync_to_new_topic_creates_it_through_tbw102(cpp: CppClient, raw: RawClient) -> None:
    topic = unique("CompatNew")
    assert raw.route(topic) is None
    want = [spec(topic, i) for i in range(6)]
    results = sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=want), 6)

    assert all(r["status"] == "OK" for r in results), results
    ids = [r["msg_id"] for r in results]
    assert all(UNIQ_KEY.match(i) for i in ids) and len(set(ids)) == 6, ids
    route = wait_stored(raw, topic, 6)
    assert sum(q.write_queue_nums for q in route.queue_datas) == CLIENT_QUEUE_NUMS, route
    assert sum(q.read_queue_nums for q in route.queue_datas) == CLIENT_QUEUE_NUMS, route

    got = cpp_pull(cpp, topic)
    assert_exactly(got, want)
    offsets = {m.msg_id: m.queue_offset for m in got}
    assert offsets == {r["msg_id"]: r["offset"] for r in results}


def test_send_orderly_hashing_selector_keeps_a_key_in_one_queue(cpp: CppClient,
                                                                raw: RawClient) -> None:
    topic = unique("CompatOrder")
    args = [7, 2, 13, 4]  # 7 and 3 collide on queue 3 (mod 4): the queue holds both, each in order
    want = []
    for round_ in range(5):
        for arg in args:
            item = spec(topic, len(want), prefix=f"order{arg}-{round_}")
            item["arg"] = arg
            want.append(item)
    results = sent_ok(cpp.run("send_orderly", group=unique("CompatProducer"), messages=want),
                      len(want))
    assert all(r["status"] == "OK" for r in results), results
    for item, r in zip(want, results, strict=True):
        assert r["selected_queues"][-1] == item["arg"] % CLIENT_QUEUE_NUMS, (item["arg"], r)

    wait_stored(raw, topic, len(want))
    assert raw.write_queue_count(topic) == CLIENT_QUEUE_NUMS
    got = cpp_pull(cpp, topic)
    assert_exactly(got, want)
    received = by_body(got)
    for arg in args:
        mine = [received[w["body"].encode()] for w in want if w["arg"] == arg]
        assert {m.queue_id for m in mine} == {arg % CLIENT_QUEUE_NUMS}, (arg, mine)
        offsets = [m.queue_offset for m in mine]
        assert offsets == sorted(offsets), f"key {arg}: not in send order: {offsets}"
    for item, r in zip(want, results, strict=True):
        assert received[item["body"].encode()].queue_offset == r["offset"]


def test_send_batch_stores_each_message_of_the_batch(cpp: CppClient, raw: RawClient) -> None:
    topic = unique("CompatBatch")
    batches = [[spec(topic, i, prefix="b1", tags=f"Tag{i}") for i in range(3)],
               [spec(topic, i, prefix="b2") for i in range(2)]]
    results = sent_ok(cpp.run("send_batch", group=unique("CompatProducer"), batches=batches), 2)
    assert all(r["status"] == "OK" for r in results), results

    wait_stored(raw, topic, 5)
    got = cpp_pull(cpp, topic)
    assert_exactly(got, [m for b in batches for m in b])
    received = by_body(got)
    assert len({m.msg_id for m in got}) == 5, "every message of a batch has a UNIQ_KEY of its own"
    for batch, r in zip(batches, results, strict=True):
        mine = [received[m["body"].encode()] for m in batch]
        assert len({m.queue_id for m in mine}) == 1, f"a batch goes to one queue: {mine}"
        offsets = [m.queue_offset for m in mine]
        assert offsets == list(range(r["offset"], r["offset"] + len(batch))), (offsets, r)


def test_send_oneway(cpp: CppClient, raw: RawClient) -> None:
    topic = unique("CompatOneway")
    fence = spec(topic, 99, prefix="fence")
    want = [spec(topic, i, prefix="oneway") for i in range(3)]
    result = cpp.run("send_oneway", group=unique("CompatProducer"), messages=want, fence=fence)
    assert all(r["status"] == "SENT" for r in sent_ok(result, 3))
    assert result["fence"].get("status") == "OK", f"the send_sync after the oneway sends: {result}"

    wait_stored(raw, topic, 4)
    assert_exactly(cpp_pull(cpp, topic), [*want, fence])


def test_send_async(cpp: CppClient, raw: RawClient) -> None:
    topic = unique("CompatAsync")
    want = [spec(topic, i, prefix="async") for i in range(5)]
    results = sent_ok(cpp.run("send_async", group=unique("CompatProducer"), messages=want), 5)
    assert all(r["status"] == "OK" and UNIQ_KEY.match(r["msg_id"]) for r in results), results

    wait_stored(raw, topic, 5)
    got = cpp_pull(cpp, topic)
    assert_exactly(got, want)
    assert {m.msg_id: m.queue_offset for m in got} == {r["msg_id"]: r["offset"] for r in results}


def test_large_body_is_compressed_and_read_back(cpp: CppClient, ours: OurClient) -> None:
    """Over 4 KiB the C++ client deflates the body (sysFlag 1); both clients must read it inflated."""
    topic = unique("CompatLarge")
    big = spec(topic, 0, prefix="large")
    big["body"] = "".join(f"large body line {n:05d} " for n in range(1500))  # ~30 KiB, compressible
    small = spec(topic, 1, prefix="small")
    sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=[big, small]), 2)

    route = wait_stored(ours.raw, topic, 2)
    broker = route.broker_datas[0].broker_addrs[0]
    stored = {m.properties["KEYS"]: m for q in range(CLIENT_QUEUE_NUMS)
              for m in ours.raw.stored(broker, topic, q)}
    assert stored[big["keys"]].sys_flag & 1, "the C++ client should have sent the body deflated"
    assert len(stored[big["keys"]].body) < len(big["body"]) // 4
    assert not stored[small["keys"]].sys_flag & 1
    assert_exactly(cpp_pull(cpp, topic), [big, small])
    assert_exactly(ours.pull_all(unique("CompatSdkPull"), topic), [big, small])


def test_oversized_body_is_refused_with_message_illegal(cpp: CppClient, raw: RawClient) -> None:
    """A body over the broker's 4 MiB (incompressible, the client's own limit raised) is answered
    MESSAGE_ILLEGAL (13) with a remark, which the C++ client reports; nothing is stored and the
    same connection goes on serving."""
    topic = unique("CompatOversize")
    big = {"topic": topic, "random_body_size": 5 * 1024 * 1024, "seed": 7, "tags": "Big",
           "keys": "oversize"}
    small = spec(topic, 0, prefix="after-oversize")
    result = cpp.run("send_sync", group=unique("CompatProducer"), messages=[big, small],
                     max_message_size=8 * 1024 * 1024)
    first, second = result["results"]
    assert "error" in first, f"a 5 MiB body was accepted: {first}"
    log = cpp.log_text()
    assert re.search(r"processSendResponse error remark:.+, error code:13", log), (
        "the client did not log a MESSAGE_ILLEGAL answer with a remark:\n" + cpp.log_tail())
    assert second.get("status") == "OK", second
    wait_stored(raw, topic, 1)
    assert_exactly(cpp_pull(cpp, topic), [small])


# ----------------------------------------------------------------------------- pull consumer
@pytest.fixture(scope="module")
def tagged_topic(module_cpp: CppClient, servers: Servers) -> tuple[str, list[dict[str, Any]]]:
    """A topic with messages tagged TagA, TagB, TagC and untagged, sent once by the C++ client."""
    topic = unique("CompatTags")
    tags = ["TagA", "TagB", "TagC", None, "TagA", "TagB", "TagA", "TagC", None, "TagB"]
    want = [spec(topic, i, tags=tag, prefix="tagged") for i, tag in enumerate(tags)]
    sent_ok(module_cpp.run("send_sync", group=unique("CompatProducer"), messages=want), len(want))
    with RawClient(servers.namesrv) as raw:
        wait_stored(raw, topic, len(want))
    return topic, want


@pytest.mark.parametrize("expression, tags", [
    ("*", {"TagA", "TagB", "TagC", None}),
    ("TagA || TagB", {"TagA", "TagB"}),
    ("TagC", {"TagC"}),
    ("TagZ", set()),  # matches nothing: the wrapper's pull loop must still end
])
def test_pull_consumer_with_expression(cpp: CppClient, tagged_topic: tuple[str, list[dict[str, Any]]],
                                       expression: str, tags: set[str | None]) -> None:
    topic, sent = tagged_topic
    assert_exactly(cpp_pull(cpp, topic, expression), [m for m in sent if m["tags"] in tags])


def test_pull_statuses_and_offsets(cpp: CppClient, tagged_topic: tuple[str, list[dict[str, Any]]]) -> None:
    """The C API's view of each answer: FOUND with offsets, then NO_NEW_MSG at the end of a queue;
    an offset past the end is OFFSET_ILLEGAL with a usable next offset; a filter that matches
    nothing moves the offset on."""
    topic, sent = tagged_topic
    group = unique("CompatPullRaw")
    result = cpp.run("pull_raw", group=group, topic=topic)
    assert "start" not in result and "fetch_queues" not in result, result
    assert sorted(q["queue_id"] for q in result["queues"]) == list(range(CLIENT_QUEUE_NUMS))
    total = 0
    for queue in result["pulled"]:
        pulls = queue["pulls"]
        count = len(queue["messages"])
        total += count
        assert pulls[-1]["status"] == "NO_NEW_MSG", pulls
        assert pulls[-1]["offset"] == count and pulls[-1]["next_begin_offset"] == count, pulls
        assert all(p["status"] == "FOUND" for p in pulls[:-1]), pulls
        assert all(p["min_offset"] == 0 and p["max_offset"] == count for p in pulls), pulls
    assert total == len(sent)

    busy = max(result["pulled"], key=lambda q: len(q["messages"]))
    count = len(busy["messages"])
    beyond = cpp.run("pull_raw", group=group, topic=topic, queue_ids=[busy["queue_id"]],
                     offset=count + 100, once=True)
    answer = beyond["pulled"][0]["pulls"][0]
    assert answer["status"] == "OFFSET_ILLEGAL", answer
    assert 0 <= answer["next_begin_offset"] <= count, answer

    nothing = cpp.run("pull_raw", group=group, topic=topic, queue_ids=[busy["queue_id"]],
                      expression="TagZ")
    pulls = nothing["pulled"][0]["pulls"]
    assert nothing["pulled"][0]["messages"] == []
    assert pulls[-1]["status"] == "NO_NEW_MSG" and pulls[-1]["next_begin_offset"] == count, pulls
    assert all(p["status"] in ("NO_MATCHED_MSG", "NO_NEW_MSG") for p in pulls), pulls


# ----------------------------------------------------------------------------- our SDK and the C++ client
def test_messages_from_our_sdk_read_by_cpp(cpp: CppClient, ours: OurClient) -> None:
    topic = unique("CompatFromSdk")
    outgoing = [Outgoing(topic, f"sdk-{i} {UTF8_BODY}".encode(), tags=f"Tag{i % 2}",
                         keys=[f"sdk-key-{i}", "shared"], properties={"origin": "sdk", "color": f"c{i}"})
                for i in range(6)]
    # Over 4 KiB the SDK deflates the body (sysFlag 1): the C++ client must inflate it.
    outgoing[3].body = "".join(f"sdk large body {n:05d} " for n in range(1000)).encode()
    sent = ours.send(unique("CompatSdkProducer"), outgoing)

    route = wait_stored(ours.raw, topic, 6)
    broker = route.broker_datas[0].broker_addrs[0]
    stored = [m for q in range(CLIENT_QUEUE_NUMS) for m in ours.raw.stored(broker, topic, q)]
    assert [m.sys_flag & 1 for m in stored if m.properties["KEYS"].startswith("sdk-key-3 ")] == [1]
    got = cpp_pull(cpp, topic)
    want = [{"topic": topic, "body": o.body.decode(), "tags": o.tags, "keys": " ".join(o.keys),
             "properties": o.properties} for o in outgoing]
    assert_exactly(got, want)
    received = by_body(got)
    for o, s in zip(outgoing, sent, strict=True):
        m = received[o.body]
        assert (m.msg_id, m.queue_id, m.queue_offset) == (s.msg_id, s.queue_id, s.queue_offset), (
            f"our SDK said {s}, the C++ client read {m}")

    only_tag1 = cpp_pull(cpp, topic, "Tag1")
    assert_exactly(only_tag1, [w for w in want if w["tags"] == "Tag1"])


def test_messages_from_cpp_read_by_our_sdk(cpp: CppClient, ours: OurClient) -> None:
    topic = unique("CompatToSdk")
    singles = [spec(topic, i, prefix="cpp", tags=f"Tag{i % 2}") for i in range(4)]
    results = sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=singles), 4)
    batch = [spec(topic, i, prefix="cppbatch") for i in range(3)]
    sent_ok(cpp.run("send_batch", group=unique("CompatProducer"), batches=[batch]), 1)

    wait_stored(ours.raw, topic, 7)
    got = ours.pull_all(unique("CompatSdkPull"), topic)
    assert_exactly(got, singles + batch)
    received = by_body(got)
    for item, r in zip(singles, results, strict=True):
        m = received[item["body"].encode()]
        assert (m.msg_id, m.queue_offset) == (r["msg_id"], r["offset"]), (m, r)
        assert m.keys == item["keys"] and m.properties["WAIT"] == "true"

    assert_exactly(ours.pull_all(unique("CompatSdkPull"), topic, "Tag1"),
                   [s for s in singles if s["tags"] == "Tag1"])


# ----------------------------------------------------------------------------- push consumer
def test_push_consumer_round_trip(cpp: CppClient, ours: OurClient, raw: RawClient,
                                  servers: Servers) -> None:
    """Messages stored before a new group starts (it reads from 0 while the queue's first message
    is there) and messages sent while it long-polls, each delivered once; its offsets are committed."""
    topic = unique("CompatPush")
    group = unique("CompatPushGroup")
    before = [spec(topic, i, prefix="before") for i in range(4)]
    sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=before), 4)
    wait_stored(raw, topic, 4)
    during = [Outgoing(topic, f"during-{i} {UTF8_BODY}".encode(), tags="TagA", keys=[f"d{i}"],
                       properties={"origin": "sdk"}) for i in range(4)]

    push = cpp.start("push", group=group, topic=topic, expression="*", expect=8, wait_s=30,
                     properties=["color", "note", "origin"])
    push.wait_event("started")
    ours.send(unique("CompatSdkProducer"), during)
    result = push.result()

    assert "start" not in result, result
    got = [Received.from_cpp(m) for m in result["messages"]]
    want = before + [{"topic": topic, "body": o.body.decode(), "tags": o.tags, "keys": o.keys[0],
                      "properties": o.properties} for o in during]
    assert result["complete"], f"received {len(got)} of 8 in {result['waited_s']} s: {got}"
    received = by_body(got)
    assert sorted(received) == sorted(w["body"].encode() for w in want)
    for w in want:
        assert_matches(received[w["body"].encode()], w)

    # UNREGISTER_CLIENT at shutdown (producerGroup "" in it) removed the consumer from its group.
    assert raw.consumer_ids(servers.broker, group) == []

    # The consumer commits its offsets (in its pulls and at shutdown): 8 messages in all.
    deadline = time.monotonic() + 10
    while True:
        committed = [raw.consumer_offset(servers.broker, group, topic, q)
                     for q in range(CLIENT_QUEUE_NUMS)]
        if sum(c or 0 for c in committed) == 8 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    per_queue: dict[int, int] = defaultdict(int)
    for m in got:
        per_queue[m.queue_id] += 1
    assert [c or 0 for c in committed] == [per_queue[q] for q in range(CLIENT_QUEUE_NUMS)], (
        f"QUERY_CONSUMER_OFFSET per queue {committed}, consumed per queue {dict(per_queue)}")


def test_push_consumer_with_tag_expression(cpp: CppClient, raw: RawClient) -> None:
    """The C++ heartbeat names tags with codeSet [0] (it computes no hash codes): the broker must
    filter on the tags themselves. One queue and one consume thread, so when the last TagA message
    arrives every earlier one has been delivered or filtered."""
    topic = unique("CompatPushTag")
    group = unique("CompatPushGroup")
    items = []
    for i, tag in enumerate(["TagB", "TagA", "TagC", "TagA", "TagB", "TagB", "TagA"]):
        item = spec(topic, i, tags=tag, prefix="pushtag")
        item["arg"] = 1
        items.append(item)
    sent_ok(cpp.run("send_orderly", group=unique("CompatProducer"), messages=items[:3]), 3)
    wait_stored(raw, topic, 3)

    push = cpp.start("push", group=group, topic=topic, expression="TagA", expect=3, wait_s=30,
                     thread_count=1, properties=["color", "note"])
    push.wait_event("started")
    sent_ok(cpp.run("send_orderly", group=unique("CompatProducer"), messages=items[3:]), 4)
    result = push.result()

    assert "start" not in result, result
    got = [Received.from_cpp(m) for m in result["messages"]]
    assert result["complete"], f"received {len(got)} of 3 in {result['waited_s']} s: {got}"
    want = [m for m in items if m["tags"] == "TagA"]
    assert [m.body for m in got] == [w["body"].encode() for w in want]
    for m, w in zip(got, want, strict=True):
        assert_matches(m, w)


def test_two_push_consumers_of_one_group_share_the_queues(cpp: CppClient, raw: RawClient,
                                                          servers: Servers, tmp_path: Path) -> None:
    """GET_CONSUMER_LIST_BY_GROUP names both C++ consumers and NOTIFY_CONSUMER_IDS_CHANGED makes the
    first one give up half of the queues. While the two rebalance, RocketMQ may deliver a message
    twice, so waves of messages are sent until one wave is split between the consumers with no
    queue and no message on both (a broker that hid one consumer from the other would never get
    there); every message of every wave must arrive."""
    topic = unique("CompatPushPair")
    group = unique("CompatPushGroup")
    seed = spec(topic, 0, prefix="seed")
    sent_ok(cpp.run("send_sync", group=unique("CompatProducer"), messages=[seed]), 1)
    wait_stored(raw, topic, 1)
    stop = tmp_path / "stop"
    common = {"group": group, "topic": topic, "wait_s": 50, "stop_file": str(stop)}
    first = cpp.start("push", timeout=70, **common)
    first.wait_event("received")  # the seed: the first consumer holds the queues and pulls
    second = cpp.start("push", timeout=70, **common)
    second.wait_event("started")
    deadline = time.monotonic() + 10
    while len(raw.consumer_ids(servers.broker, group)) < 2:
        assert time.monotonic() < deadline, raw.consumer_ids(servers.broker, group)
        time.sleep(0.05)
    sent_bodies = {seed["body"].encode()}
    waves = []
    for wave in range(5):
        items = [{**spec(topic, i, prefix=f"wave{wave}"), "arg": i} for i in range(8)]
        sent_ok(cpp.run("send_orderly", group=unique("CompatProducer"), messages=items), 8)
        bodies = {i["body"].encode() for i in items}
        sent_bodies |= bodies
        split = wait_for_wave(first, second, bodies)
        waves.append(split)
        queues = [{q for q, _ in part} for part in split]
        all_once = sum(len(part) for part in split) == len(bodies)
        if all_once and all(split) and not queues[0] & queues[1]:
            break
    else:
        raise AssertionError(f"no wave split cleanly between the two consumers: {waves}")
    stop.touch()
    results = [first.result(), second.result()]
    delivered = {base64.b64decode(m["body_b64"]) for r in results for m in r["messages"]}
    assert delivered == sent_bodies, "every message delivered at least once"


def wait_for_wave(first: RunningDriver, second: RunningDriver, bodies: set[bytes],
                  timeout: float = 20.0) -> list[list[tuple[int, bytes]]]:
    """What each consumer received of ``bodies`` once both together have all of them."""
    deadline = time.monotonic() + timeout
    while True:
        split = [[(q, b) for q, b in d.received_so_far() if b in bodies] for d in (first, second)]
        if {b for part in split for _, b in part} == bodies:
            return split
        assert time.monotonic() < deadline, f"a wave was not delivered within {timeout} s: {split}"
        time.sleep(0.05)
