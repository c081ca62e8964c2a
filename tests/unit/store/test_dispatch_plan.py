"""Dispatch planned in C (``dispatch_plan``, ``index_put``: store/_native/) against
dispatch message by message in Python: the same commit log gives the same consume queue files,
the same index files, the same arrivals and the same queries, byte for byte, over generated
workloads (topics, queues, tags, KEYS with ASCII and Unicode spaces, delay levels, transaction
halves, small queue and index files that roll, a re-dispatch over what is there already)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from store_fixtures import Clock, config

from orbitmq.protocol.message import MessageSysFlag
from orbitmq.store import MessageInner, MessageStore
from orbitmq.store.dispatch import TIMER_TOPIC
from orbitmq.store.native import NATIVE

pytestmark = pytest.mark.skipif(NATIVE is None, reason="C speedups not built or turned off")

KEY_WORDS = ["k1", "k2", "kéy", "a\u3000b", "x\x1cy", "", "k1", "dup dup", "\tpad  ", "😀"]


def _workload(seed: int) -> list[list[MessageInner]]:
    rng = random.Random(seed)
    batches: list[list[MessageInner]] = []
    for i in range(rng.randint(150, 300)):
        topic = rng.choice(["Orders", "Pay", "Ördér", "SCHEDULE_TOPIC_XXXX", TIMER_TOPIC])
        qid = rng.randrange(3)
        msgs = []
        for j in range(rng.choice([1, 1, 1, 4, 17])):
            props: dict[str, str] = {}
            if rng.random() < 0.8:
                props["UNIQ_KEY"] = f"U{seed}-{i}-{j}" if rng.random() < 0.9 else "dup"
            if rng.random() < 0.5:
                props["KEYS"] = " ".join(rng.choice(KEY_WORDS) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.5:
                props["TAGS"] = rng.choice(["a", "b", "tág", "😀", ""])
            if topic == "SCHEDULE_TOPIC_XXXX":
                props["DELAY"] = str(rng.choice([1, 3, 18, 99, 0]))
            if topic == TIMER_TOPIC:  # tags code = the delivery time, as read by Python
                props["TIMER_DELIVER_MS"] = rng.choice([str(rng.randrange(2**41)), "soon", ""])
            sys_flag = int(MessageSysFlag.TRANSACTION_PREPARED_TYPE) if rng.random() < 0.05 else 0
            msgs.append(MessageInner(topic, qid, rng.randbytes(rng.choice([0, 30, 400])), props,
                                     sys_flag=sys_flag))
        batches.append(msgs)
    return batches


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _run(tmp_path: Path, seed: int, planned: bool) -> tuple[dict[str, bytes], list[tuple], list]:
    clock = Clock()
    store = MessageStore(config(tmp_path, max_hash_slot_num=64, max_index_num=200),
                         clock=clock, run_threads=False)
    store.start()
    if not planned:
        store.dispatcher._plan = None  # the Python path, message by message
    arrivals: list[tuple] = []
    store.add_arrival_listener(lambda *a: arrivals.append(a))
    rng = random.Random(seed + 1)
    try:
        for batch in _workload(seed):
            assert store.put(batch).append is not None
            clock.advance(rng.randint(0, 1500))
            if rng.random() < 0.3:
                store.dispatcher.dispatch_available(rng.choice([1, 5, 64]))
        assert store.dispatcher.dispatch_available()
        found = [store.query_message_raw("Orders", key, 64).buffers
                 for key in ("k1", "kéy", "a", "b", "dup", "x", "y", "😀", "U1-3-0")]
        queries = [[bytes(b) for b in bufs] for bufs in found]
    finally:
        store.shutdown()
    root = Path(store.config.store_path)
    return {**_files(root / "consumequeue"), **_files(root / "index")}, arrivals, queries


@pytest.mark.parametrize("seed", range(8))
def test_planned_dispatch_writes_what_python_dispatch_writes(tmp_path: Path, seed: int) -> None:
    native = _run(tmp_path / "c", seed, True)
    python = _run(tmp_path / "py", seed, False)
    assert native[0].keys() == python[0].keys()
    for name, data in python[0].items():
        assert native[0][name] == data, name
    assert sorted(native[1]) == sorted(python[1])  # arrivals (told per round, in any order)
    assert native[2] == python[2]  # queries by key
    assert len(python[0]) > 5


def test_a_re_dispatch_after_recovery_indexes_nothing_twice(tmp_path: Path) -> None:
    """The index entries of messages already indexed are skipped (build_index's rule), the
    queue entries already written too."""
    store = MessageStore(config(tmp_path), clock=Clock(), run_threads=False)
    store.start()
    try:
        for i in range(40):
            store.put([MessageInner("Orders", i % 2, b"x", {"UNIQ_KEY": f"u{i}", "KEYS": "a b"})])
        assert store.dispatcher.dispatch_available()
        index, cq = store.index, store.consume_queue_table
        assert index is not None
        before = [f.entry_count for f in index.files], {k: q.max_offset for k, q in cq.items()}
        store.dispatcher.dispatch_to(0, store.commit_log.max_offset, None)  # everything again
        after = [f.entry_count for f in index.files], {k: q.max_offset for k, q in cq.items()}
        assert after == before and before[0] == [120]
    finally:
        store.shutdown()


@pytest.mark.parametrize(("begin_ts", "ts"), [(-(1 << 63) + 5, 1 << 62), ((1 << 62), -(1 << 63) + 1),
                                               (0, (1 << 63) - 1), (1767000000000, 1766999999000)])
def test_index_put_clamps_a_time_difference_past_int64_as_put_hash_does(
        tmp_path: Path, begin_ts: int, ts: int) -> None:
    """Store times come from the commit log (a damaged one may hold anything): index_put's
    seconds since the file's first entry are put_hash's, 0..INT32_MAX, even where the
    difference overflows an int64 (it wrapped in C, and UBSan calls that undefined; found by
    the fuzzer's index_put target)."""
    from orbitmq.store.index_file import PLANNED_ENTRY, IndexFile

    in_c, in_python = (IndexFile(str(tmp_path / name), 4, 8) for name in ("c", "python"))
    try:
        for f in (in_c, in_python):
            assert f.put_hash(1, 0, begin_ts)  # the first entry sets the begin timestamp
        assert in_c.put_planned(PLANNED_ENTRY.pack(2, 10, ts), 0) == 1
        assert in_python.put_hash(2, 10, ts)
        assert in_c._entry(2) == in_python._entry(2)
        assert bytes(in_c._mm) == bytes(in_python._mm)
    finally:
        in_c.close()
        in_python.close()
