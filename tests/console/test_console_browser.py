"""The web console in a real browser (Debian's headless Chromium driven by Playwright) against a
real embedded cluster: what an operator does, click by click, with the SDK on the other side."""

from __future__ import annotations

import json
import threading
from typing import Any

from console_support import start_console, wait_for

import orbitmq
from orbitmq import ConsumeFrom, ConsumeResult, Message
from orbitmq.console import ConsoleServer
from orbitmq.testing import EmbeddedCluster


def _consume_one(namesrv: str, group: str, topic: str, *, fail: bool = False) -> list[Any]:
    """Start a push consumer of ``group`` (from the first message), wait for one message, shut it
    down (which commits its offsets) and return what it got. ``fail``: it fails every message,
    with no retry, so each goes straight to the dead letter queue."""
    got: list[Any] = []
    done = threading.Event()
    options: dict[str, Any] = {"consume_from": ConsumeFrom.FIRST,
                               "persist_consumer_offset_interval_ms": 200}
    if fail:
        options["max_reconsume_times"] = 0
    consumer = orbitmq.PushConsumer(group, namesrv=namesrv, **options)

    @consumer.subscribe(topic)
    def on_message(messages: list[Any], context: Any) -> ConsumeResult:
        got.extend(messages)
        done.set()
        return ConsumeResult.RECONSUME_LATER if fail else ConsumeResult.SUCCESS

    consumer.start()
    try:
        assert done.wait(20), f"{group} received nothing from {topic}"
    finally:
        consumer.shutdown()
    return got


def _send(namesrv: str, topic: str, body: bytes, key: str) -> Any:
    with orbitmq.Producer("console-test-producer", namesrv=namesrv) as producer:
        return producer.send(Message(topic, body, tags="created", keys=[key]))


def test_create_a_topic_send_and_find_the_message_by_key(
        cluster: EmbeddedCluster, console: ConsoleServer, page: Any, screenshot: Any) -> None:
    topic = "console-orders"
    page.goto(console.url + "/topics")
    form = page.locator("#create-topic")
    name = form.locator("input[name=topic]")
    name.fill("no spaces allowed")  # the browser itself refuses what the broker would
    assert name.evaluate("e => e.validity.patternMismatch")
    name.fill("%DLQ%|ok_name-1")
    assert not name.evaluate("e => e.validity.patternMismatch")
    name.fill(topic)
    form.locator("input[name=read_queue_nums]").fill("4")
    form.locator("input[name=write_queue_nums]").fill("4")
    form.locator("button").click()
    page.wait_for_url(f"**/topics/{topic}?notice=created")
    assert page.locator(".notice").inner_text() == "Topic created."
    assert page.locator("#queues tbody tr").count() == 4
    with orbitmq.Admin(cluster.namesrv) as admin:
        assert [q.write_queue_nums for q in admin.topic_route(topic).queue_datas] == [4]

        # A body with markup in it: shown as text, never run.
        body = json.dumps({"order": 42, "note": "<script>window.pwned = 1</script>"}).encode()
        sent = _send(cluster.namesrv, topic, body, "order-42")
        wait_for(lambda: admin.query_messages(topic, "order-42"), "the key index")

    page.goto(console.url + "/messages?by=key")
    search = page.locator("#search")
    search.locator("input[name=topic]").fill(topic)
    search.locator("input[name=key]").fill("order-42")
    search.locator("button").click()
    rows = page.locator("#results tbody tr")
    assert rows.count() == 1 and sent.msg_id in rows.inner_text()
    screenshot(page, "console-messages")
    rows.locator("a").click()
    page.wait_for_url("**/messages/view?**")
    shown = page.locator("#body")
    assert shown.get_attribute("data-view") == "json"
    assert "<script>window.pwned = 1</script>" in shown.inner_text()
    assert page.evaluate("window.pwned") is None
    assert "No group has committed" in page.locator("#consumed-by").inner_text()

    page.locator("#body-views a", has_text="hex").click()
    assert page.locator("#body").get_attribute("data-view") == "hex"
    assert "7b 22 6f 72 64 65 72 22" in page.locator("#body").inner_text()  # {"order"

    # A group consumes it: the message page says so, the group page shows no lag.
    got = _consume_one(cluster.namesrv, "console-billing", topic)
    assert [m.msg_id for m in got] == [sent.msg_id]
    page.locator("#body-views a", has_text="json").click()
    assert page.locator("#body").get_attribute("data-view") == "json"
    assert "console-billing yes" in " ".join(page.locator("#consumed-by").inner_text().split())
    screenshot(page, "console-message")
    page.goto(console.url + "/groups/console-billing")
    assert page.locator("#total-lag").inner_text() == "0"

    # Reset the group to before the message: one message to consume again.
    reset = page.locator("#reset-offset")
    reset.locator("select[name=topic]").select_option(topic)
    reset.locator("input[name=time]").fill("2020-01-01T00:00:00")
    reset.locator("button").click()
    page.wait_for_url("**/groups/console-billing?notice=reset")
    assert page.locator("#total-lag").inner_text() == "1"
    screenshot(page, "console-group")


def test_cluster_page_shows_the_broker_and_charts_its_rates(
        cluster: EmbeddedCluster, console: ConsoleServer, page: Any, screenshot: Any) -> None:
    page.goto(console.url + "/")
    broker = cluster.brokers[0]
    table = page.locator("table.data").first
    assert "broker-a" in table.inner_text() and broker.address in table.inner_text()
    assert "master" in table.inner_text()
    for i in range(20):  # traffic, so that the commit log grows while the charts are sampled
        _send(cluster.namesrv, "console-traffic", b"x" * 512, f"k{i}")
    page.wait_for_function("Number(document.getElementById('charts').dataset.points) >= 5",
                           timeout=15_000)
    assert page.locator("#charts .chart canvas").count() >= 1
    assert "commitLogMaxOffset" in (page.locator("details").first.text_content() or "")
    screenshot(page, "console-cluster")


def test_resend_a_dead_letter_and_see_it_consumed(
        cluster: EmbeddedCluster, console: ConsoleServer, page: Any, screenshot: Any) -> None:
    topic, group = "console-payments", "console-dlq"
    sent = _send(cluster.namesrv, topic, b"payment 7", "pay-7")
    _consume_one(cluster.namesrv, group, topic, fail=True)  # no retry: a dead letter at once
    with orbitmq.Admin(cluster.namesrv) as admin:
        wait_for(lambda: admin.dead_letter_entries(group), "the dead letter")

    page.goto(console.url + "/dead-letters")
    page.locator("#dlq-groups a", has_text=group).click()
    page.wait_for_url(f"**/dead-letters/{group}")
    row = page.locator("#dead-letters tbody tr")
    assert row.count() == 1
    cells = row.locator("td")
    assert sent.msg_id in cells.nth(1).inner_text() and cells.nth(2).inner_text() == topic
    assert cells.nth(6).inner_text() == "no"
    row.locator("button", has_text="Resend").click()
    page.wait_for_url(f"**/dead-letters/{group}?sent=1&skipped=0&before=0&no_topic=0&left=0")
    assert page.locator("#resend-result").inner_text().startswith(f"Sent 1 back to {group} ")
    assert page.locator("#dead-letters tbody tr td").nth(6).inner_text() == "yes"
    screenshot(page, "console-dead-letters")

    # The group gets it back (through its retry topic), with the id and topic it was sent with.
    got = _consume_one(cluster.namesrv, group, topic)
    assert [(m.msg_id, m.topic, bytes(m.body)) for m in got] == [(sent.msg_id, topic,
                                                                  b"payment 7")]

    # A second resend of everything sends nothing: it was resent already, and says so.
    page.locator("#resend-all button").click()
    page.wait_for_url(f"**/dead-letters/{group}?sent=0&skipped=1&before=1&no_topic=0&left=0")
    assert page.locator("#dead-letters tbody tr td").nth(6).inner_text() == "yes"


def test_forms_refuse_a_missing_or_wrong_csrf_token(
        cluster: EmbeddedCluster, console: ConsoleServer, page: Any) -> None:
    page.goto(console.url + "/topics")  # the browser now holds the console's CSRF cookie
    fields = {"topic": "csrf-victim", "read_queue_nums": "1", "write_queue_nums": "1", "perm": "6"}
    token = page.locator("#create-topic input[name=csrf]").input_value()
    url = console.url + "/topics"
    refused = [
        page.request.post(url, form=fields, max_redirects=0),
        page.request.post(url, form={**fields, "csrf": "0" * len(token)}, max_redirects=0),
        page.request.post(url, form={**fields, "csrf": token}, max_redirects=0,
                          headers={"Origin": "http://evil.example"}),
    ]
    assert [r.status for r in refused] == [403, 403, 403]
    assert "CSRF" in refused[0].text()
    with orbitmq.Admin(cluster.namesrv) as admin:
        assert "csrf-victim" not in admin.list_topics()
        accepted = page.request.post(url, form={**fields, "csrf": token}, max_redirects=0)
        assert accepted.status == 303
        assert "csrf-victim" in admin.list_topics()  # the console waited for its route


def test_a_token_is_asked_by_a_login_form(cluster: EmbeddedCluster, page: Any,
                                          screenshot: Any) -> None:
    token = "console-test-token-0123456789"
    server = start_console(cluster, console_token=token)
    try:
        page.goto(server.url + "/topics")
        page.wait_for_url("**/login?next=/topics")
        page.locator("input[name=token]").fill("not-the-token-at-all")
        page.locator("form.card button").click()
        assert page.locator("p.error").inner_text() == "Wrong token."
        screenshot(page, "console-login")
        page.locator("input[name=token]").fill(token)
        page.locator("form.card button").click()
        page.wait_for_url("**/topics")
        assert page.locator("#topics").is_visible()
        page.locator("header button", has_text="Log out").click()
        page.wait_for_url("**/login?notice=logged-out")
        page.goto(server.url + "/groups")
        page.wait_for_url("**/login?next=/groups")
    finally:
        cluster.call(server.stop())

