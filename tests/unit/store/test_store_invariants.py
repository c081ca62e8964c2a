"""The store's invariant assertions hold their ground: an append whose blob does not match its
messages is stopped before a byte is written (assertions, so skipped under ``python -O``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_fixtures import config, msg

from orbitmq.protocol import stored
from orbitmq.protocol.stored import EncodedBatch
from orbitmq.store import MessageStore

pytestmark = pytest.mark.skipif(not __debug__, reason="assertions are stripped under -O")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(config(tmp_path), run_threads=False) as s:
        yield s


def _encoded(count: int) -> EncodedBatch:
    return stored.encode_messages([msg("T", 0, b"%d" % i) for i in range(count)], 1 << 20, 1 << 20)


def test_a_blob_that_is_not_its_messages_is_never_written(store: MessageStore) -> None:
    good = _encoded(2)
    assert store.put(good).ok
    before = store.max_physical_offset()
    cut = _encoded(2)
    cut.blob = cut.blob[:-1]  # the last message one byte short
    with pytest.raises(AssertionError, match="sizes match"):
        store.commit_log.append(cut)
    shifted = _encoded(2)
    shifted.rel_positions = [0, shifted.rel_positions[1] + 1]  # the second message misplaced
    with pytest.raises(AssertionError, match="sizes match"):
        store.commit_log.append(shifted)
    assert store.max_physical_offset() == before
    assert store.put(_encoded(1)).ok  # and the log goes on where it was
    store.wake()
    assert store.get_max_offset_in_queue("T", 0) == 3


def test_the_store_refuses_such_an_append_as_an_internal_error(store: MessageStore) -> None:
    cut = _encoded(1)
    cut.blob = cut.blob + b"\0"
    result = store.put(cut)
    assert result.status.name == "UNKNOWN_ERROR" and result.append is None
    assert store.max_physical_offset() == 0
