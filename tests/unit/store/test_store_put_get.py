"""MessageStore puts and reads on real files: offsets, batches, segment rolls, statuses, filters."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from store_fixtures import Clock, CountingFileOps, bodies, config, msg, rewrite_entry

from orbitmq.protocol.message import java_string_hash, offset_msg_id
from orbitmq.protocol.stored import BLANK_MAGIC_CODE, decode_stored_message
from orbitmq.store import GetMessageStatus, MessageInner, MessageStore, PutMessageStatus
from orbitmq.store.dispatch import SCHEDULE_TOPIC


@pytest.fixture
def store(tmp_path: Path):
    with MessageStore(config(tmp_path)) as s:
        yield s


def test_put_then_get_returns_the_stored_bytes(store: MessageStore) -> None:
    r = store.put([msg("T", 1, b"hello", TAGS="a", KEYS="k1")])
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert (r.append.wrote_offset, r.append.queue_offset, r.append.msg_num) == (0, 0, 1)
    assert r.append.msg_ids == [offset_msg_id(bytes([127, 0, 0, 1]), 10911, 0)]
    r2 = store.put([msg("T", 1, b"world")])
    assert r2.append is not None
    assert r2.append.wrote_offset == r.append.wrote_bytes and r2.append.queue_offset == 1
    assert store.wait_dispatched()
    got = store.get_message("g", "T", 1, 0, 32)
    assert got.status is GetMessageStatus.FOUND
    assert (got.message_count, got.next_begin_offset, got.min_offset, got.max_offset) == (2, 2, 0, 2)
    first = decode_stored_message(got.buffers[0])
    assert (first.body, first.topic, first.queue_id, first.tags, first.keys) == (
        b"hello", "T", 1, "a", ["k1"]
    )
    assert got.total_size == sum(len(b) for b in got.buffers)
    assert store.look_message_by_offset(r2.append.wrote_offset).body == b"world"  # type: ignore[union-attr]
    assert store.max_physical_offset() == r2.append.wrote_offset + r2.append.wrote_bytes


def test_a_peek_by_offset_has_every_field_but_the_body(store: MessageStore) -> None:
    """What the transaction check reads of a copy it passes over: the properties and the
    header, the body left where it lies."""
    r = store.put([msg("T", 2, b"x" * 5000, TAGS="a", KEYS="k1 k2", REAL_TOPIC="R")])
    assert r.append is not None
    offset = r.append.wrote_offset
    whole, head = store.look_message_by_offset(offset), store.peek_message_by_offset(offset)
    assert whole is not None and head is not None
    assert (head.topic, head.queue_id, head.queue_offset, head.physical_offset, head.properties,
            head.body_len, head.total_size) == (whole.topic, whole.queue_id, whole.queue_offset,
                                                whole.commit_log_offset, whole.properties, 5000,
                                                whole.store_size)
    assert store.peek_message_by_offset(offset, r.append.wrote_bytes) == head
    assert store.peek_message_by_offset(offset + 1) is None  # not a message's start
    assert store.peek_message_by_offset(r.append.wrote_offset + r.append.wrote_bytes) is None


def test_batch_is_one_contiguous_write_with_consecutive_queue_offsets(store: MessageStore) -> None:
    store.put([msg("B", 0, b"first")])
    batch = [msg("B", 0, bytes([i]) * i, KEYS=f"k{i}") for i in range(10)]
    r = store.put(batch)
    assert r.status is PutMessageStatus.PUT_OK and r.append is not None
    assert (r.append.queue_offset, r.append.msg_num) == (1, 10)
    offsets = r.append.offsets
    assert offsets[0] == r.append.wrote_offset
    assert r.append.wrote_offset + r.append.wrote_bytes == store.max_physical_offset()
    assert store.wait_dispatched()
    got = store.get_message("g", "B", 0, 1, 32)
    assert bodies(got) == [bytes([i]) * i for i in range(10)]
    assert [decode_stored_message(b).commit_log_offset for b in got.buffers] == offsets
    mixed = store.put([msg("B", 0), msg("B", 1)])
    assert mixed.status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put([]).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_segments_roll_with_blank_padding_and_everything_reads_back(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    payloads = [os.urandom(i * 37 % 3000) for i in range(400)]
    with MessageStore(cfg) as store:
        for i, p in enumerate(payloads):
            assert store.put([msg("R", i % 3, p)]).ok
        assert store.wait_dispatched()
        files = store.commit_log.mfq.files
        assert len(files) > 3
        names = sorted(os.listdir(os.path.join(cfg.store_path, "commitlog")))
        assert names == [f"{mf.file_from_offset:020d}" for mf in files]
        for mf in files[:-1]:  # every full segment ends with a blank entry or exactly
            pos = 0
            while pos < mf.file_size:
                total = int.from_bytes(mf.buf[pos : pos + 4], "big", signed=True)
                magic = int.from_bytes(mf.buf[pos + 4 : pos + 8], "big", signed=True)
                if magic == BLANK_MAGIC_CODE:
                    assert pos + total == mf.file_size
                    break
                pos += total
        for q in range(3):
            expect = payloads[q::3]
            got: list[bytes] = []
            offset = 0
            while offset < store.get_max_offset_in_queue("R", q):
                r = store.get_message("g", "R", q, offset, 32)
                assert r.status is GetMessageStatus.FOUND
                got += bodies(r)
                offset = r.next_begin_offset
            assert got == expect


def test_get_message_statuses(store: MessageStore) -> None:
    def get(topic: str, offset: int):
        return store.get_message("g", topic, 0, offset, 8)

    assert get("Nope", 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    store._find_or_create_cq("Empty", 0)
    assert get("Empty", 3).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    for i in range(5):
        store.put([msg("S", 0, b"%d" % i)])
    assert store.wait_dispatched()
    r = get("S", 5)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5)
    r = get("S", 9)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0)
    r = get("S", 2)
    assert (r.status, r.message_count, r.next_begin_offset) == (GetMessageStatus.FOUND, 3, 5)


def test_transfer_limits_bound_a_pull(tmp_path: Path) -> None:
    cfg = config(
        tmp_path,
        max_transfer_count_on_message_in_memory=5,
        max_transfer_bytes_on_message_in_memory=2500,
    )
    with MessageStore(cfg) as store:
        for _ in range(20):
            store.put([msg("L", 0, b"x" * 100)])
        store.put([msg("L", 0, b"y" * 5000)])
        assert store.wait_dispatched()
        r = store.get_message("g", "L", 0, 0, 32)
        assert (r.message_count, r.next_begin_offset) == (5, 5)
        r = store.get_message("g", "L", 0, 0, 3)
        assert r.message_count == 3
        r = store.get_message("g", "L", 0, 20, 32)  # one message over the byte limit still comes
        assert r.message_count == 1 and r.total_size > 2500


class TagFilter:
    tags_in_c = None  # its second stage is the body's prefix: read message by message

    def __init__(self, tag: str, body_prefix: bytes = b"") -> None:
        self.code = java_string_hash(tag)
        self.prefix = body_prefix

    def match_tags_code(self, code: int) -> bool:
        return code == self.code

    def match_message(self, raw) -> bool:
        return decode_stored_message(raw).body.startswith(self.prefix)


def test_filters_by_tags_code_and_message(store: MessageStore) -> None:
    for i in range(10):
        store.put([msg("F", 0, b"keep" if i % 4 == 0 else b"drop", TAGS="a" if i % 2 else "b")])
    assert store.wait_dispatched()
    r = store.get_message("g", "F", 0, 0, 32, TagFilter("b"))
    assert r.status is GetMessageStatus.FOUND and r.message_count == 5
    r = store.get_message("g", "F", 0, 0, 32, TagFilter("b", b"keep"))
    assert r.message_count == 3 and r.next_begin_offset == 10
    r = store.get_message("g", "F", 0, 0, 32, TagFilter("zzz"))
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 10)


def test_transaction_prepared_and_rollback_are_not_dispatched(store: MessageStore) -> None:
    prepared = MessageInner("X", 0, b"half", {"KEYS": "p"}, sys_flag=4)
    rollback = MessageInner("X", 0, b"rolled", {"KEYS": "r"}, sys_flag=12)
    commit = MessageInner("X", 0, b"commit", {"KEYS": "c"}, sys_flag=8)
    for m in (prepared, rollback, commit, msg("X", 0, b"plain")):
        r = store.put([m])
        assert r.ok
    assert store.wait_dispatched()
    assert bodies(store.get_message("g", "X", 0, 0, 32)) == [b"commit", b"plain"]
    assert store.get_max_offset_in_queue("X", 0) == 2
    assert store.query_message("X", "p", 4) == [] and store.query_message("X", "r", 4) == []
    assert [m.body for m in store.query_message("X", "c", 4)] == [b"commit"]


def test_put_statuses(tmp_path: Path) -> None:
    cfg = config(tmp_path, max_message_size=1000)
    store = MessageStore(cfg)
    assert store.put([msg()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.start()
    assert store.put([msg(body=b"x" * 1001)]).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put([msg(topic="a/b")]).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put([msg(topic="t" * 200)]).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put([msg(k="\x00")]).status is PutMessageStatus.MESSAGE_ILLEGAL
    too_many = {f"k{i}": "v" * 100 for i in range(400)}
    big = MessageInner("T", 0, b"", too_many)
    assert store.put([big]).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    bad_host = MessageInner("T", 0, b"", {}, born_host=("localhost", 1))
    assert store.put([bad_host]).status is PutMessageStatus.MESSAGE_ILLEGAL
    store.shutdown()
    assert store.put([msg()]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_create_mapped_file_failure_is_a_status(tmp_path: Path) -> None:
    """No space for a commit log segment: SERVICE_NOT_AVAILABLE naming the cause, then every put
    refused at once (no fallocate per put) until one a second tries again and succeeds."""
    ops = CountingFileOps()
    now = [0.0]
    with MessageStore(config(tmp_path), file_ops=ops, run_threads=False,
                      monotonic=lambda: now[0]) as store:
        assert store.put([msg(body=b"x" * 1000)]).ok
        ops.fail_create = True
        results = [store.put([msg(body=b"x" * 1000)]) for _ in range(80)]
        refused = [r for r in results if not r.ok]
        assert refused and all(r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE for r in refused)
        assert results[-len(refused):] == refused  # once refused, refused until retried
        assert refused[0].remark is not None and "no space for a new commit log segment" in refused[0].remark
        ops.fail_create = False
        assert store.put([msg(body=b"x" * 1000)]).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        now[0] += 1.0  # RETRY_INTERVAL_S: one put tries again
        assert store.put([msg(body=b"x" * 1000)]).ok
        assert store.put([msg(body=b"x" * 1000)]).ok
        assert store.flags.remark is None


def test_offsets_by_time_and_store_times(tmp_path: Path) -> None:
    clock = Clock()
    start = clock.now_ms
    with MessageStore(config(tmp_path), clock=clock) as store:
        for _ in range(10):
            store.put([msg("Q", 0)])
            clock.advance(1000)
        assert store.wait_dispatched()
        assert store.get_offset_in_queue_by_time("Q", 0, start - 5) == 0
        assert store.get_offset_in_queue_by_time("Q", 0, start + 3000) == 3
        assert store.get_offset_in_queue_by_time("Q", 0, start + 3500) == 4
        assert store.get_offset_in_queue_by_time("Q", 0, start + 99_000) == 10
        assert store.get_earliest_message_time("Q", 0) == start
        assert store.get_message_store_timestamp("Q", 0, 7) == start + 7000
        assert store.get_earliest_message_time("None", 0) == -1


def test_concurrent_puts_get_unique_contiguous_queue_offsets(store: MessageStore) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for _ in range(200):
            r = store.put([msg("C", 0, b"c")])
            assert r.append is not None
            with lock:
                seen.append(r.append.queue_offset)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(seen) == list(range(800))
    assert store.wait_dispatched()
    assert store.get_max_offset_in_queue("C", 0) == 800


def test_arrival_listener_and_delay_topic_tags_code(tmp_path: Path) -> None:
    clock = Clock()
    heard: list[tuple[str, int, int, int]] = []
    with MessageStore(config(tmp_path), clock=clock) as store:
        store.add_arrival_listener(lambda *args: heard.append(args))
        store.put([msg("A", 2, TAGS="t1")])
        store.put([msg("A", 2, TAGS="t1")])
        store.put([msg(SCHEDULE_TOPIC, 2, DELAY="3")])  # level 3 = 10 s
        assert store.wait_dispatched()
        assert ("A", 2, 2, java_string_hash("t1")) in heard
        entry = store.queue_entry(SCHEDULE_TOPIC, 2, 0)
        assert entry is not None and entry[2] == clock.now_ms + 10_000


def test_delete_topics_drops_queues_and_offsets(store: MessageStore) -> None:
    for q in range(3):
        store.put([msg("D", q)])
    store.put([msg("Keep", 0)])
    assert store.wait_dispatched()
    assert store.delete_topics(["D"]) == 3
    assert store.get_message("g", "D", 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.topics() == {"Keep"}
    r = store.put([msg("D", 0)])
    assert r.append is not None and r.append.queue_offset == 0


def test_max_physical_end_holds_back_entries_past_it(store: MessageStore) -> None:
    """The bound a controller-mode master reads with (its confirm offset): an entry ending past
    it is neither returned nor scanned over, also when a filter would pass over it."""
    ends = []
    for i in range(3):
        r = store.put([msg("C", 0, bytes([i]) * 10, TAGS="a" if i != 1 else "b")])
        assert r.append is not None
        ends.append(r.append.wrote_offset + r.append.wrote_bytes)
    assert store.wait_dispatched()
    got = store.get_message("g", "C", 0, 0, 32, max_physical_end=ends[0])
    assert got.status is GetMessageStatus.FOUND and bodies(got) == [b"\0" * 10]
    assert (got.next_begin_offset, got.held_back_end, got.max_offset) == (1, ends[1], 3)
    none = store.get_message("g", "C", 0, 1, 32, max_physical_end=ends[1] - 1)
    assert none.status is GetMessageStatus.OFFSET_OVERFLOW_ONE and not none.buffers
    assert (none.next_begin_offset, none.held_back_end) == (1, ends[1])
    # A tag filter passes over entry 1 (tag b) but not over entry 2, which is past the bound.
    skipped = store.get_message("g", "C", 0, 1, 32, TagFilter("a"), max_physical_end=ends[1])
    assert skipped.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert (skipped.next_begin_offset, skipped.held_back_end) == (2, ends[2])
    everything = store.get_message("g", "C", 0, 0, 32, max_physical_end=ends[2])
    assert bodies(everything) == [bytes([i]) * 10 for i in range(3)]
    assert everything.held_back_end == -1
    assert bodies(store.get_message("g", "C", 0, 0, 32)) == bodies(everything)


def _same_read(plain, runs) -> None:
    assert b"".join(runs.buffers) == b"".join(plain.buffers)
    assert (runs.status, runs.message_count, runs.total_size, runs.next_begin_offset,
            runs.last_commit_offset, runs.min_offset, runs.max_offset) == (
        plain.status, plain.message_count, plain.total_size, plain.next_begin_offset,
        plain.last_commit_offset, plain.min_offset, plain.max_offset)


def test_reads_with_runs_give_back_to_back_messages_one_buffer_and_the_same_bytes(
        tmp_path: Path) -> None:
    """``runs``: a batch's messages, and single sends to one queue with nothing between them,
    come as one slice per run; everything else a pull says is as a read message by message,
    across segment ends (64 KiB segments), transfer bounds and filters."""
    import random

    rng = random.Random(7)
    cfg = config(tmp_path, max_transfer_count_on_message_in_memory=40,
                 max_transfer_bytes_on_message_in_memory=9000)
    with MessageStore(cfg) as store:
        for i in range(300):
            q = rng.randrange(2)
            tag = rng.choice("ab")
            if rng.random() < 0.3:
                store.put([msg("R", q, bytes([i % 256]) * rng.randrange(300), TAGS=tag)
                           for _ in range(rng.randrange(1, 12))])
            else:
                store.put([msg("R", q, b"s" * rng.randrange(300), TAGS=tag)])
        assert store.wait_dispatched()
        fewer = 0
        for q in range(2):
            end = store.get_max_offset_in_queue("R", q)
            for filt in (None, TagFilter("a"), TagFilter("b", b"\x07")):
                for bulk in (False, True):
                    offset = 0
                    while offset < end:
                        want = rng.randrange(1, 64)
                        plain = store.get_message("g", "R", q, offset, want, filt, bulk)
                        runs = store.get_message("g", "R", q, offset, want, filt, bulk,
                                                 runs=True)
                        _same_read(plain, runs)
                        assert len(runs.buffers) <= len(plain.buffers)
                        fewer += len(runs.buffers) < len(plain.buffers)
                        offset = plain.next_begin_offset
        assert fewer > 10


def test_a_run_the_commit_log_cannot_slice_whole_is_read_message_by_message(
        store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.put([msg("W", 0, bytes([i]) * 50) for i in range(6)])
    assert store.wait_dispatched()
    plain = store.get_message("g", "W", 0, 0, 32)
    assert len(store.get_message("g", "W", 0, 0, 32, runs=True).buffers) == 1
    one_message = len(plain.buffers[0])
    read = store.commit_log.read
    monkeypatch.setattr(store.commit_log, "read",
                        lambda offset, size: read(offset, size) if size <= one_message else None)
    runs = store.get_message("g", "W", 0, 0, 32, runs=True)
    _same_read(plain, runs)
    assert len(runs.buffers) == 6


def test_a_queue_entry_of_negative_size_is_passed_over(store: MessageStore) -> None:
    """A damaged queue entry whose size is negative is passed over as a blank one by every
    read (it had read as a slice to the end of the commit log segment): like a blank, it ends
    a read that has messages, and the next read passes over it to the entries after it."""
    store.put([msg("N", 0, bytes([i]) * 50) for i in range(4)])
    assert store.wait_dispatched()
    rewrite_entry(store, "N", 0, 1, size=-1)
    for offset, want, next_offset in ((0, (0,), 1), (1, (2, 3), 4)):
        plain = store.get_message("g", "N", 0, offset, 32)
        assert plain.status is GetMessageStatus.FOUND
        assert plain.next_begin_offset == next_offset
        assert bodies(plain) == [bytes([i]) * 50 for i in want]
        _same_read(plain, store.get_message("g", "N", 0, offset, 32, runs=True))


def test_a_damaged_queue_entry_reads_as_message_by_message(store: MessageStore) -> None:
    """A queue entry whose physical offset is negative (a damaged queue file) is never trusted
    for a slice: the read in runs answers what the read message by message answers."""
    store.put([msg("D", 0, bytes([i]) * 50) for i in range(6)])
    assert store.wait_dispatched()
    for at, phy in ((0, -5), (2, -1), (4, -10_000)):
        rewrite_entry(store, "D", 0, at, phy=phy)
    for offset in range(6):
        plain = store.get_message("g", "D", 0, offset, 32)
        runs = store.get_message("g", "D", 0, offset, 32, runs=True)
        _same_read(plain, runs)
