"""The console's message trace page, read over HTTP (no browser) from a real console of a real
embedded cluster with the trace topic on: a traced message's producer group, broker, queue and
consumer group, reached from the message's own page; a bad id is a form error."""

from __future__ import annotations

import html
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from console_support import start_console, wait_for

from orbitmq import ConsumeResult, Message
from orbitmq.client import Admin, Producer, PushConsumer, TraceConfig
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster

FAST = TraceConfig(flush_interval_ms=100)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path_factory.mktemp("console-trace"), trace_topic_enable=True) as c:
        yield c


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
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_trace_page_shows_the_journey(cluster: EmbeddedCluster, console: ConsoleServer) -> None:
    done = threading.Event()

    def on_message(messages: list[Any], context: Any) -> ConsumeResult:
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("console-trace-workers", cluster.namesrv, enable_msg_trace=True,
                            trace_config=FAST, consume_from="FIRST")
    consumer.subscribe("ConsoleTraced", "*", on_message)
    with Producer("console-trace-producers", cluster.namesrv, enable_msg_trace=True,
                  trace_config=FAST) as producer:
        consumer.start()
        try:
            sent = producer.send(Message("ConsoleTraced", b"hello", keys=["k-1"]))
            assert done.wait(30)
        finally:
            consumer.shutdown()
    with Admin(cluster.namesrv) as admin:
        wait_for(lambda: len(admin.message_trace(sent.msg_id).consumed) == 1, "the trace records")
    status, message_page = get(f"{console.url}/messages/view?id={sent.offset_msg_id}")
    assert status == 200
    [link] = re.findall(r'id="trace-link" href="([^"]+)"', message_page)
    status, page = get(console.url + html.unescape(link))
    assert status == 200, page
    text = text_of(page)
    for expected in ("console-trace-producers", "console-trace-workers", sent.queue.broker_name,
                     f"{sent.queue.queue_id}, offset {sent.queue_offset}", "success"):
        assert expected in text, text


def test_a_bad_id_is_a_form_error(console: ConsoleServer) -> None:
    status, page = get(f"{console.url}/messages/trace?id=" + urllib.parse.quote("x" * 200))
    assert status == 400 and "at most 128 characters" in text_of(page)
    status, page = get(f"{console.url}/messages/trace")
    assert status == 200 and 'action="/messages/trace"' in page
