"""The commit log writes through the file (pwrite), readers read through the mapping.

- An append maps no page of the segment into the process, and what it wrote reads back through
  the mapping and through the file alike (one page cache).
- A write the file refuses goes through the mapping instead and is logged.
- A segment the log has moved past gives up the descriptor its writes held.
- The native fast path's writer gets a buffer standing for the segment from its write position
  (``IN_PLACE_BYTES_MAX`` at most, the segment's rest at the end of one) and what it stores lands
  at that position, found by queue reads like any other message.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from store_fixtures import bodies, config, msg

from orbitmq.protocol import stored
from orbitmq.store import GetMessageStatus, MessageStore, commit_log
from orbitmq.store.file_ops import OsFileOps
from orbitmq.store.mapped_file import MappedFile

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self")


def _resident_kib(path: str) -> int:
    """Rss of this process's mapping of ``path`` (/proc/self/smaps), in KiB."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(path):
            for follow in lines[i + 1 :]:
                if follow.startswith("Rss:"):
                    return int(follow.split()[1])
    raise AssertionError(f"{path} is not mapped")


def _descriptors_of(path: str) -> int:
    return sum(os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(path)
               for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))


@linux
def test_appends_map_no_page_and_read_back_through_mapping_and_file(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=8 << 20)
    body = os.urandom(4000)
    with MessageStore(cfg, run_threads=False) as store:
        for i in range(500):  # ~2 MiB
            assert store.put([msg("W", i % 2, body)]).ok
        mf = store.commit_log.mfq.files[0]
        assert _resident_kib(mf.path) < 64, "the writes went through the mapping"
        with open(mf.path, "rb") as f:
            from_file = f.read(mf.wrote_position)
        assert from_file.count(body) == 500
        assert bytes(mf.slice(0, mf.wrote_position)) == from_file
        store.run_services_once()
        got = store.get_message("g", "W", 1, 0, 32)
        assert got.status is GetMessageStatus.FOUND and bodies(got) == [body] * 32


class RefusingRegion:
    """An OsRegion whose writes through the file fail."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.buf = inner.buf

    def write(self, start: int, data: Any) -> None:
        raise OSError(5, "Input/output error (simulated)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_refused_write_goes_through_the_mapping_and_is_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(tmp_path / "seg")
    inner = OsFileOps().open_region(path, 1 << 20, create=True)
    mf = MappedFile(path, 0, 1 << 20, RefusingRegion(inner))  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.WARNING, logger="orbitmq.store.mapped_file"):
            assert mf.append(b"kept") == 0
        assert bytes(mf.slice(0, 4)) == b"kept"
        assert "stored through the mapping" in caplog.text and "simulated" in caplog.text
        mf.flush()
        with open(path, "rb") as f:
            assert f.read(4) == b"kept"
    finally:
        mf.close()


@linux
def test_a_segment_left_behind_gives_up_its_descriptor(tmp_path: Path) -> None:
    cfg = config(tmp_path, mapped_file_size_commitlog=64 * 1024)
    with MessageStore(cfg, run_threads=False) as store:
        for i in range(200):  # 200 KiB over 64 KiB segments: several rolls
            assert store.put([msg("D", 0, bytes(1000 + i))]).ok
        files = store.commit_log.mfq.files
        assert len(files) >= 2
        # CPython's mmap keeps a descriptor of its own: the writes' one comes on top of it.
        counts = [_descriptors_of(mf.path) for mf in files]
        assert counts[:-1] == [counts[0]] * (len(files) - 1) and counts[-1] == counts[0] + 1


def test_the_in_place_writer_gets_the_segment_from_its_write_position(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(commit_log, "IN_PLACE_BYTES_MAX", 16 * 1024)
    cfg = config(tmp_path, mapped_file_size_commitlog=64 * 1024)
    seen: list[tuple[int, int]] = []

    def writer(body: bytes) -> Any:
        def write(buf: Any, pos: int, base: int, now: int,
                  table: dict[tuple[str, int], int]) -> tuple[int, int]:
            seen.append((len(buf), base))
            encoded = stored.encode_messages([msg("F", 0, body)], 1 << 20, 1 << 20)
            size = len(encoded.blob)
            if pos + size + stored.BLANK_ENTRY_SIZE > len(buf):
                return pos, -1  # the Python path's: it rolls the segment
            buf[pos : pos + size] = encoded.blob
            qoff = table.get(("F", 0), 0)
            table[("F", 0)] = stored.patch_positions(buf, pos, base + pos, qoff, now, [0])
            return pos + size, base + pos
        return write

    with MessageStore(cfg, run_threads=False) as store:
        assert store.put([msg("F", 0, b"first")]).ok
        start = store.commit_log.max_offset
        phy = store.put_in_place(writer(b"in place"))
        assert phy == start and seen == [(16 * 1024, start)]
        assert store.put_in_place(writer(os.urandom(20_000))) == -1, "larger than the buffer"
        while store.commit_log.mfq.files[-1].remaining > 16 * 1024:
            assert store.put([msg("F", 0, os.urandom(8000))]).ok
        rest = store.commit_log.mfq.files[-1].remaining
        store.put_in_place(writer(b"x"))
        assert seen[-1][0] == rest, "at a segment's end the buffer is the segment's rest"
        store.run_services_once()
        got = store.get_message("g", "F", 0, 0, 2)
        assert bodies(got) == [b"first", b"in place"]
        mf = store.commit_log.mfq.files[0]
        with open(mf.path, "rb") as f:
            assert f.read(mf.wrote_position).count(b"in place") == 1
