"""The seeded fault schedule of a chaos run: what to break, when, and for how long.

Pure: a seed, a duration and the faults a cluster offers give the same schedule on every machine,
so a run is replayed from its seed (the servers' own timing is not: the report prints what each
step resolved to when it ran). Faults come one at a time: a fault is applied, held, healed, and
the cluster gets a quiet gap before the next, so that each failure the checker finds belongs to
one step of the schedule.

Targets are roles, resolved when the step runs (``master`` is whoever is master then), so that a
schedule hits the master as often as the others whatever the elections did before.
"""

from __future__ import annotations

import dataclasses
import enum
import random
from collections.abc import Sequence

__all__ = ["FaultKind", "Fault", "FaultMenu", "make_schedule", "restrict", "sub_seed", "STEPS_MAX"]

# A schedule never has more steps than this, whatever the duration: a bound on the loop and on
# the report's length.
STEPS_MAX = 1000


class FaultKind(enum.Enum):
    """The faults a cluster may offer."""

    KILL = "kill -9"  # SIGKILL, then start again on the same store (and address where it can)
    PAUSE = "pause"  # SIGSTOP for the hold, then SIGCONT (a GC stall, a VM freeze)
    ISOLATE = "isolate"  # cut every link of the target (network namespaces), then heal
    CUT = "cut"  # cut the link between the target's two ends, then heal
    # A slave's newest commit log segment damaged (testing/chaos/corruption.py): a body bit
    # flipped (under the running broker's mapping, or while it is down: target ``slave-stopped``)
    # or the segment cut mid-message while it is down; the heal checks it is repaired.
    BITFLIP = "bitflip"
    TRUNCATE = "truncate"
    # The power-loss layer (testing/lazyfs.py) under the target's store:
    POWER = "power"  # unsynced data dropped, the servers on it killed -9; remount, restart
    STALL = "stall"  # every file operation of the store blocks for the hold
    FULL = "full"  # writes and allocations fail with ENOSPC for the hold
    ONE_WAY = "one-way"  # drop the packets one way only (``a->b``: a's to b), then heal
    BRIDGE = "bridge"  # two halves that each still reach one bridge node, then heal
    SKEW = "skew"  # step or drift the target's clock (libfaketime), then back to true time


@dataclasses.dataclass(frozen=True)
class FaultMenu:
    """What one cluster offers: per kind, the targets it may hit and the hold range in seconds.

    A target names a role (``master``, ``slave``, ``etcd``, ``master+etcd``, ``all`` members,
    ``master-etcd`` for a link); the cluster resolves it when the step runs.
    """

    targets: dict[FaultKind, tuple[str, ...]]
    holds_s: dict[FaultKind, tuple[float, float]]
    gap_s: tuple[float, float] = (2.0, 5.0)


@dataclasses.dataclass(frozen=True)
class Fault:
    """One step: at ``at_s`` (seconds after the load began) apply ``kind`` to ``target``, heal it
    ``hold_s`` later."""

    at_s: float
    kind: FaultKind
    target: str
    hold_s: float

    def text(self) -> str:
        return f"{self.at_s:7.2f} s  {self.kind.value:8} {self.target:12} hold {self.hold_s:5.2f} s"


def sub_seed(seed: int, name: str) -> int:
    """A cluster's own seed from the run's: each cluster of one run gets a different schedule,
    and the same one every time the run's seed is replayed."""
    return random.Random(f"{seed}:{name}").randrange(2**31)


def make_schedule(seed: int, duration_s: float, menu: FaultMenu) -> list[Fault]:
    """Faults from the menu, one after the other, over ``duration_s``: every fault is healed by
    ``duration_s`` (a step that would end later is not taken)."""
    rng = random.Random(seed)
    kinds: Sequence[FaultKind] = sorted((k for k, t in menu.targets.items() if t),
                                        key=lambda k: k.value)
    steps: list[Fault] = []
    if not kinds:
        return steps
    at = rng.uniform(*menu.gap_s)
    while len(steps) < STEPS_MAX:
        kind = rng.choice(kinds)
        target = rng.choice(menu.targets[kind])
        hold = round(rng.uniform(*menu.holds_s[kind]), 2)
        if at + hold > duration_s:
            break
        steps.append(Fault(round(at, 2), kind, target, hold))
        at += hold + rng.uniform(*menu.gap_s)
    return steps


def restrict(menu: FaultMenu, kinds: Sequence[str]) -> FaultMenu:
    """The menu with only the fault kinds named (by value, e.g. ``one-way``): a run of one fault
    family, so that its figures are that family's alone.

    Raises:
        ValueError: a name is no fault kind.
    """
    known = {k.value: k for k in FaultKind}
    unknown = [k for k in kinds if k not in known]
    if unknown:
        raise ValueError(f"unknown fault kinds {', '.join(unknown)} "
                         f"(of {', '.join(sorted(known))})")
    wanted = {known[k] for k in kinds}
    return dataclasses.replace(menu, targets={k: t for k, t in menu.targets.items()
                                              if k in wanted})
