"""Queue allocation strategies: every member's share computed alone must be disjoint from the
others' and together cover the queues (for any number of queues and clients)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orbitmq.client.consumer.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    AllocateStrategy,
    machine_room_of,
    md5_hash,
)
from orbitmq.errors import ClientError
from orbitmq.protocol.bodies import MessageQueue

GROUP = "g"


def queues(count: int, brokers: tuple[str, ...] = ("broker-a",), topic: str = "T") -> list[MessageQueue]:
    """``count`` queues per broker, sorted as the consumer sorts them."""
    return sorted(MessageQueue(topic, b, i) for b in brokers for i in range(count))


def client_ids(count: int) -> list[str]:
    return sorted(f"10.0.0.{i % 3}@{1000 + i}#{i:012x}" for i in range(count))


def shares(strategy: AllocateStrategy, mqs: list[MessageQueue], cids: list[str]) -> dict[str, list[MessageQueue]]:
    return {cid: strategy.allocate(GROUP, cid, mqs, cids) for cid in cids}


def assert_partition(result: dict[str, list[MessageQueue]], expected: list[MessageQueue]) -> None:
    seen: list[MessageQueue] = [mq for share in result.values() for mq in share]
    assert len(seen) == len(set(seen)), "a queue was given to two clients"
    assert set(seen) == set(expected), "some queue was given to nobody"


SYMMETRIC = [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash(),
             AllocateConsistentHash(virtual_nodes=1), AllocateByMachineRoom(["broker-a", "broker-b"])]


@pytest.mark.parametrize("strategy", SYMMETRIC, ids=lambda s: f"{s.name}")
@settings(max_examples=150, deadline=None)
@given(n_queues=st.integers(0, 40), n_clients=st.integers(1, 12), n_brokers=st.integers(1, 2))
def test_shares_are_disjoint_and_cover_every_queue(strategy: AllocateStrategy, n_queues: int,
                                                   n_clients: int, n_brokers: int) -> None:
    mqs = queues(n_queues, ("broker-a", "broker-b")[:n_brokers])
    assert_partition(shares(strategy, mqs, client_ids(n_clients)), mqs)


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle()],
                         ids=lambda s: s.name)
@settings(deadline=None)
@given(n_queues=st.integers(0, 64), n_clients=st.integers(1, 16))
def test_average_strategies_balance_within_one(strategy: AllocateStrategy, n_queues: int,
                                               n_clients: int) -> None:
    sizes = [len(s) for s in shares(strategy, queues(n_queues), client_ids(n_clients)).values()]
    assert max(sizes) - min(sizes) <= 1


def test_averagely_gives_contiguous_blocks_like_rocketmq() -> None:
    mqs, cids = queues(8), client_ids(3)
    got = [[mq.queue_id for mq in AllocateAveragely().allocate(GROUP, c, mqs, cids)] for c in cids]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7]]
    five = queues(5)
    got = [[mq.queue_id for mq in AllocateAveragely().allocate(GROUP, c, five, cids)] for c in cids]
    assert got == [[0, 1], [2, 3], [4]]
    two = queues(2)
    got = [[mq.queue_id for mq in AllocateAveragely().allocate(GROUP, c, two, cids)] for c in cids]
    assert got == [[0], [1], []]


def test_by_circle_deals_round_robin() -> None:
    mqs, cids = queues(8), client_ids(3)
    got = [[mq.queue_id for mq in AllocateAveragelyByCircle().allocate(GROUP, c, mqs, cids)]
           for c in cids]
    assert got == [[0, 3, 6], [1, 4, 7], [2, 5]]


@pytest.mark.parametrize("strategy", SYMMETRIC + [AllocateByConfig([])], ids=lambda s: s.name)
def test_a_client_the_broker_does_not_list_gets_nothing_but_by_config(strategy: AllocateStrategy) -> None:
    mine = strategy.allocate(GROUP, "unknown@1#x", queues(8), client_ids(3))
    assert mine == []


@settings(deadline=None)
@given(n_queues=st.integers(1, 30), n_clients=st.integers(1, 8), data=st.data())
def test_by_config_partitions_when_configured_as_one(n_queues: int, n_clients: int,
                                                     data: st.DataObject) -> None:
    mqs, cids = queues(n_queues), client_ids(n_clients)
    owner = data.draw(st.lists(st.integers(0, n_clients - 1), min_size=n_queues, max_size=n_queues))
    configs = {cid: AllocateByConfig([mq for mq, o in zip(mqs, owner, strict=True) if o == i])
               for i, cid in enumerate(cids)}
    result = {cid: configs[cid].allocate(GROUP, cid, mqs, cids) for cid in cids}
    assert_partition(result, mqs)


def test_by_config_leaves_out_queues_the_topic_lacks() -> None:
    strategy = AllocateByConfig([MessageQueue("T", "broker-a", 1), MessageQueue("T", "broker-z", 0)])
    assert strategy.allocate(GROUP, "c", queues(4), ["c"]) == [MessageQueue("T", "broker-a", 1)]


@settings(deadline=None)
@given(n_queues=st.integers(0, 20), n_clients=st.integers(1, 6))
def test_by_machine_room_takes_only_its_rooms(n_queues: int, n_clients: int) -> None:
    mqs = queues(n_queues, ("hz@broker-a", "hz@broker-b", "sh@broker-c"))
    result = shares(AllocateByMachineRoom(["hz"]), mqs, client_ids(n_clients))
    assert_partition(result, [mq for mq in mqs if mq.broker_name.startswith("hz@")])


def test_machine_room_names() -> None:
    assert machine_room_of("hz@broker-a") == "hz"
    assert machine_room_of("broker-a") == "broker-a"
    with pytest.raises(ClientError):
        AllocateByMachineRoom([])


def test_md5_hash_is_the_first_four_digest_bytes_like_rocketmq() -> None:
    digest = hashlib.md5(b"10.0.0.1@42#abc-0").digest()
    assert md5_hash("10.0.0.1@42#abc-0") == int.from_bytes(digest[:4], "big")
    assert md5_hash("a") == 0x0CC175B9  # md5("a") = 0cc175b9c0f1b6a8...


@settings(deadline=None)
@given(n_queues=st.integers(1, 40), n_clients=st.integers(1, 8))
def test_consistent_hash_moves_only_queues_to_a_joining_client(n_queues: int, n_clients: int) -> None:
    mqs = queues(n_queues)
    before_ids = client_ids(n_clients)
    joined = "zz-new@1#000000000000"
    strategy = AllocateConsistentHash()
    before = shares(strategy, mqs, before_ids)
    after = shares(strategy, mqs, sorted([*before_ids, joined]))
    for cid in before_ids:
        assert set(after[cid]) <= set(before[cid]), "only the newcomer may gain queues"


def test_consistent_hash_rejects_zero_virtual_nodes() -> None:
    with pytest.raises(ClientError):
        AllocateConsistentHash(virtual_nodes=0)
