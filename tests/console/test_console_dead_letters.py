"""The console's dead letter resend without a browser (issue 36): "Resend" and "Resend all" send a
dead letter back to its own group only (the group's retry topic, never the original topic), and
the page after a resend says what happened, counted: a second "Resend all" used to say "skipped 0"
when every dead letter was skipped as resent before."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request

import orbitmq
from orbitmq.console import ConsoleServer
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import ConsumerSendMsgBackRequestHeader
from orbitmq.protocol.message import MessageExt
from orbitmq.testing import EmbeddedCluster
from orbitmq.transport import RemotingClient


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


class _Client:
    """A script with the console's cookies that reads a resend's redirect itself."""

    def __init__(self, console: ConsoleServer) -> None:
        self.url = console.url
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect())

    def get(self, path: str) -> str:
        with self.opener.open(self.url + path, timeout=10) as answer:
            return answer.read().decode()

    def resend(self, group: str, **fields: str) -> str:
        """POST the group's resend form (after reading its CSRF token); the redirect's query."""
        page = self.get(f"/dead-letters/{group}")
        token = re.search(r'name="csrf" value="([^"]+)"', page)
        assert token is not None, page[:2000]
        data = urllib.parse.urlencode({"csrf": token.group(1), **fields}).encode()
        try:
            self.opener.open(self.url + f"/dead-letters/{group}/resend", data, timeout=30)
        except urllib.error.HTTPError as e:
            assert e.code == 303, (e.code, e.read()[:2000])
            location = e.headers["Location"]
            assert location.startswith(f"/dead-letters/{group}?"), location
            return str(location.partition("?")[2])
        raise AssertionError("a resend answers with a redirect")


def _read(cluster: EmbeddedCluster, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    with orbitmq.PullConsumer("console-dlq-reader", namesrv=cluster.namesrv) as consumer:
        for mq in consumer.fetch_queues(topic):
            out.extend(consumer.pull(mq, 0, max_nums=32).messages)
    return out


def _dead_letters(cluster: EmbeddedCluster, topic: str, group: str, count: int) -> None:
    """``count`` messages of ``topic``, each failed once by ``group`` (no retry): dead letters."""
    with orbitmq.Admin(cluster.namesrv) as admin:
        admin.update_group(group, retry_max_times=0)
    with orbitmq.Producer("console-dlq-producer", namesrv=cluster.namesrv) as producer:
        for i in range(count):
            producer.send(orbitmq.Message(topic, f"dead-{i}".encode()))
    client = RemotingClient()
    try:
        for msg in _read(cluster, topic):  # what a consumer does with a message it failed
            header = ConsumerSendMsgBackRequestHeader(msg.commit_log_offset, group, 0,
                                                      msg.msg_id, msg.topic)
            cmd = RemotingCommand.request(RequestCode.CONSUMER_SEND_MSG_BACK,
                                          header.to_ext_fields())
            resp = cluster.call(client.invoke(cluster.brokers[0].address, cmd, 5.0))
            assert resp.code == ResponseCode.SUCCESS, resp.remark
    finally:
        cluster.call(client.close())


def test_resend_all_counts_what_happened_and_goes_to_the_group_only(
        cluster: EmbeddedCluster, console: ConsoleServer) -> None:
    topic, group = "console-dlq-counts", "console-dlq-counts-group"
    _dead_letters(cluster, topic, group, 3)
    client = _Client(console)

    first = client.resend(group)
    assert first == "sent=3&skipped=0&before=0&no_topic=0&left=0"
    assert len(_read(cluster, topic)) == 3  # nothing new on the topic other groups read
    assert sorted(m.body for m in _read(cluster, f"%RETRY%{group}")) == [
        b"dead-0", b"dead-1", b"dead-2"]

    again = client.resend(group)
    assert again == "sent=0&skipped=3&before=3&no_topic=0&left=0"
    notice = re.search(r'id="resend-result">([^<]*)<', client.get(f"/dead-letters/{group}?{again}"))
    assert notice is not None
    assert notice.group(1) == (f"Sent 0 back to {group} (its retry topic: no other group gets "
                               "them); skipped 3 (3 resent before, 0 with no original topic "
                               "recorded).")
    assert client.resend(group, force="1") == "sent=3&skipped=0&before=0&no_topic=0&left=0"
    assert len(_read(cluster, f"%RETRY%{group}")) == 6 and len(_read(cluster, topic)) == 3
