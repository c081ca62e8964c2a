"""The failover timeline of a chaos run (orbitmq.testing.chaos.timeline): write gaps with the
faults in force during them, role changes counted as elections, the report's text and JSON, and
the role watcher keeping only changes (an unreadable state among them)."""

from __future__ import annotations

import json
import threading

from orbitmq.testing.chaos.timeline import (
    FaultSpan,
    RoleChange,
    RoleWatcher,
    make_timeline,
    write_gaps,
)
from orbitmq.testing.failover_set import wait_for

KILL = FaultSpan(10.0, 12.0, 13.5, "kill -9 master (member 1)")
PAUSE = FaultSpan(20.0, 24.0, None, "pause etcd ()")


def test_gaps_over_a_second_are_listed_with_their_faults() -> None:
    acked = [0.0, 0.5, 1.0, 9.9, 10.1, 14.0, 14.2, 14.4, 17.0, 17.5]
    longest, gaps = write_gaps(acked, [KILL, PAUSE])
    assert longest is not None and longest.length_s == 8.9 and longest.faults == ()
    assert [(g.start_s, g.end_s) for g in gaps] == [(1.0, 9.9), (10.1, 14.0), (14.4, 17.0)]
    assert gaps[1].faults == (KILL.what,)  # applied at 10.0, settled at 13.5
    assert gaps[0].faults == () and gaps[2].faults == ()
    # a span that never settled lasts until its heal
    _, during_pause = write_gaps([19.0, 23.0, 25.0, 30.0], [PAUSE])
    assert [g.faults for g in during_pause] == [(PAUSE.what,), (PAUSE.what,), ()]
    assert write_gaps([], []) == (None, []) and write_gaps([1.0], []) == (None, [])


def test_the_timeline_counts_elections_and_prints_everything_in_order() -> None:
    roles = [RoleChange(0.1, 1, "member 1", "in-sync [1, 2, 3]"),
             RoleChange(10.2, None, None, "TimeoutError"),
             RoleChange(11.0, 2, "member 2", "in-sync [2, 3]"),
             RoleChange(13.0, 2, "member 2", "in-sync [1, 2, 3]"),
             RoleChange(21.0, 3, "member 3", "in-sync [3]")]
    timeline = make_timeline([KILL], roles, [0.0, 9.9, 14.0, 14.5])
    assert timeline.elections == 2  # epoch 1 -> 2 -> 3; an in-sync change is not one
    text = timeline.text()
    assert "2 elections" in text and "epoch 2: master member 2 (in-sync [2, 3])" in text
    assert "roles unknown (TimeoutError)" in text
    assert "longest write gap 9.90 s" in text
    order = [line.split()[0] for line in text.splitlines()[1:-1]]
    assert [float(x) for x in order] == sorted(float(x) for x in order)
    saved = json.loads(json.dumps(timeline.to_json()))
    assert saved["elections"] == 2 and saved["longest_write_gap"]["length_s"] == 9.9
    assert saved["write_gaps"][1]["faults"] == [KILL.what]
    assert saved["faults"][0]["settled_s"] == 13.5 and len(saved["roles"]) == 5


def test_the_role_watcher_keeps_changes_only() -> None:
    answers = iter([(1, "member 1", "x")] * 3 + [OSError("etcd paused")] * 2
                   + [(2, "member 2", "x")] * 1000)
    seen = threading.Event()

    def probe() -> tuple[int | None, str | None, str]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        if answer[0] == 2:
            seen.set()
        return answer

    clock = iter(range(10_000))
    watcher = RoleWatcher(probe, lambda: float(next(clock)))
    watcher.start()
    wait_for(seen.is_set, "the second epoch seen", 10.0)
    changes = watcher.stop()
    assert [(c.epoch, c.master, c.detail) for c in changes] == [
        (1, "member 1", "x"), (None, None, "OSError"), (2, "member 2", "x")]
