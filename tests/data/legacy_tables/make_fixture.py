"""Writes the broker tables of tests/data/legacy_tables/ with the tree BEFORE the metadata store
(commit 049535e, the last whose broker saved its tables as JSON files), so that the migration
test reads what that broker really wrote. Run it with that tree first on the path:

    git archive 049535e src | tar -x -C /tmp/oldtree
    ORBITMQ_PURE_PYTHON=1 PYTHONPATH=/tmp/oldtree/src .venv/bin/python \\
        tests/data/legacy_tables/make_fixture.py tests/data/legacy_tables/config

It runs a broker (in process, its own name server), creates topics (one FIFO, one with odd
permissions), subscription groups, consumer offsets and delay offsets, stops it cleanly and
copies ``STORE/config/*.json``.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from orbitmq.broker.tables.subscription_group_manager import SubscriptionGroupConfig
from orbitmq.config import BrokerConfig
from orbitmq.protocol.bodies import TopicConfig
from orbitmq.testing import EmbeddedCluster


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedCluster(Path(tmp)) as cluster:
        broker = cluster.brokers[0]

        async def fill() -> None:
            for i in range(12):
                broker.topics.update(TopicConfig(f"Legacy-{i:02d}", 4, 4))
            broker.topics.update(TopicConfig("LegacyFifo", 2, 2, 6, attributes={"message.type": "FIFO"}))
            broker.topics.update(TopicConfig("LegacyReadOnly", 8, 3, 4, topic_sys_flag=1))
            broker.topics.delete("Legacy-11")
            for i in range(5):
                broker.sub_groups.update(SubscriptionGroupConfig(f"legacy-group-{i}", retry_max_times=3 + i))
            broker.sub_groups.update(SubscriptionGroupConfig("legacy-orderly", consume_message_orderly=True,
                                                             consume_broadcast_enable=False))
            for g in range(5):
                for q in range(4):
                    broker.offsets.commit(f"legacy-group-{g}", f"Legacy-{g:02d}", q, 100 * g + q)
            broker.offsets.commit("legacy-orderly", "LegacyFifo", 1, 2**40)
            for level in (1, 3, 18):
                broker.schedule.offsets[level] = level * 7

        cluster.call(fill())
        config: BrokerConfig = broker.config
        cluster.call(broker.stop())
        src = Path(config.store.store_path) / "config"
        out.mkdir(parents=True, exist_ok=True)
        for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json"):
            shutil.copyfile(src / name, out / name)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
