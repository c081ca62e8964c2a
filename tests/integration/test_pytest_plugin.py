"""The ``orbitmq`` pytest plugin, run by pytester the way a user's test suite runs it: fixtures,
their scopes and their teardown, the ini option, and the example in examples/.

The inner runs load the plugin by its module name (``-p no:orbitmq -p ...``), so that they test
this tree's plugin whether or not the installed OrbitMQ is this tree (a shared virtualenv may
hold another); the entry point itself is checked against pyproject.toml and the installed
metadata.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import tomllib
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "orbitmq.testing.pytest_plugin"
PLUGIN_ARGS = ("-p", "no:orbitmq", "-p", PLUGIN, "-p", "no:cacheprovider")

# An inner test module that records what it saw in a JSON file next to it.
RECORDER = '''
import json, pathlib
import orbitmq
from orbitmq.store.store_lock import check_store_free
from orbitmq.errors import StoreError

SEEN = pathlib.Path(__file__).with_name("seen.json")

def record(**kv):
    seen = json.loads(SEEN.read_text()) if SEEN.exists() else []
    seen.append(kv)
    SEEN.write_text(json.dumps(seen))

def store_in_use(path):
    try:
        check_store_free(path)
        return False
    except StoreError:
        return True
'''


def _seen(pytester: pytest.Pytester) -> list[dict[str, object]]:
    return json.loads((pytester.path / "seen.json").read_text())


def test_one_cluster_serves_the_session_each_test_gets_its_topic_and_the_factory_more(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=RECORDER + '''
def test_first(orbitmq_cluster, orbitmq_namesrv, orbitmq_topic):
    assert orbitmq_namesrv == orbitmq_cluster.namesrv
    with orbitmq.Producer("p", namesrv=orbitmq_namesrv) as producer:
        sent = producer.send(orbitmq.Message(orbitmq_topic, b"hello"))
    assert sent.status is orbitmq.SendStatus.OK
    record(namesrv=orbitmq_namesrv, topic=orbitmq_topic,
           store=orbitmq_cluster.broker_config(0).store.store_path)

def test_second(orbitmq_cluster, orbitmq_topic):
    with orbitmq.Admin(orbitmq_cluster.namesrv) as admin:
        assert all(q.max_offset == 0 for q in admin.topic_status(orbitmq_topic))
    record(namesrv=orbitmq_cluster.namesrv, topic=orbitmq_topic)

def test_factory(orbitmq_cluster_factory, orbitmq_cluster):
    two = orbitmq_cluster_factory(brokers=2, enable_property_filter=True)
    assert two.namesrv != orbitmq_cluster.namesrv
    assert [b.config.broker_name for b in two.brokers] == ["broker-a", "broker-b"]
    assert all(b.config.enable_property_filter for b in two.brokers)
    with orbitmq.Admin(two.namesrv) as admin:
        assert len(admin.cluster_info().broker_addr_table) == 2
    record(stores=[two.broker_config(i).store.store_path for i in range(2)])
''')
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS)
    result.assert_outcomes(passed=3)
    first, second, factory = _seen(pytester)
    assert first["namesrv"] == second["namesrv"]
    assert first["topic"] != second["topic"]
    assert str(first["topic"]).startswith("test_first-")
    store = str(first["store"])
    from orbitmq.store.store_lock import check_store_free

    check_store_free(store)  # the session's broker stopped and let its store go
    for store in factory["stores"]:  # type: ignore[union-attr]
        check_store_free(str(store))  # and so did the factory's, after their test


def test_the_ini_option_gives_each_test_a_cluster_of_its_own(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\norbitmq_cluster_scope = function\n")
    pytester.makepyfile(test_inner=RECORDER + '''
import threading

def test_asking_for_nothing_starts_nothing():
    assert "orbitmq-embedded" not in [t.name for t in threading.enumerate()]

def test_first(orbitmq_cluster):
    assert "orbitmq-embedded" in [t.name for t in threading.enumerate()]
    store = orbitmq_cluster.broker_config(0).store.store_path
    assert store_in_use(store)
    record(namesrv=orbitmq_cluster.namesrv, store=store)

def test_second(orbitmq_cluster):
    first = json.loads(SEEN.read_text())[0]
    assert not store_in_use(first["store"])  # the first test's cluster was stopped after it
    record(namesrv=orbitmq_cluster.namesrv)

def test_last_asks_for_nothing_again():
    assert "orbitmq-embedded" not in [t.name for t in threading.enumerate()]
''')
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS)
    result.assert_outcomes(passed=4)
    first, second = _seen(pytester)
    assert first["namesrv"] != second["namesrv"]


def test_an_unknown_scope_is_refused_by_name(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\norbitmq_cluster_scope = forever\n")
    pytester.makepyfile(test_inner="def test_it(orbitmq_cluster):\n    pass\n")
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS)
    assert result.ret != 0
    assert "orbitmq_cluster_scope = 'forever' is not one of" in (
        result.stdout.str() + result.stderr.str())


def _first_python_block(path: Path, section: str | None = None) -> str:
    text = path.read_text()
    if section is not None:
        text = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", text, re.S)[0]


def test_the_examples_of_examples_docs_and_readme_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_with_orbitmq=(ROOT / "examples" / "test_with_orbitmq.py").read_text(),
        test_docs_example=_first_python_block(ROOT / "docs" / "testing.md"),
        test_readme_example=_first_python_block(ROOT / "README.md",
                                                "Testing your code against OrbitMQ"))
    result = pytester.runpytest_subprocess(*PLUGIN_ARGS, "-W", "error")
    result.assert_outcomes(passed=5)


def test_the_plugin_is_registered_for_pytest() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert declared["pytest11"] == {"orbitmq": PLUGIN}
    dist = importlib.metadata.distribution("orbitmq")
    origin = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    if origin == ROOT.as_uri():  # installed from this tree (make install): pytest loads it
        installed = {ep.name: ep.value for ep in dist.entry_points if ep.group == "pytest11"}
        assert installed == {"orbitmq": PLUGIN}
