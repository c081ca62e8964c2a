"""Tests of the key index (store/index_file.py) on real files in temporary directories."""

from __future__ import annotations

import os
import struct
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orbitmq.errors import ClientError, StoreError
from orbitmq.store.index_file import (
    HASH_SLOT_SIZE,
    HEADER_SIZE,
    INDEX_ENTRY_SIZE,
    IndexFile,
    index_key_hash,
    java_string_hash,
)
from orbitmq.store.index_service import IndexService, QueryOffsetResult

T0 = 1_700_000_000_000  # a store timestamp in ms, a multiple of 1000
ALL_TIME = (0, 2**62)


def oracle_hash(s: str) -> int:
    """String.hashCode by its definition, with Python's big ints: independent of the code under test."""
    data = s.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]
    h = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2**32
    return h - 2**32 if h >= 2**31 else h


class FixedClock:
    """A wall clock that never moves, so that every new file competes for the same name."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def open_service(path: Path, slots: int = 4, index_num: int = 5, last_exit_ok: bool = True):
    service = IndexService(str(path), slots, index_num, clock=FixedClock())
    service.load(last_exit_ok)
    return service


def query(service: IndexService, key: str, max_num: int = 1000, span=ALL_TIME) -> list[int]:
    return service.query_offsets("T", key, max_num, span[0], span[1]).phy_offsets


def index_files_on_disk(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


# -- Java's hash ----------------------------------------------------------------------------------

# Printed by a JDK's String.hashCode().
JAVA_HASHES = [
    ("hello", 99162322),
    ("", 0),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -2147483648),
    ("hello world, this is OrbitMQ", -1937452318),
    ("TopicTest#ORDER-20240101-0001", -2139175797),
    ("caf\u00e9", 3045921),
    ("\U0001f600", 1772899),  # one code point, two UTF-16 units
]


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash_known_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_index_key_hash_is_abs_and_min_value_gives_zero() -> None:
    assert index_key_hash("hello world, this is OrbitMQ") == 1937452318
    assert index_key_hash("hello") == 99162322
    assert index_key_hash("polygenelubricants") == 0  # abs(Integer.MIN_VALUE) overflows in Java


@pytest.mark.parametrize("length", [255, 256, 257, 512, 513, 5000])
def test_java_string_hash_of_long_strings(length: int) -> None:
    text = "".join(chr(33 + (i * 7919) % 90) for i in range(length))
    assert java_string_hash(text) == oracle_hash(text)
    wide = "\u00e9\U0001f600" * (length // 3)  # UTF-16 units cross the chunk boundaries too
    assert java_string_hash(wide) == oracle_hash(wide)


@given(st.text(st.characters(exclude_categories=()), max_size=700))
def test_java_string_hash_matches_definition(text: str) -> None:
    assert java_string_hash(text) == oracle_hash(text)


# -- one file ----------------------------------------------------------------------------------


def test_on_disk_layout_is_rocketmq_s(tmp_path: Path) -> None:
    path = str(tmp_path / "f")
    f = IndexFile(path, 7, 10)
    assert f.put_key("T#k1", 1234, T0)
    assert f.put_key("T#k1", 5678, T0 + 2500)
    f.flush()
    f.close()
    raw = Path(path).read_bytes()
    assert len(raw) == HEADER_SIZE + 7 * HASH_SLOT_SIZE + 10 * INDEX_ENTRY_SIZE
    assert struct.unpack_from(">qqqqii", raw) == (T0, T0 + 2500, 1234, 5678, 1, 3)
    key_hash = index_key_hash("T#k1")
    (slot,) = struct.unpack_from(">i", raw, HEADER_SIZE + (key_hash % 7) * 4)
    assert slot == 2
    entries = HEADER_SIZE + 7 * 4
    assert raw[entries : entries + INDEX_ENTRY_SIZE] == bytes(INDEX_ENTRY_SIZE)  # entry 0 unused
    assert struct.unpack_from(">iqii", raw, entries + 20) == (key_hash, 1234, 0, 0)
    assert struct.unpack_from(">iqii", raw, entries + 40) == (key_hash, 5678, 2, 1)


def test_many_keys_in_few_slots_each_found(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 3, 1000)
    for i in range(999):
        assert f.put_key(f"T#key-{i % 300}", i * 100, T0 + i)
    assert f.is_write_full
    assert not f.put_key("T#late", 10**6, T0)
    assert f.hash_slot_count <= 3
    for k in range(300):
        expected = [i * 100 for i in range(999) if i % 300 == k][::-1]
        assert f.select_phy_offsets(f"T#key-{k}", 64, *ALL_TIME) == expected
    assert f.select_phy_offsets("T#key-7", 2, *ALL_TIME) == [907 * 100, 607 * 100]
    assert f.select_phy_offsets("T#absent", 64, *ALL_TIME) == []
    f.destroy()
    assert not (tmp_path / "f").exists()


def test_equal_hashes_are_both_returned(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 16, 10)
    f.put_key("T#Aa", 100, T0)
    f.put_key("T#BB", 200, T0)  # same hash: the caller must check the key on the message
    assert f.select_phy_offsets("T#Aa", 10, *ALL_TIME) == [200, 100]
    assert f.select_phy_offsets("T#BB", 10, *ALL_TIME) == [200, 100]
    f.close()


def test_time_range_filter_to_the_second(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 4, 100)
    for i in range(10):
        f.put_key("T#k", i, T0 + i * 1500)  # stored as whole seconds since T0: 0,1,3,4,6,7,9,...
    assert (f.begin_timestamp, f.end_timestamp) == (T0, T0 + 9 * 1500)
    assert f.select_phy_offsets("T#k", 100, T0, T0 + 4000) == [3, 2, 1, 0]
    assert f.select_phy_offsets("T#k", 100, T0 + 3000, T0 + 6000) == [4, 3, 2]
    # Message 1 was stored at T0+1500 but is known as T0+1000, as in RocketMQ.
    assert f.select_phy_offsets("T#k", 100, T0 + 1200, T0 + 2000) == []
    assert f.select_phy_offsets("T#k", 2, T0, T0 + 60_000) == [9, 8]
    assert f.select_phy_offsets("T#k", 100, T0 + 5000, T0 + 1000) == []
    assert f.is_time_matched(T0 - 5, T0)
    assert not f.is_time_matched(T0 + 20_000, T0 + 30_000)
    f.close()


def test_walk_stops_on_a_damaged_chain(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 1, 10)
    for i in range(5):
        f.put_key("T#k", i, T0)
    f.close()
    with open(tmp_path / "f", "r+b") as raw:  # entry 3 points forward to entry 5: a cycle
        raw.seek(HEADER_SIZE + 4 + 3 * INDEX_ENTRY_SIZE + 16)
        raw.write(struct.pack(">i", 5))
    f = IndexFile(str(tmp_path / "f"), 1, 10)
    assert f.select_phy_offsets("T#k", 100, *ALL_TIME) == [4, 3, 2]
    f.close()


def test_truncate_restores_the_file_a_shorter_history_would_give(tmp_path: Path) -> None:
    puts = [(f"T#k{i % 7}", i * 10, T0 + (i // 3) * 1000) for i in range(40)]
    whole = IndexFile(str(tmp_path / "whole"), 5, 64)
    prefix = IndexFile(str(tmp_path / "prefix"), 5, 64)
    for n, put in enumerate(puts):
        whole.put_key(*put)
        if n < 25:
            prefix.put_key(*put)
    whole.truncate_from(puts[25][1])
    assert (whole.entry_count, whole.end_phy_offset) == (25, puts[24][1])
    used = HEADER_SIZE + 5 * 4 + 26 * INDEX_ENTRY_SIZE
    whole.close()
    prefix.close()
    assert (tmp_path / "whole").read_bytes()[:used] == (tmp_path / "prefix").read_bytes()[:used]


def test_truncate_to_nothing_empties_the_file(tmp_path: Path) -> None:
    f = IndexFile(str(tmp_path / "f"), 5, 64)
    for i in range(10):
        f.put_key(f"T#k{i}", 1000 + i, T0)
    f.truncate_from(1000)
    assert (f.entry_count, f.hash_slot_count, f.end_phy_offset) == (0, 0, 0)
    assert f.select_phy_offsets("T#k3", 10, *ALL_TIME) == []
    f.put_key("T#k3", 2000, T0 + 5000)
    assert f.select_phy_offsets("T#k3", 10, *ALL_TIME) == [2000]
    assert f.begin_timestamp == T0 + 5000
    f.close()


def test_bad_geometry_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ClientError):
        IndexFile(str(tmp_path / "f"), 0, 10)
    with pytest.raises(ClientError):
        IndexService(str(tmp_path), 10, 1)


# -- the service ----------------------------------------------------------------------------------


def test_full_files_roll_with_increasing_names(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=2, index_num=5)  # 4 entries per file
    for i in range(18):
        service.build_index("T", [f"k{i % 3}"], None, i * 100, T0 + i * 1000)
    names = index_files_on_disk(tmp_path)
    assert len(names) == 5 and len(service.files) == 5
    assert all(len(n) == 17 and n.isdigit() for n in names)
    # A clock stuck on one ms still gives distinct names, in creation order.
    assert names == sorted(set(names))
    assert query(service, "k1") == [i * 100 for i in range(18) if i % 3 == 1][::-1]
    assert query(service, "k1", max_num=4) == [1600, 1300, 1000, 700]
    span = (T0 + 5000, T0 + 11_000)
    assert query(service, "k2", span=span) == [1100, 800, 500]
    result = service.query_offsets("T", "k0", 32, *ALL_TIME)
    assert result == QueryOffsetResult([1500, 1200, 900, 600, 300, 0], T0 + 17_000, 1700)
    assert service.max_phy_offset == 1700
    service.shutdown()


def test_one_instant_spread_over_files_is_found_whole(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=2, index_num=3)
    for i in range(7):
        service.build_index("T", ["k"], None, i, T0 + 5000)
    assert len(service.files) == 4
    assert query(service, "k", span=(T0 + 5000, T0 + 5000)) == [6, 5, 4, 3, 2, 1, 0]
    assert query(service, "k", span=(T0 + 5001, T0 + 9000)) == []
    service.shutdown()


def test_keys_and_uniq_key_are_indexed_once_each(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=8, index_num=100)
    service.build_index("T", ["a", "", "b", "a"], "U1", 0, T0)
    service.build_index("T", [], None, 100, T0)  # no key: nothing to index
    service.build_index("T", ["", ""], "", 200, T0)
    service.build_index("Other", ["a"], None, 300, T0)
    assert [f.entry_count for f in service.files] == [4]
    assert query(service, "a") == [0]
    assert query(service, "b") == [0]
    assert query(service, "U1") == [0]
    assert service.query_offsets("Other", "a", 10, *ALL_TIME).phy_offsets == [300]
    assert service.max_phy_offset == 300
    service.shutdown()


def test_empty_service(tmp_path: Path) -> None:
    service = open_service(tmp_path / "index")
    assert service.query_offsets("T", "k", 10, *ALL_TIME) == QueryOffsetResult([], 0, 0)
    assert service.max_phy_offset == 0
    service.flush()
    service.truncate_after(0)
    service.delete_expired(10**9)
    service.shutdown()
    with pytest.raises(ClientError):
        IndexService(str(tmp_path), 4, 5).build_index("T", ["k"], None, 0, T0)


def test_reopen_and_continue(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=3, index_num=6)
    for i in range(12):
        service.build_index("T", [f"k{i % 4}"], f"u{i}", i * 10, T0 + i * 1000)
    service.shutdown()
    reopened = open_service(tmp_path, slots=3, index_num=6)
    assert reopened.max_phy_offset == 110
    assert query(reopened, "k2") == [100, 60, 20]
    assert query(reopened, "u5") == [50]
    for i in range(12, 20):
        reopened.build_index("T", [f"k{i % 4}"], f"u{i}", i * 10, T0 + i * 1000)
    assert query(reopened, "k2") == [180, 140, 100, 60, 20]
    assert len(reopened.files) == len(index_files_on_disk(tmp_path)) == 8
    reopened.shutdown()


def test_redispatch_does_not_index_twice(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=3, index_num=6)
    for _ in range(2):  # the second pass replays every message, as recovery may
        for i in range(10):
            service.build_index("T", [f"k{i % 2}", "x"], None, i * 10, T0 + i * 1000)
    assert query(service, "k0") == [80, 60, 40, 20, 0]
    assert query(service, "x") == [90, 80, 70, 60, 50, 40, 30, 20, 10, 0]
    service.shutdown()


def test_redispatch_completes_a_message_cut_short(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=3, index_num=4)
    service.build_index("T", ["a"], None, 0, T0)
    service.build_index("T", ["b"], None, 10, T0)
    # A crash after the first two of the message's three keys, the second in a new file.
    service.build_index("T", ["c"], None, 20, T0)
    service.build_index("T", ["d"], None, 20, T0)
    service.build_index("T", ["c", "d", "e"], None, 20, T0)
    assert [query(service, k) for k in "cde"] == [[20], [20], [20]]
    assert sum(f.entry_count for f in service.files) == 5
    service.shutdown()


def test_truncate_after_drops_newer_files_and_cuts_the_straddling_one(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=2, index_num=5)
    for i in range(20):
        service.build_index("T", ["k"], f"u{i}", i * 100, T0 + i * 1000)  # two entries a message
    assert len(service.files) == 10
    service.truncate_after(900)  # the commit log now ends where message 9 began
    assert service.max_phy_offset == 800
    assert len(service.files) == len(index_files_on_disk(tmp_path)) == 5
    assert query(service, "k") == [800, 700, 600, 500, 400, 300, 200, 100, 0]
    assert query(service, "u9") == []
    for i in range(9, 12):  # the store re-dispatches from the truncation point
        service.build_index("T", ["k"], f"u{i}", i * 100, T0 + i * 1000)
    assert query(service, "k", max_num=4) == [1100, 1000, 900, 800]
    assert query(service, "u9") == [900]
    service.shutdown()
    reopened = open_service(tmp_path, slots=2, index_num=5, last_exit_ok=False)
    assert query(reopened, "k") == [i * 100 for i in range(12)][::-1]
    reopened.truncate_after(0)
    assert (reopened.files, index_files_on_disk(tmp_path), reopened.max_phy_offset) == ([], [], 0)
    reopened.shutdown()


def test_delete_expired_never_deletes_the_newest_file(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=2, index_num=3)  # 2 entries per file
    for i in range(8):
        service.build_index("T", ["k"], None, i * 100, T0 + i * 1000)
    assert [f.end_phy_offset for f in service.files] == [100, 300, 500, 700]
    service.delete_expired(300)
    assert [f.end_phy_offset for f in service.files] == [300, 500, 700]
    assert query(service, "k") == [700, 600, 500, 400, 300, 200]
    service.delete_expired(10**9)
    assert [f.end_phy_offset for f in service.files] == [700]
    assert index_files_on_disk(tmp_path) == [os.path.basename(service.files[0].path)]
    service.shutdown()


def test_crash_between_header_and_slot_is_repaired_on_abnormal_load(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=4, index_num=50)
    for i in range(5):
        service.build_index("T", ["k"], None, i * 10, T0)
    path = service.files[-1].path
    service.shutdown()
    with open(path, "r+b") as raw:  # undo the last write of the last put: its slot
        raw.seek(HEADER_SIZE + (index_key_hash("T#k") % 4) * 4)
        raw.write(struct.pack(">i", 4))
    clean = open_service(tmp_path, slots=4, index_num=50)
    assert query(clean, "k") == [30, 20, 10, 0]
    clean.shutdown()
    recovered = open_service(tmp_path, slots=4, index_num=50, last_exit_ok=False)
    assert query(recovered, "k") == [40, 30, 20, 10, 0]
    recovered.shutdown()


class HeaderWriteProbe:
    """A header field whose conversion to bytes calls back: ``on_convert`` runs in the middle of
    the header write of a put, after the fields before it were packed."""

    def __init__(self, value: int, on_convert) -> None:
        self.value = value
        self.on_convert = on_convert

    def __index__(self) -> int:
        self.on_convert()
        return self.value


def test_a_kill_inside_a_header_write_loses_no_earlier_entry(tmp_path: Path) -> None:
    """A process killed while a put wrote the header must leave the earlier entries findable.

    ``struct.pack_into`` zero-fills its target before it packs the fields: the header on the map
    read index count 0 until the last field was written, a kill there left a file that the next
    start took for a never-written one and deleted, every key in it gone (the kill -9 test's rare
    lost acknowledged key). The probe copies the file at that instant, as a kill would leave it.
    """
    index_dir = tmp_path / "index"
    service = open_service(index_dir, slots=8, index_num=64)
    for i in range(10):
        service.build_index("T", [f"k{i}"], None, i * 100, T0 + i)
    f = service.files[-1]
    images: list[bytes] = []
    f._slot_count = HeaderWriteProbe(f._slot_count, lambda: images.append(Path(f.path).read_bytes()))
    service.build_index("T", ["k0"], None, 1000, T0 + 10)  # k0's slot has a chain: no new slot
    f._slot_count = f._slot_count.value
    service.shutdown()
    assert len(images) == 1
    header = struct.unpack_from(">qqqqii", images[0])
    assert header[5] == 11, f"a kill here leaves the header {header}"
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / os.path.basename(f.path)).write_bytes(images[0])
    recovered = open_service(crashed, slots=8, index_num=64, last_exit_ok=False)
    recovered.truncate_after(1000)  # the put under way was past the checkpoint: done again
    recovered.build_index("T", ["k0"], None, 1000, T0 + 10)
    for i in range(1, 10):
        assert query(recovered, f"k{i}") == [i * 100]
    assert query(recovered, "k0") == [1000, 0]
    recovered.shutdown()


def test_damaged_header_fails_a_clean_start_and_is_dropped_after_a_crash(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=4, index_num=5)
    for i in range(6):
        service.build_index("T", ["k"], None, i * 10, T0)
    first, second = (f.path for f in service.files)
    service.shutdown()
    with open(second, "r+b") as raw:
        raw.seek(36)
        raw.write(struct.pack(">i", 999))  # index count beyond the file
    with pytest.raises(StoreError):
        open_service(tmp_path, slots=4, index_num=5)
    recovered = open_service(tmp_path, slots=4, index_num=5, last_exit_ok=False)
    assert [f.path for f in recovered.files] == [first]
    assert query(recovered, "k") == [30, 20, 10, 0]
    recovered.shutdown()


def test_changed_geometry_is_refused_and_leftover_files_removed(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=4, index_num=5)
    service.build_index("T", ["k"], None, 0, T0)
    service.shutdown()
    (tmp_path / "20240101000000000.tmp").write_bytes(b"half made")
    IndexFile(str(tmp_path / "20990101000000000"), 4, 5).close()  # created, never written
    with pytest.raises(StoreError, match="max_hash_slot_num"):
        open_service(tmp_path, slots=8, index_num=5)
    again = open_service(tmp_path, slots=4, index_num=5, last_exit_ok=False)
    assert len(index_files_on_disk(tmp_path)) == 1
    with pytest.raises(ClientError):
        again.load(True)
    again.shutdown()


def test_queries_run_beside_the_dispatch_thread(tmp_path: Path) -> None:
    service = open_service(tmp_path, slots=16, index_num=200)
    total = 3000
    errors: list[BaseException] = []
    done = threading.Event()

    def dispatch() -> None:
        try:
            for i in range(total):
                service.build_index("T", [f"k{i % 10}"], None, i, T0 + i)
        except BaseException as e:  # reported by the main thread
            errors.append(e)
        finally:
            done.set()

    def reader() -> None:
        try:
            while not done.is_set():
                found = query(service, "k3", max_num=64)
                assert found == sorted(found, reverse=True) and all(p % 10 == 3 for p in found)
                service.flush()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=dispatch)] + [
        threading.Thread(target=reader) for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []
    assert query(service, "k3", max_num=5) == [2993, 2983, 2973, 2963, 2953]
    service.shutdown()


# -- against a model ------------------------------------------------------------------------------

KEYS = ["a", "b", "Aa", "BB", ""]  # "T#Aa" and "T#BB" share a hash


@dataclass
class Model:
    """What the index must answer: every message with its keys, in commit-log order."""

    messages: list[tuple[int, int, frozenset[str]]] = field(default_factory=list)  # phy, ts, keys
    next_phy: int = 0
    now_ms: int = T0

    def expected(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        wanted = index_key_hash("T#" + key)
        hits = [
            phy
            for phy, ts, keys in reversed(self.messages)
            if begin_ms <= ts <= end_ms and any(index_key_hash("T#" + k) == wanted for k in keys)
        ]
        return hits[:max_num]

    def max_phy(self) -> int:
        return next((phy for phy, _, keys in reversed(self.messages) if keys), 0)


message_op = st.tuples(
    st.just("msg"),
    st.lists(st.sampled_from(KEYS), max_size=3),
    st.one_of(st.none(), st.sampled_from(["u1", "u2", ""])),
    st.integers(1, 300),
    st.integers(0, 3),
)
ops = st.lists(
    st.one_of(
        message_op,
        message_op,
        st.tuples(st.just("truncate"), st.integers(0, 6)),
        st.tuples(st.just("replay"), st.integers(1, 4)),
        st.tuples(st.just("reopen"), st.booleans()),
        st.tuples(
            st.just("query"), st.sampled_from(KEYS[:4]), st.integers(1, 8), st.integers(0, 20)
        ),
    ),
    max_size=60,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.integers(1, 3), st.integers(2, 6))
def test_index_agrees_with_a_model(operations: list[tuple], slots: int, index_num: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        service = open_service(Path(tmp), slots, index_num)
        model = Model()
        raw: list[tuple[list[str], str | None, int, int]] = []  # build_index arguments, for replays
        try:
            for op in operations:
                service = apply(op, service, model, raw, Path(tmp), slots, index_num)
                assert service.max_phy_offset == model.max_phy()
            for key in KEYS[:4]:
                assert query(service, key) == model.expected(key, 1000, *ALL_TIME)
        finally:
            service.shutdown()


def apply(op, service, model: Model, raw, tmp: Path, slots: int, index_num: int) -> IndexService:
    kind = op[0]
    if kind == "msg":
        _, keys, uniq, size, step_s = op
        model.now_ms += step_s * 1000
        service.build_index("T", keys, uniq, model.next_phy, model.now_ms)
        model.messages.append(
            (model.next_phy, model.now_ms, frozenset(k for k in [*keys, uniq] if k))
        )
        raw.append((keys, uniq, model.next_phy, model.now_ms))
        model.next_phy += size
    elif kind == "truncate":
        back = min(op[1], len(model.messages))
        cut = model.messages[-back][0] if back else model.next_phy
        service.truncate_after(cut)
        del model.messages[len(model.messages) - back :]
        del raw[len(raw) - back :]
        model.next_phy = cut
    elif kind == "replay":
        for keys, uniq, phy, ts in raw[-op[1] :]:
            service.build_index("T", keys, uniq, phy, ts)
    elif kind == "reopen":
        service.shutdown()
        service = open_service(tmp, slots, index_num, last_exit_ok=op[1])
    else:
        _, key, max_num, back_s = op
        span = (model.now_ms - back_s * 1000, model.now_ms)
        assert query(service, key, max_num, span) == model.expected(key, max_num, *span)
    return service
