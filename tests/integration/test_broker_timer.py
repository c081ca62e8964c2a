"""Timer messages over remoting (RocketMQ 5's TIMER_* properties from a 4.x client), restarts,
and a fire resumed after a crash between a delivery and its checkpoint."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_support import BrokerHarness, broker_config

from orbitmq.assembly import build_broker
from orbitmq.protocol.codes import ResponseCode

TOPIC = "TimerT"
WAIT_S = 15.0


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[BrokerHarness]:
    h = BrokerHarness(broker_config(tmp_path / "store"))
    try:
        yield h
    finally:
        h.close()


def _delivered(h: BrokerHarness, topic: str = TOPIC) -> list[bytes]:
    return [bytes(m.body) for m in h.pull_all(topic, 0)]


def _wait_delivered(h: BrokerHarness, want: int, topic: str = TOPIC) -> list[bytes]:
    deadline = time.monotonic() + WAIT_S
    while True:
        got = _delivered(h, topic)
        if len(got) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def test_timer_properties_deliver_at_their_time_not_before(harness: BrokerHarness) -> None:
    now = int(time.time() * 1000)
    harness.send_ok(TOPIC, b"abs", props={"TIMER_DELIVER_MS": str(now + 1500)})
    harness.send_ok(TOPIC, b"rel", props={"TIMER_DELAY_SEC": "1"})
    harness.send_ok(TOPIC, b"now", props={"TIMER_DELIVER_MS": str(now - 10)})  # due: stored at once
    assert _delivered(harness) == [b"now"]
    got = _wait_delivered(harness, 3)
    assert sorted(got) == [b"abs", b"now", b"rel"]
    assert int(time.time() * 1000) >= now + 1500
    [abs_copy] = [m for m in harness.pull_all(TOPIC, 0) if bytes(m.body) == b"abs"]
    assert int(abs_copy.properties["TIMER_OUT_MS"]) >= now + 1500  # fired at or after its time


def test_bad_timer_properties_are_refused(harness: BrokerHarness) -> None:
    r = harness.send(TOPIC, b"x", props={"TIMER_DELAY_SEC": "soon"})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "TIMER_DELAY_SEC" in r.remark
    far = int(time.time() * 1000) + 400 * 86_400_000
    r = harness.send(TOPIC, b"x", props={"TIMER_DELIVER_MS": str(far)})
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "timer_max_delay_s" in r.remark


def test_pending_timers_survive_a_restart(harness: BrokerHarness) -> None:
    for i in range(5):
        harness.send_ok(TOPIC, f"t{i}".encode(), props={"TIMER_DELAY_MS": str(1500 + 100 * i)})
    harness.restart()
    assert sorted(_wait_delivered(harness, 5)) == [f"t{i}".encode() for i in range(5)]


def test_a_fire_resumed_after_a_crash_delivers_nothing_twice(harness: BrokerHarness) -> None:
    harness.send_ok(TOPIC, b"once", props={"TIMER_DELAY_MS": "300"})
    assert _wait_delivered(harness, 1) == [b"once"]
    timer = harness.broker.timer
    record = next(timer.files.chain(1))  # the one record of the log (position 0)
    harness.call(harness.client.close())
    harness.call(harness.broker.stop())
    # As if the broker died after storing the delivered copy and before counting it: the
    # checkpoint still says the record's chain is being fired with nothing delivered yet.
    check = Path(harness.config.store.store_path) / "timer" / "timercheck.json"
    data = json.loads(check.read_text())
    data["firing"] = {"tick": record.tick, "head": record.pos + 1, "done": 0}
    data["fired_through"] = record.tick - 1
    check.write_text(json.dumps(data))
    harness.broker = build_broker(harness.config)
    harness.client = type(harness.client)()
    harness.call(harness.broker.start())
    deadline = time.monotonic() + WAIT_S
    while harness.broker.timer.files.checkpoint.firing is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert harness.broker.timer.skipped_after_crash == 1
    assert _delivered(harness) == [b"once"]


def test_a_batch_may_not_hold_timer_messages(harness: BrokerHarness) -> None:
    r = harness.send_batch(TOPIC, [(b"a", {}), (b"b", {"TIMER_DELAY_SEC": "5"})])
    assert r.code == ResponseCode.MESSAGE_ILLEGAL and "timer" in r.remark
    r = harness.send_batch(TOPIC, [(b"TIMER_ in a body is fine", {})])
    assert r.code == ResponseCode.SUCCESS, r.remark
