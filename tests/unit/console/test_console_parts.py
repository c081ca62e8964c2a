"""The web console's pure parts: chart series from runtime info samples, body views, form values,
login sessions on a fake clock, and the exposure rule (no sockets, no browser)."""

from __future__ import annotations

import json

import pytest

from orbitmq.client.admin.browse import _parse_offsets, consumed_by
from orbitmq.config import ConfigError, ConsoleConfig
from orbitmq.console import forms
from orbitmq.console.groups import is_internal_group, reset_topics
from orbitmq.console.refusals import refusal_of
from orbitmq.console.render import (
    BodyView,
    body_view,
    format_bytes,
    format_ms,
    format_uptime,
    preview,
)
from orbitmq.console.sampler import Sample, disk_use, first_rate, series
from orbitmq.console.security import (
    SessionTable,
    check_exposure,
    is_loopback,
    safe_next,
    tokens_equal,
)
from orbitmq.errors import AccessDeniedError, BrokerError, RemoteProtocolError, broker_error
from orbitmq.protocol.bodies import MessageQueue


def test_series_uses_the_brokers_rates_when_it_reports_them() -> None:
    samples = [
        Sample(1_000, {"commitLogMaxOffset": "0"}),
        Sample(3_000, {"commitLogMaxOffset": "2048", "putTps": "12.50 10.00 3.20",
                       "getTransferedTps": "7.0 1 1"}),
        Sample(4_000, {"commitLogMaxOffset": "1024", "putTps": "garbage"}),  # a new store
    ]
    data = series(samples)
    assert data["t"] == [1.0, 3.0, 4.0]
    assert data["put_tps"] == [None, 12.5, None]
    assert data["get_tps"] == [None, 7.0, None]
    assert data["write_bytes_per_s"] == [None, 1024.0, None]


def test_series_without_rates_charts_the_commit_log_growth_only() -> None:
    data = series([Sample(0, {"commitLogMaxOffset": "10"}), Sample(500, {"commitLogMaxOffset": "60"})])
    assert data["put_tps"] is None and data["get_tps"] is None
    assert data["write_bytes_per_s"] == [None, 100.0]
    assert series([]) == {"t": [], "put_tps": None, "get_tps": None, "write_bytes_per_s": []}


def test_rates_and_disk_use_are_read_leniently() -> None:
    assert first_rate("1.5 2 3") == 1.5
    assert first_rate(None) is None and first_rate("") is None and first_rate("n/a") is None
    assert disk_use({"commitLogDiskRatio": "0.25", "commitLogMinOffset": "100",
                     "commitLogMaxOffset": "612"}) == (0.25, 512)
    assert disk_use({"commitLogMaxOffset": "x"}) == (None, None)


def test_body_views() -> None:
    doc = json.dumps({"a": "<b>"}).encode()
    assert body_view(doc) == (BodyView.JSON, '{\n  "a": "<b>"\n}')
    assert body_view(doc, BodyView.TEXT) == (BodyView.TEXT, '{"a": "<b>"}')
    assert body_view(b"plain words") == (BodyView.TEXT, "plain words")
    view, shown = body_view(b"\x00\x01AB")
    assert view is BodyView.HEX and shown.split() == ["00000000", "00", "01", "41", "42", "..AB"]
    assert shown.index("..AB") == 8 + 2 + 16 * 3 - 1 + 2  # the text column lines up
    assert body_view(b"not json", BodyView.JSON)[0] is BodyView.HEX
    assert body_view("é".encode())[1] == "é"
    assert body_view(b"x" * 100_000)[1] == "x" * 64 * 1024  # a page shows 64 KiB at most
    assert preview(b"a\n  b") == "a b" and len(preview(b"y" * 500)) == 80
    assert preview(b"\xff\xfe") == "ff fe"


def test_times_and_sizes_are_shown_in_utc_and_binary_units() -> None:
    assert format_ms(1_700_000_000_123) == "2023-11-14 22:13:20.123Z"
    assert format_ms(0) == "-" and format_ms(None) == "-"
    assert format_bytes(512) == "512 B" and format_bytes(1536) == "1.5 KiB"
    assert format_bytes(None) == "-"


def test_uptime_is_shown_in_its_largest_units() -> None:
    """It used to be RocketMQ's raw ``[ 0 days, 0 hours, 5 minutes, 2 seconds ]``."""
    assert format_uptime("[ 3 days, 4 hours, 5 minutes, 6 seconds ]") == "3 d 4 h 5 min"
    assert format_uptime("[ 0 days, 2 hours, 0 minutes, 9 seconds ]") == "2 h 0 min"
    assert format_uptime("[ 0 days, 0 hours, 7 minutes, 1 seconds ]") == "7 min"
    assert format_uptime("[ 0 days, 0 hours, 0 minutes, 42 seconds ]") == "42 s"
    assert format_uptime(None) == "-" and format_uptime("up a while") == "up a while"


@pytest.mark.parametrize("error, status, words", [
    (broker_error(17, "no route for topic 'x'"), 404, "No such topic (TOPIC_NOT_EXIST): no route"),
    (BrokerError(18, "topic x exists"), 409, "The topic exists already (TOPIC_EXIST_ALREADY)"),
    (BrokerError(29, "readQueueNums 0 is out of range"), 400, "(INVALID_PARAMETER): readQueue"),
    (BrokerError(2, "too many requests"), 503, "The server is busy; try again (SYSTEM_BUSY)"),
    (BrokerError(1, "disk full"), 502, "The server failed (SYSTEM_ERROR): disk full"),
    (BrokerError(4242), 502, "code 4242"),
    (AccessDeniedError("no rule allows it"), 403, "the console's own user: Not allowed "
                                                  "(NO_PERMISSION): no rule allows it"),
], ids=["not-found", "conflict", "bad-value", "busy", "failed", "unknown-code", "denied"])
def test_a_refusal_is_shown_in_words_with_its_code_name_and_a_fitting_status(
        error: BrokerError, status: int, words: str) -> None:
    """Every refusal used to be a bare number under HTTP 502."""
    refusal = refusal_of(error, "the console's own user")
    assert refusal.http_status == status
    assert words in refusal.reason and "code=" not in refusal.reason


def test_system_groups_are_internal_and_the_reset_form_offers_real_topics_first() -> None:
    for group in ("TOOLS_CONSUMER", "CID_SYS_RMQ_TRANS", "CID_RMQ_SYS_X", "%RESENT%g"):
        assert is_internal_group(group), group
    assert not is_internal_group("orders-group")
    assert reset_topics({"%RETRY%g", "Orders", "%DLQ%g", "Audit"}) == [
        "Audit", "Orders", "%DLQ%g", "%RETRY%g"]


def test_form_values_are_checked_and_refused_by_name() -> None:
    data = {"n": "12", "big": "5000", "word": "x", "t": "2023-11-14T22:13:20", "z": "2023-11-14T23:13:20+01:00"}
    assert forms.integer(data, "n", 1, 100) == 12
    with pytest.raises(forms.FormError, match="big = 5000 is out of range 1..1024"):
        forms.integer(data, "big", 1, 1024)
    with pytest.raises(forms.FormError, match="word = 'x' is not a whole number"):
        forms.integer(data, "word", 0, 9)
    with pytest.raises(forms.FormError, match="missing is required"):
        forms.text(data, "missing")
    assert forms.integer(data, "missing", 0, 9, default=3) == 3
    assert forms.utc_ms(data, "t") == 1_700_000_000_000 == forms.utc_ms(data, "z")
    assert forms.utc_ms({"t": "1700000000000"}, "t") == 1_700_000_000_000
    with pytest.raises(forms.FormError, match="not a time"):
        forms.utc_ms({"t": "yesterday"}, "t")
    with pytest.raises(forms.FormError, match="has 2000 characters"):
        forms.text({"k": "k" * 2000}, "k")
    assert forms.choice({}, "view", ("a", "b"), "a") == "a"
    with pytest.raises(forms.FormError):
        forms.choice({"view": "c"}, "view", ("a", "b"), "a")
    assert forms.flag({"f": "1"}, "f") and not forms.flag({"f": ""}, "f") and not forms.flag({}, "f")


def test_sessions_expire_when_unused_and_the_oldest_go_first() -> None:
    now = [0.0]
    table = SessionTable(ttl_s=10, sessions_max=2, clock=lambda: now[0])
    first = table.open()
    now[0] = 9
    assert table.touch(first)  # used: ten more seconds
    now[0] = 18
    assert table.touch(first)
    now[0] = 28.5
    assert not table.touch(first) and len(table) == 0
    a, b, c = table.open(), table.open(), table.open()
    assert not table.touch(a) and table.touch(b) and table.touch(c)
    table.close(b)
    assert not table.touch(b)
    assert not table.touch("made-up")


def test_tokens_next_targets_and_loopback_names() -> None:
    assert tokens_equal("abc", "abc") and not tokens_equal("abc", "abd")
    assert not tokens_equal("", "abc")
    assert [safe_next(t) for t in ["/topics?all=1", "//evil.example/x", "http://evil.example",
                                   "/\\evil", None, "topics"]] == ["/topics?all=1", "/", "/", "/",
                                                                   "/", "/"]
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.1", "::", "example.com", ""]))


def test_the_console_refuses_exposure_without_a_token_and_hides_the_token() -> None:
    check_exposure(ConsoleConfig())
    check_exposure(ConsoleConfig(console_listen_host="0.0.0.0", console_token="t" * 16))
    with pytest.raises(ConfigError, match="not a loopback address"):
        check_exposure(ConsoleConfig(console_listen_host="0.0.0.0"))
    with pytest.raises(ConfigError) as refused:
        ConsoleConfig(console_token="tiny secret")
    assert "tiny" not in str(refused.value) and "(hidden)" in str(refused.value)


def test_committed_offsets_are_read_per_topic_and_compared_with_a_message() -> None:
    body = json.dumps({"offsetTable": {"T@g1": {"0": 5, "1": 0}, "T@g2": {"0": 3},
                                       "Other@g3": {"0": 9}}}).encode()
    offsets = _parse_offsets(body, "T", "broker-a")
    mq0 = MessageQueue("T", "broker-a", 0)
    assert offsets == {"g1": {mq0: 5, MessageQueue("T", "broker-a", 1): 0}, "g2": {mq0: 3}}
    assert consumed_by(offsets, mq0, 3) == {"g1": True, "g2": False}
    assert consumed_by(offsets, MessageQueue("T", "broker-b", 0), 0) == {}
    with pytest.raises(RemoteProtocolError):
        _parse_offsets(b'{"offsetTable": {"T@g": {"0": "x"}}}', "T", "broker-a")
    with pytest.raises(RemoteProtocolError):
        _parse_offsets(b"[]", "T", "broker-a")
