"""The rules of failover, as pure functions and value types: no I/O, no clock of their own.

The broker set's record in etcd (docs/failover.md has the key layout):

- ``state`` (no lease): the current ``epoch``, its ``master`` (a member id), the **in-sync set**
  and the **epoch history**: for each epoch the offset its master's log ended at when it was
  elected (the epoch's start offset). Changed only by compare-and-swap on its revision.
- ``master`` (under the master's lease): the epoch and the master's addresses. Its absence is
  what starts an election.
- ``members/<id>`` (under each member's lease): where each member's log ends, for the election's
  preference.

Why no acknowledged message is lost (the invariants these rules keep):

1. A SYNC_MASTER acknowledges the bytes up to N only when every other member of the in-sync set
   holds them (:func:`may_acknowledge`) and while its lease provably holds; the set only shrinks
   by a transaction conditioned on the epoch, committed before an acknowledgement that needs it.
   So every member of the set, at any time, holds every acknowledged byte.
2. Only a member of the set may win an election (:func:`election_action`), by compare-and-swap of
   ``state`` at the revision it read, while no master key exists.
3. Logs are compared by epoch, not by bytes: every log keeps the start offset of each epoch whose
   bytes it holds (the store's epoch file). Within one epoch one master wrote, so two logs agree
   up to the smaller end of their common last epoch (:func:`divergence_point`). A new master cuts
   its own log there first (bytes of its last epoch that the history says belong to a later
   epoch were never acknowledged: invariant 1), and the epoch it starts begins where its log
   then ends; a follower cuts its log the same way before it takes anything.
4. A master stops acknowledging ``controller_fence_margin_ms`` before its lease could expire in
   etcd, counted from when it *sent* the last renewal that etcd granted (:func:`fence_deadline`);
   a new master is elected only after the lease expired. The margin covers the difference of the
   two clocks' rates over one TTL and the time from a decision to acknowledge to the answer
   leaving the process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

__all__ = ["SetState", "MasterRecord", "MemberRecord", "RecordError", "Follow", "Campaign", "Resign", "Wait",
           "divergence_point", "adopt_history", "election_action", "new_epoch_state",
           "CatchUpTracker", "in_sync_changes", "may_acknowledge", "fence_deadline",
           "EPOCH_MAX", "MEMBER_MAX", "HISTORY_MAX", "OFFSET_MAX"]

EPOCH_MAX = 2**31 - 1
MEMBER_MAX = 2**31 - 1
OFFSET_MAX = 2**62
HISTORY_MAX = 256  # epochs kept in etcd; a member whose last epoch is older must be re-copied
ADDR_CHARS_MAX = 255
MEMBERS_MAX = 64  # members of one in-sync set

EpochEntry = tuple[int, int]  # (epoch, start offset)


class RecordError(ValueError):
    """A record read from etcd (or an epoch file) breaks its rules: never used, always loud."""


def _int_field(obj: Mapping[str, Any], name: str, low: int, high: int) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RecordError(f"{name} = {value!r} is not a whole number in {low}..{high}")
    return value


def _addr_field(obj: Mapping[str, Any], name: str) -> str:
    value = obj.get(name, "")
    if not isinstance(value, str) or len(value) > ADDR_CHARS_MAX or any(c.isspace() for c in value):
        raise RecordError(f"{name} = {value!r} is not an address")
    if value and not value.rpartition(":")[2].isdigit():
        raise RecordError(f"{name} = {value!r} is not HOST:PORT")
    return value


def _object(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise RecordError(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise RecordError(f"{what} is not a JSON object")
    return obj


def check_history(history: Sequence[EpochEntry], what: str = "history") -> tuple[EpochEntry, ...]:
    """Epochs strictly rising from 1, start offsets never falling, at most HISTORY_MAX."""
    out: list[EpochEntry] = []
    for item in history:
        if (not isinstance(item, list | tuple) or len(item) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in item)):
            raise RecordError(f"{what}: {item!r} is not [epoch, start offset]")
        epoch, start = item
        if not 1 <= epoch <= EPOCH_MAX or not 0 <= start <= OFFSET_MAX:
            raise RecordError(f"{what}: [{epoch}, {start}] out of range")
        if out and (epoch <= out[-1][0] or start < out[-1][1]):
            raise RecordError(f"{what}: [{epoch}, {start}] does not follow {list(out[-1])}")
        out.append((epoch, start))
    if len(out) > HISTORY_MAX:
        raise RecordError(f"{what}: {len(out)} entries, at most {HISTORY_MAX}")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class SetState:
    """The ``state`` key (see the module docstring). ``epoch`` 0 never appears in etcd."""

    epoch: int
    master: int
    in_sync: frozenset[int]
    history: tuple[EpochEntry, ...]
    trimmed: int = 0  # the last epoch dropped from the history for length (HISTORY_MAX)

    def __post_init__(self) -> None:
        if not 1 <= self.epoch <= EPOCH_MAX or not 1 <= self.master <= MEMBER_MAX:
            raise RecordError(f"epoch {self.epoch} / master {self.master} out of range")
        if self.master not in self.in_sync or len(self.in_sync) > MEMBERS_MAX:
            raise RecordError(f"in-sync set {sorted(self.in_sync)} must hold master {self.master} "
                              f"and at most {MEMBERS_MAX} members")
        if any(not 1 <= m <= MEMBER_MAX for m in self.in_sync):
            raise RecordError(f"in-sync set {sorted(self.in_sync)}: a member id out of range")
        check_history(self.history)
        if not self.history or self.history[-1][0] != self.epoch:
            raise RecordError(f"the history's last epoch is not the epoch {self.epoch}")
        if not 0 <= self.trimmed < self.history[0][0]:
            raise RecordError(f"trimmed = {self.trimmed} is not below the history's first epoch")

    def to_json(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "master": self.master,
                             "inSync": sorted(self.in_sync),
                             "history": [list(e) for e in self.history],
                             "trimmed": self.trimmed})

    @classmethod
    def from_json(cls, data: bytes) -> SetState:
        obj = _object(data, "the state record")
        members = obj.get("inSync")
        if not isinstance(members, list) or not all(
                isinstance(m, int) and not isinstance(m, bool) for m in members):
            raise RecordError(f"inSync = {members!r} is not a list of member ids")
        history = obj.get("history")
        if not isinstance(history, list):
            raise RecordError("history is not a list")
        return cls(_int_field(obj, "epoch", 1, EPOCH_MAX), _int_field(obj, "master", 1, MEMBER_MAX),
                   frozenset(members), check_history(history),
                   _int_field(obj, "trimmed", 0, EPOCH_MAX) if "trimmed" in obj else 0)

    def with_in_sync(self, in_sync: Iterable[int]) -> SetState:
        return dataclasses.replace(self, in_sync=frozenset(in_sync))


@dataclasses.dataclass(frozen=True)
class MasterRecord:
    """The leased ``master`` key: who is master in which epoch, and where to reach it."""

    epoch: int
    member: int
    addr: str
    ha_addr: str

    def to_json(self) -> bytes:
        return orjson.dumps({"epoch": self.epoch, "member": self.member, "addr": self.addr,
                             "haAddr": self.ha_addr})

    @classmethod
    def from_json(cls, data: bytes) -> MasterRecord:
        obj = _object(data, "the master record")
        return cls(_int_field(obj, "epoch", 1, EPOCH_MAX), _int_field(obj, "member", 1, MEMBER_MAX),
                   _addr_field(obj, "addr"), _addr_field(obj, "haAddr"))


@dataclasses.dataclass(frozen=True)
class MemberRecord:
    """A member's leased key: its address, where its log ends and the epoch of its last bytes."""

    member: int
    addr: str
    log_end: int
    last_epoch: int

    def to_json(self) -> bytes:
        return orjson.dumps({"member": self.member, "addr": self.addr, "logEnd": self.log_end,
                             "lastEpoch": self.last_epoch})

    @classmethod
    def from_json(cls, data: bytes) -> MemberRecord:
        obj = _object(data, "a member record")
        return cls(_int_field(obj, "member", 1, MEMBER_MAX), _addr_field(obj, "addr"),
                   _int_field(obj, "logEnd", 0, OFFSET_MAX), _int_field(obj, "lastEpoch", 0, EPOCH_MAX))


# -- logs and epochs ------------------------------------------------------------------------------
def divergence_point(local: Sequence[EpochEntry], local_end: int,
                     history: Sequence[EpochEntry], trimmed: int = 0) -> int:
    """Where this log stops agreeing with the broker set's history (the lineage of the current
    master's log): the end of the latest epoch of this log that the history still holds, in
    the history and in this log, or ``local_end``, whichever is lowest.

    ``local``: this log's epoch entries (none: the log predates controller mode, epoch 0, which
    ends where the history's first epoch starts). An epoch of this log missing from the history
    was cut from the lineage by a later election (it started past the new epoch's start): its
    bytes go.

    Raises:
        RecordError: every epoch of this log is older than the history (trimmed to HISTORY_MAX:
            copy the log again) or the history disagrees with it (etcd lost its data): never
            guessed.
    """
    starts = dict(history)
    for index in range(len(local) - 1, -1, -1):
        epoch, start = local[index]
        if epoch not in starts:
            continue
        if starts[epoch] != start:
            raise RecordError(f"epoch {epoch} starts at {start} in this log, at {starts[epoch]} "
                              "in etcd")
        later = [s for e, s in history if e > epoch]
        end_history = later[0] if later else OFFSET_MAX
        end_local = local[index + 1][1] if index + 1 < len(local) else local_end
        return min(local_end, end_history, end_local)
    if local and local[-1][0] <= trimmed:
        raise RecordError(f"this log's last epoch {local[-1][0]} is older than etcd's history "
                          f"(trimmed up to epoch {trimmed}): copy the master's log again "
                          "(truncate this store to 0)")
    if local and not history:
        raise RecordError(f"this log holds bytes of epoch {local[-1][0]} but etcd has no history")
    first_local = local[0][1] if local else local_end
    first_history = history[0][1] if history else OFFSET_MAX
    return min(local_end, first_local, first_history)


def adopt_history(local: Sequence[EpochEntry], cut: int,
                  history: Sequence[EpochEntry]) -> list[EpochEntry]:
    """This log's epoch entries once it is cut at ``cut`` and continues with the history's bytes:
    its own entries below the cut, then the history's from the one covering ``cut`` on."""
    kept = [e for e in local if e[1] < cut]
    covering = [e for e in history if e[1] <= cut]
    later = [e for e in history if e[1] > cut]
    if covering and (not kept or covering[-1][0] > kept[-1][0]):
        kept.append(covering[-1])
    return kept + later


# -- elections ------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Follow:
    """Follow the master of ``record`` (cut this log at ``cut`` first when it ends later)."""

    record: MasterRecord
    cut: int
    epochs: tuple[EpochEntry, ...]


@dataclasses.dataclass(frozen=True)
class Campaign:
    """Try to become master of ``state.epoch``: CAS ``state`` from ``seen_revision`` (0: absent)
    while no master key exists; this log is cut at ``cut`` (the new epoch's start) first."""

    state: SetState
    seen_revision: int
    cut: int
    epochs: tuple[EpochEntry, ...]


@dataclasses.dataclass(frozen=True)
class Resign:
    """etcd still names this member master, but it stepped down (fenced, then its renewals got
    through again before the lease expired): delete the master key under its own lease so that
    an election can run (its lease would otherwise hold the key for ever)."""

    record: MasterRecord


@dataclasses.dataclass(frozen=True)
class Wait:
    """Nothing to do now; ``why`` is shown (runtime info, logs)."""

    why: str


def new_epoch_state(me: int, state: SetState | None, local: Sequence[EpochEntry],
                    local_end: int) -> tuple[SetState, int, tuple[EpochEntry, ...]]:
    """The state this member writes if it wins, the cut of its own log and its epochs after."""
    history = state.history if state is not None else ()
    trimmed = state.trimmed if state is not None else 0
    cut = divergence_point(local, local_end, history, trimmed)
    epoch = (state.epoch if state is not None else 0) + 1
    if epoch > EPOCH_MAX:
        raise RecordError("epochs are used up")
    # Epochs whose bytes start at or past the cut have none in the new master's log: they
    # leave the lineage (their masters' writes there were never acknowledged, invariant 1).
    lineage = [*(e for e in history if e[1] < cut), (epoch, cut)]
    if len(lineage) > HISTORY_MAX:
        trimmed = lineage[-HISTORY_MAX - 1][0]
        lineage = lineage[-HISTORY_MAX:]
    # The old master leaves the set (it may be dead: waiting for it would stall every send).
    in_sync = ({m for m in state.in_sync if m != state.master} if state is not None else set())
    in_sync.add(me)
    epochs = (*adopt_history(local, cut, history), (epoch, cut))
    return SetState(epoch, me, frozenset(in_sync), tuple(lineage), trimmed), cut, epochs


def election_action(me: int, state: SetState | None, state_revision: int,
                    master: MasterRecord | None, local: Sequence[EpochEntry], local_end: int,
                    members: Mapping[int, MemberRecord], no_master_for_s: float,
                    defer_s: float, repairing: str | None = None) -> Follow | Campaign | Resign | Wait:
    """What a member that is not master does after reading etcd.

    ``members``: the live members' records (their leases hold); ``no_master_for_s``: how long
    this member has seen no master key; ``defer_s``: how long a member that is not the best
    candidate leaves the election to the best one (the best: the in-sync member whose log holds
    the latest epoch and ends furthest, so that the fewest unacknowledged bytes are cut);
    ``repairing``: why this member's log lacks bytes it had acknowledged (it cut a corrupt
    message and is taking the rest again: store/corruption.py), None when it does not. Such a
    member never campaigns, in the in-sync set or not: it may lack acknowledged messages.
    """
    if master is not None:
        if state is None or master.epoch != state.epoch:
            return Wait(f"the master key (epoch {master.epoch}) and the state disagree; "
                        "waiting for them to settle")
        if master.member == me:
            return Resign(master)
        cut = divergence_point(local, local_end, state.history, state.trimmed)
        return Follow(master, cut, tuple(adopt_history(local, cut, state.history)))
    if repairing is not None:
        return Wait(f"{repairing}: not eligible")
    if state is not None and me not in state.in_sync:
        return Wait(f"not in the in-sync set {sorted(state.in_sync)} of epoch {state.epoch}: "
                    "not eligible")
    eligible = [m for m in members.values()
                if m.member != me and (state is None or m.member in state.in_sync)]
    mine = (local[-1][0] if local else 0, local_end, -me)
    better = [m for m in eligible if (m.last_epoch, m.log_end, -m.member) > mine]
    if better and no_master_for_s < defer_s:
        return Wait(f"member {better[0].member} is a better candidate")
    new_state, cut, epochs = new_epoch_state(me, state, local, local_end)
    return Campaign(new_state, state_revision, cut, epochs)


# -- the in-sync set ------------------------------------------------------------------------------
class CatchUpTracker:
    """When each slave last held everything the master had at the previous check (RocketMQ 5's
    lastCaughtUpTime): a slave that has not for ``not_catchup_s`` leaves the in-sync set."""

    def __init__(self, now: float) -> None:
        self._since = now  # when this master started: members get a full window to catch up
        self._previous_end = 0
        self.caught_up: dict[int, float] = {}

    def observe(self, now: float, master_end: int, acked: Mapping[int, int]) -> None:
        """``acked``: member -> the furthest it provably holds (connected members only)."""
        for member, offset in acked.items():
            if offset >= self._previous_end:
                self.caught_up[member] = now
        self._previous_end = master_end

    def last(self, member: int) -> float:
        return self.caught_up.get(member, self._since)


def in_sync_changes(me: int, in_sync: frozenset[int], acked: Mapping[int, int], master_end: int,
                    committed: int, tracker: CatchUpTracker, now: float, not_catchup_s: float,
                    gap_max: int) -> tuple[frozenset[int], frozenset[int]]:
    """(members to remove, members to add): a member that has not caught up within
    ``not_catchup_s`` leaves; a connected member that holds every acknowledged byte
    (``committed``), is within ``gap_max`` of the end and caught up lately joins."""
    remove = frozenset(m for m in in_sync
                       if m != me and now - tracker.last(m) >= not_catchup_s)
    add = frozenset(m for m, offset in acked.items()
                    if m not in in_sync and m != me and offset >= committed
                    and master_end - offset < gap_max and now - tracker.last(m) < not_catchup_s)
    return remove, add


def may_acknowledge(end: int, required: Iterable[int], acked: Mapping[int, int], now: float,
                    deadline: float) -> bool | str:
    """Whether a SYNC_MASTER may acknowledge the bytes below ``end``: True, False (not yet: a
    required member lacks them) or why never (no slave is required; the lease may have lapsed)."""
    if now >= deadline:
        return "this master's lease may have lapsed: it no longer acknowledges"
    members = list(required)
    if not members:
        return "no slave is in the in-sync set: the message is stored on the master only"
    return all(acked.get(m, -1) >= end for m in members)


def fence_deadline(renewal_sent: float, ttl_s: float, margin_s: float) -> float:
    """Until when a master may acknowledge: the lease cannot expire in etcd before
    ``renewal_sent + ttl_s`` (etcd counts from when it took the renewal, later), less the margin."""
    return renewal_sent + ttl_s - margin_s
