"""``orbitmq send`` and ``orbitmq consume`` with ``--namespace`` against real servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_cli import Orbitmq, assert_one_line_error, body_of

from orbitmq.testing import EmbeddedCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("cli-ns")) as c:
        yield c


def test_send_and_consume_in_a_namespace(cluster: EmbeddedCluster) -> None:
    orbitmq = Orbitmq(cluster.namesrv)
    for ns in ("shop", "bank"):
        orbitmq("topic", "create", "--topic", f"{ns}%Orders")
        orbitmq("send", "--topic", "Orders", "--namespace", ns, f"{ns}-body")
    for ns in ("shop", "bank"):
        got = orbitmq("consume", "--topic", "Orders", "--group", "Audit", "--namespace", ns,
                      "--timeout", "2")
        assert [body_of(line) for line in got.stdout.splitlines()] == [f"{ns}-body"]
    # the group's offsets were committed under its stored name
    status = orbitmq("group", "status", "--group", "shop%Audit")
    assert "shop%Orders" in status.stdout


def test_a_bad_namespace_is_one_line_on_stderr(cluster: EmbeddedCluster) -> None:
    orbitmq = Orbitmq(cluster.namesrv)
    for args in (("send", "--topic", "Orders", "--namespace", "a%b", "x"),
                 ("consume", "--topic", "Orders", "--group", "G", "--namespace", "a b")):
        line = assert_one_line_error(orbitmq(*args, ok=False))
        assert "namespace" in line
