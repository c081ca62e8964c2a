"""A broker's store is its own: directories 0700 and files 0600 (segments, consume queues,
index, checkpoint, lock, config/*.json, timer and POP files), or what ``store_file_mode``
says; an older store's 0755 root is closed at start. The config directory, where the metadata
store holds the users' secret keys, is owner-only whatever ``store_file_mode`` says."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from orbitmq import Message, Producer, PullConsumer
from orbitmq.client.results import SendStatus
from orbitmq.config import TEST_MIN_STORE, ConfigError, StoreConfig
from orbitmq.testing.embedded import EmbeddedCluster


def modes(root: Path) -> dict[str, int]:
    """Relative path (directories end with /) -> permission bits, the root included."""
    found = {"./": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            path = Path(dirpath, name)
            found[f"{path.relative_to(root)}/"] = stat.S_IMODE(path.stat().st_mode)
        for name in filenames:
            path = Path(dirpath, name)
            found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def use_the_store(cluster: EmbeddedCluster) -> None:
    with Producer("modes-producer", namesrv=cluster.namesrv) as producer:
        for i in range(50):
            assert producer.send(Message("ModesTopic", b"m" * 1000, keys=[f"k{i}"])).status \
                is SendStatus.OK
    with PullConsumer("modes-group", namesrv=cluster.namesrv) as consumer:
        mq = consumer.fetch_queues("ModesTopic")[0]
        result = consumer.pull(mq, 0, 8)
        consumer.update_offset(mq, result.next_begin_offset)


@pytest.mark.parametrize("file_mode", ["0600", "0640"])
def test_the_store_is_closed_to_other_users(tmp_path: Path, file_mode: str):
    old_umask = os.umask(0o022)
    try:
        store = dataclasses.replace(TEST_MIN_STORE, store_file_mode=file_mode)
        root = tmp_path / "broker-a"
        root.mkdir(mode=0o755)  # an older store, made under the usual umask
        with EmbeddedCluster(tmp_path, store=store) as cluster:
            use_the_store(cluster)
    finally:
        os.umask(old_umask)
    found = modes(root)
    want_file = int(file_mode, 8)
    want_dir = want_file | (want_file & 0o444) >> 2
    for name in ("commitlog/", "consumequeue/", "index/", "config/", "checkpoint", "lock",
                 "config/metadata.db"):
        assert name in found, sorted(found)
    assert any(n.startswith("commitlog/0") for n in found)

    def wanted(name: str) -> int:
        if name.startswith("config/"):  # secrets: 0700 and 0600 whatever store_file_mode says
            return 0o700 if name.endswith("/") else 0o600
        return want_dir if name.endswith("/") else want_file

    wrong = {name: oct(mode) for name, mode in found.items() if mode != wanted(name)}
    assert not wrong, wrong


def test_store_file_mode_refuses_modes_that_make_no_sense():
    for bad in ("0700", "0400", "640x", "04600", ""):
        with pytest.raises(ConfigError, match="store_file_mode"):
            StoreConfig(store_file_mode=bad)
