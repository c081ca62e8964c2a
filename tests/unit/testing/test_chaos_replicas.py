"""The final logs' comparison of a chaos run (orbitmq.testing.chaos.replicas) on commit logs
written by hand in the stored format: equal replicas are clean, a slave behind is behind (and
says how many of its missing messages were acknowledged), and a replica holding another message
at a position, or a tail its master does not have, diverges; and on a real store's files."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from orbitmq.config import TEST_MIN_STORE
from orbitmq.protocol import stored
from orbitmq.protocol.message import PropertyKey
from orbitmq.store import MessageInner, MessageStore
from orbitmq.testing.chaos.replicas import compare_replicas, read_log
from orbitmq.testing.store_put import put_durably

SEGMENT = 4096
TOPIC = "Chaos"


def write_log(store: Path, bodies: list[str], *, queues: int = 2, file_size: int = SEGMENT,
              ids: dict[int, str] | None = None) -> None:
    """``bodies`` stored one after the other, round robin over ``queues`` queues, in segments of
    ``file_size`` bytes (a blank entry closes a full one), the rest of the last one zeros."""
    directory = store / "commitlog"
    directory.mkdir(parents=True)
    segments: dict[int, bytearray] = {0: bytearray(file_size)}
    base, pos = 0, 0
    next_offset = [0] * queues
    for i, body in enumerate(bodies):
        q = i % queues
        raw = encode(body, q, next_offset[q], base + pos, (ids or {}).get(i, f"ID-{body}"))
        if pos + len(raw) > file_size - stored.BLANK_ENTRY_SIZE:
            stored.write_blank_entry(segments[base], pos, file_size - pos)
            base += file_size
            pos = 0
            segments[base] = bytearray(file_size)
            raw = encode(body, q, next_offset[q], base, (ids or {}).get(i, f"ID-{body}"))
        segments[base][pos:pos + len(raw)] = raw
        pos += len(raw)
        next_offset[q] += 1
    for start, data in segments.items():
        (directory / f"{start:020d}").write_bytes(bytes(data))


def encode(body: str, queue: int, queue_offset: int, phy: int, msg_id: str) -> bytes:
    return stored.encode_stored_message(topic=TOPIC, body=body.encode(), queue_id=queue,
                                        queue_offset=queue_offset, physical_offset=phy,
                                        properties={PropertyKey.UNIQ_KEY: msg_id})


def values(n: int) -> list[str]:
    return [f"w1-{i}" for i in range(n)]


def test_a_log_is_read_across_segments(tmp_path: Path) -> None:
    write_log(tmp_path / "a", values(100))
    log = read_log("a", tmp_path / "a")
    assert len(log.entries) == 100 and log.stop_reason == "end of data"
    assert len(list((tmp_path / "a" / "commitlog").iterdir())) > 1
    assert sorted(e.body for e in log.entries.values()) == sorted(values(100))
    assert read_log("none", tmp_path / "missing").stop_reason == "no commit log"


def test_equal_replicas_are_clean(tmp_path: Path) -> None:
    for name in ("m", "s"):
        write_log(tmp_path / name, values(60))
    logs = {n: read_log(n, tmp_path / n) for n in ("m", "s")}
    result = compare_replicas(logs, "m", values(60))
    assert result.counts() == {"replica_divergent": 0, "replica_behind": 0,
                               "replica_behind_acknowledged": 0}
    assert "replica_divergent=0" in result.text()


def test_a_slave_behind_is_a_prefix_and_counts_its_acknowledged_missing(tmp_path: Path) -> None:
    write_log(tmp_path / "m", values(60))
    write_log(tmp_path / "s", values(50))
    logs = {n: read_log(n, tmp_path / n) for n in ("m", "s")}
    result = compare_replicas(logs, "m", values(55))  # w1-55..59 never acknowledged
    assert result.replica_divergent == 0
    assert result.behind == {"s": 10} and result.behind_acknowledged == {"s": 5}


def test_another_message_at_a_position_diverges(tmp_path: Path) -> None:
    write_log(tmp_path / "m", values(20))
    swapped = values(20)
    swapped[7] = "w9-7"  # same size: every later position and offset stays the same
    write_log(tmp_path / "s", swapped)
    logs = {n: read_log(n, tmp_path / n) for n in ("m", "s")}
    result = compare_replicas(logs, "m", values(20))
    assert result.divergent == {"s": 1}
    assert "'w9-7'" in result.differences[0] and f"{TOPIC}:1:3" in result.differences[0]
    # the same body under another message id (of the same length) diverges too
    write_log(tmp_path / "t", values(20), ids={3: "ID-w7-3"})
    logs["t"] = read_log("t", tmp_path / "t")
    assert compare_replicas(logs, "m").divergent["t"] == 1


def test_a_tail_the_master_does_not_have_diverges(tmp_path: Path) -> None:
    write_log(tmp_path / "m", values(20))
    write_log(tmp_path / "s", [*values(20), "w2-0", "w2-1"])  # a demoted master's tail, not cut
    logs = {n: read_log(n, tmp_path / n) for n in ("m", "s")}
    result = compare_replicas(logs, "m")
    assert result.divergent == {"s": 2} and "not a prefix" in result.differences[0]


def test_a_corrupt_message_ends_the_scan_and_says_why(tmp_path: Path) -> None:
    write_log(tmp_path / "s", values(10))
    segment = tmp_path / "s" / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    first = read_log("s", tmp_path / "s")
    fifth = sorted(first.entries)[4]
    data[stored.peek(data, fifth).body_at] ^= 0x01  # a bit of the 5th message's body
    segment.write_bytes(bytes(data))
    log = read_log("s", tmp_path / "s")
    assert len(log.entries) == 4 and f"at {fifth}" in log.stop_reason
    write_log(tmp_path / "m", values(10))
    result = compare_replicas({"m": read_log("m", tmp_path / "m"), "s": log}, "m", values(10))
    assert result.behind == {"s": 6} and result.replica_divergent == 0


def test_a_real_store_is_read(tmp_path: Path) -> None:
    cfg = dataclasses.replace(TEST_MIN_STORE, store_path=str(tmp_path / "store"),
                              mapped_file_size_commitlog=64 * 1024)
    with MessageStore(cfg) as store:
        for i, value in enumerate(values(30)):
            assert put_durably(store, [MessageInner(TOPIC, i % 2, value.encode(), {})]).ok
    log = read_log("real", tmp_path / "store")
    assert sorted(e.body for e in log.entries.values() if e.topic == TOPIC) == sorted(values(30))
    assert log.stop_reason == "end of data"
