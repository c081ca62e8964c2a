"""The console's topic forms refuse what used to be silent (issue 36): creating a topic that
exists (it rewrote its queues), and an update that lowers the read queues below queues holding
unconsumed messages, unless "force" is ticked. Posted over HTTP as a browser posts them."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

from orbitmq import Message, Producer
from orbitmq.client import Admin
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster


def queues_of(cluster: EmbeddedCluster, topic: str) -> tuple[int, int]:
    """(read, write) queue counts in the broker's own table (the route may lag behind)."""
    tc = cluster.brokers[0].topics.get(topic)
    assert tc is not None, topic
    return tc.read_queue_nums, tc.write_queue_nums


class Browser:
    """Posts the console's forms as a browser does (its CSRF cookie and token kept)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))

    def request(self, path: str, form: dict[str, str] | None = None) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with self.opener.open(self.base + path, data=data, timeout=20) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read().decode()

    def post(self, path: str, page: str, **form: str) -> tuple[int, str]:
        found = re.search(r'name="csrf" value="([^"]+)"', self.request(page)[1])
        assert found
        return self.request(path, {"csrf": found.group(1), **form})


def test_forms_refuse_an_existing_topic_and_a_hiding_shrink(cluster: EmbeddedCluster,
                                                            console: ConsoleServer) -> None:
    topic = "TcConsole"
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
    with Producer("tc-console-producer", namesrv=cluster.namesrv) as producer:
        producer.send(Message(topic, b"x"), lambda mqs, _m, _a: next(m for m in mqs if m.queue_id == 1))
    browser = Browser(console.url)
    settings = {"read_queue_nums": "1", "write_queue_nums": "1", "perm": "6"}
    status, body = browser.post("/topics", "/topics", topic=topic, **settings)
    assert status == 400 and f"topic {topic} exists" in body, body[-2000:]
    assert queues_of(cluster, topic) == (2, 2)
    page = f"/topics/{topic}"
    status, body = browser.post(f"{page}/update", page, **settings)
    assert status == 400 and "broker-a queue 1: 1" in body, body[-2000:]
    assert queues_of(cluster, topic) == (2, 2)
    status, body = browser.post(f"{page}/update", page, force="1", **settings)
    assert status == 200, body[-2000:]
    assert queues_of(cluster, topic) == (1, 1)
