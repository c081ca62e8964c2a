"""What the console's pages say, read over HTTP from a real console of a real embedded cluster (no
browser): uptime in words, topic lists with their message counts and without system topics
unless asked, a refusal in words with its code's name, and an offset reset form that offers the
group's real topic first."""

from __future__ import annotations

import contextlib
import html
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from console_support import start_console, wait_for

import orbitmq
from orbitmq import ConsumeFrom, ConsumeResult, Message
from orbitmq.client import Admin
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster

CONSUME_WAIT_S = 30.0


@pytest.fixture(scope="module")
def console(cluster: EmbeddedCluster) -> Iterator[ConsoleServer]:
    server = start_console(cluster)
    try:
        yield server
    finally:
        cluster.call(server.stop())


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def text_of(page: str) -> str:
    """The page's text, tags dropped and spaces folded, for asserting on what a person reads."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_cluster_page_shows_uptime_in_words(console: ConsoleServer) -> None:
    status, page = get(console.url + "/")
    assert status == 200
    [uptime] = re.findall(r'<td class="uptime">([^<]*)</td>', page)
    assert re.fullmatch(r"\d+ s|\d+ min|\d+ h \d+ min|\d+ d \d+ h \d+ min", uptime), uptime
    assert "[ 0 days" not in text_of(page.split("<h2>Runtime info")[0])


def test_the_topic_list_counts_messages_and_hides_system_topics(
        cluster: EmbeddedCluster, console: ConsoleServer) -> None:
    with orbitmq.Producer("pages-producer", namesrv=cluster.namesrv) as producer:
        for i in range(3):
            producer.send(Message("pages-counted", f"m{i}".encode()))
    status, page = get(console.url + "/topics")
    assert status == 200
    row = re.search(r'href="/topics/pages-counted">pages-counted</a></td><td class="namespace"></td>'
                    r'<td>normal</td>\s*'
                    r'<td class="num">(\d+)</td>\s*<td class="num messages">(\d+)</td>', page)
    assert row is not None, page
    assert int(row.group(2)) == 3 and int(row.group(1)) >= 1
    assert ">TBW102<" not in page and "system, retry and dead letter topics" in page
    status, every = get(console.url + "/topics?all=1")
    assert status == 200 and ">TBW102<" in every


def test_a_refusal_is_shown_in_words_with_its_code_name(console: ConsoleServer) -> None:
    status, page = get(console.url + "/topics/pages-no-such-topic")
    assert status == 404
    assert "No such topic (TOPIC_NOT_EXIST)" in text_of(page)


@contextlib.contextmanager
def consuming(namesrv: str, group: str, topic: str) -> Iterator[None]:
    """A live push consumer of ``group`` that took one message; it subscribes the group's retry
    topic too, as every push consumer does."""
    done = threading.Event()
    consumer = orbitmq.PushConsumer(group, namesrv=namesrv, consume_from=ConsumeFrom.FIRST,
                                    persist_consumer_offset_interval_ms=200)

    @consumer.subscribe(topic)
    def on_message(messages: list[Any], context: Any) -> ConsumeResult:
        done.set()
        return ConsumeResult.SUCCESS

    consumer.start()
    try:
        assert done.wait(CONSUME_WAIT_S), f"{group} received nothing from {topic}"
        yield
    finally:
        consumer.shutdown()


def test_the_offset_reset_form_defaults_to_the_groups_topic_and_system_groups_hide(
        cluster: EmbeddedCluster, console: ConsoleServer) -> None:
    """The form's first topic used to be the group's %RETRY% topic (it sorts first by name)."""
    with orbitmq.Producer("pages-producer", namesrv=cluster.namesrv) as producer:
        producer.send(Message("pages-reset", b"x"))
    with Admin(cluster.namesrv) as admin:  # a system group the list must hide
        admin.update_group("CID_RMQ_SYS_PAGES", retry_max_times=3)

    def options() -> list[str]:
        status, page = get(console.url + "/groups/pages-group")
        assert status == 200
        form = page.split('id="reset-offset"', 1)[1].split("</form>", 1)[0]
        found = re.findall(r"<option>([^<]*)</option>", form)
        return found if "%RETRY%pages-group" in found else []

    with consuming(cluster.namesrv, "pages-group", "pages-reset"):
        offered = wait_for(options, "the group's topics, its retry topic among them")
    assert offered[0] == "pages-reset"
    status, groups = get(console.url + "/groups")
    assert status == 200 and "pages-group" in groups and "CID_RMQ_SYS_PAGES" not in groups
    assert "CID_RMQ_SYS_PAGES" in get(console.url + "/groups?all=1")[1]


def test_topics_and_groups_by_namespace(cluster: EmbeddedCluster, console: ConsoleServer) -> None:
    for ns in ("pshop", "pbank"):
        with orbitmq.Producer("pages-ns", namesrv=cluster.namesrv, namespace=ns) as producer:
            producer.send(Message("Orders", ns.encode()))
        with Admin(cluster.namesrv) as admin:
            admin.update_group(f"{ns}%Billing")
    status, page = get(console.url + "/topics")
    assert status == 200
    assert re.search(r'href="/topics/pshop%25Orders">pshop%Orders</a></td><td class="namespace">'
                     r'pshop</td>', page), page
    assert 'href="/topics?namespace=pbank"' in page and 'href="/topics?namespace=pshop"' in page
    status, page = get(console.url + "/topics?namespace=pshop")
    assert status == 200 and ">pshop%Orders<" in page and ">pbank%Orders<" not in page
    assert ">pages-counted<" not in page
    status, page = get(console.url + "/groups?namespace=pbank")
    assert status == 200 and ">pbank%Billing<" in page and ">pshop%Billing<" not in page
    assert '<td class="namespace">pbank</td>' in page
    status, page = get(console.url + "/groups?namespace=no%25such")
    assert status == 400 and "namespace" in text_of(page)
