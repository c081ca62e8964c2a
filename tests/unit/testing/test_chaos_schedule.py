"""The chaos schedule (orbitmq.testing.chaos.schedule): a seed replays it exactly, faults come
one at a time and are all healed within the run, and each cluster of a run gets its own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.testing.chaos.clusters import LEASE_TTL_S, ControllerCluster
from orbitmq.testing.chaos.schedule import (
    STEPS_MAX,
    FaultKind,
    FaultMenu,
    make_schedule,
    restrict,
    sub_seed,
)

MENU = FaultMenu(targets={FaultKind.KILL: ("master", "slave"), FaultKind.PAUSE: ("master",),
                          FaultKind.CUT: ()},
                 holds_s={FaultKind.KILL: (0.5, 3.0), FaultKind.PAUSE: (1.0, 4.0),
                          FaultKind.CUT: (1.0, 2.0)})


@given(st.integers(0, 2**31), st.floats(0.0, 600.0))
def test_a_seed_replays_its_schedule_and_faults_never_overlap(seed: int, duration_s: float) -> None:
    steps = make_schedule(seed, duration_s, MENU)
    assert steps == make_schedule(seed, duration_s, MENU)
    assert len(steps) <= STEPS_MAX
    for step in steps:
        assert step.kind in (FaultKind.KILL, FaultKind.PAUSE)  # CUT offers no target here
        assert step.target in MENU.targets[step.kind]
        low, high = MENU.holds_s[step.kind]
        assert low <= step.hold_s <= high + 0.01
        assert step.at_s + step.hold_s <= duration_s + 0.01
    for a, b in zip(steps, steps[1:], strict=False):
        assert b.at_s >= a.at_s + a.hold_s + MENU.gap_s[0] - 0.01


def test_each_cluster_of_a_run_gets_its_own_seed_and_a_run_its_own_schedules() -> None:
    assert sub_seed(7, "standalone") == sub_seed(7, "standalone")
    assert sub_seed(7, "standalone") != sub_seed(7, "controller")
    assert sub_seed(7, "standalone") != sub_seed(8, "standalone")
    assert make_schedule(1, 60, MENU) != make_schedule(2, 60, MENU)


def test_a_menu_without_targets_makes_no_schedule() -> None:
    empty = FaultMenu(targets={}, holds_s={})
    assert make_schedule(1, 600, empty) == []


def test_a_run_restricted_to_fault_kinds_draws_only_those() -> None:
    only = restrict(MENU, ["pause"])
    steps = make_schedule(3, 120, only)
    assert steps and {s.kind for s in steps} == {FaultKind.PAUSE}
    assert make_schedule(3, 120, only) == steps  # still replayed from the seed
    with pytest.raises(ValueError, match="unknown fault kinds nap"):
        restrict(MENU, ["pause", "nap"])


def test_the_controller_cluster_offers_the_network_and_clock_faults_where_it_can() -> None:
    full = ControllerCluster.menu_for(partitions=True, clock=True)
    for kind in (FaultKind.ONE_WAY, FaultKind.BRIDGE, FaultKind.SKEW):
        assert full.targets[kind] and full.holds_s[kind][0] > LEASE_TTL_S
    assert all("->" in t for t in full.targets[FaultKind.ONE_WAY])
    assert {"etcd-leader", "etcd-follower"} <= set(full.targets[FaultKind.ISOLATE])
    bare = ControllerCluster.menu_for(partitions=False, clock=False)
    assert set(bare.targets) == {FaultKind.KILL, FaultKind.PAUSE, FaultKind.BITFLIP, FaultKind.TRUNCATE}
    # the seeded run of tests/chaos/test_chaos_network_clock.py draws all three
    steps = make_schedule(sub_seed(10, "controller"), 40,
                          restrict(full, ["one-way", "bridge", "isolate", "skew"]))
    assert {s.kind for s in steps} >= {FaultKind.ONE_WAY, FaultKind.BRIDGE, FaultKind.SKEW}
