"""Controller mode's pure rules (broker/failover/rules.py), its records as read from etcd, the
store's epoch file and the HA hello codec: deterministic, no I/O beyond temp files."""

from __future__ import annotations

from pathlib import Path

import pytest

from orbitmq.broker.failover.etcd import EtcdError, _kv
from orbitmq.broker.failover.rules import (
    Campaign,
    CatchUpTracker,
    Follow,
    MasterRecord,
    MemberRecord,
    RecordError,
    Resign,
    SetState,
    Wait,
    adopt_history,
    divergence_point,
    election_action,
    fence_deadline,
    in_sync_changes,
    may_acknowledge,
    new_epoch_state,
)
from orbitmq.errors import RemoteProtocolError, StoreError
from orbitmq.protocol.ha import HELLO_MARK, TransferReader, encode_epoch_frame, unpack_identity
from orbitmq.store.epoch_file import EpochFile

STATE = SetState(3, 1, frozenset({1, 2, 3}), ((1, 0), (2, 100), (3, 250)))
MASTER = MasterRecord(3, 1, "10.0.0.1:10911", "10.0.0.1:10912")


def test_records_round_trip_and_bad_ones_are_refused() -> None:
    assert SetState.from_json(STATE.to_json()) == STATE
    assert MasterRecord.from_json(MASTER.to_json()) == MASTER
    member = MemberRecord(2, "10.0.0.2:10911", 300, 3)
    assert MemberRecord.from_json(member.to_json()) == member
    for bad in (b"[]", b"{", b'{"epoch": 0, "master": 1, "inSync": [1], "history": [[0, 0]]}',
                b'{"epoch": 2, "master": 1, "inSync": [2], "history": [[2, 0]]}',  # master not in
                b'{"epoch": 2, "master": 1, "inSync": [1], "history": [[1, 5], [2, 4]]}',
                b'{"epoch": 2, "master": 1, "inSync": [1], "history": [[1, 0]]}',  # last != epoch
                b'{"epoch": true, "master": 1, "inSync": [1], "history": [[1, 0]]}',
                b'{"epoch": 1, "master": 1, "inSync": ["1"], "history": [[1, 0]]}'):
        with pytest.raises(RecordError):
            SetState.from_json(bad)
    with pytest.raises(RecordError):
        MasterRecord.from_json(b'{"epoch": 1, "member": 1, "addr": "no port", "haAddr": ""}')
    with pytest.raises(RecordError):
        MemberRecord.from_json(b'{"member": 1, "addr": "", "logEnd": -1, "lastEpoch": 0}')


def test_divergence_cuts_at_the_end_of_the_last_shared_epoch() -> None:
    history = STATE.history
    assert divergence_point([], 500, history) == 0  # pre-controller bytes end where epoch 1 starts
    assert divergence_point([(1, 0)], 80, history) == 80  # a shorter copy of epoch 1: kept
    assert divergence_point([(1, 0)], 180, history) == 100  # epoch 1 bytes past epoch 2's start
    assert divergence_point([(1, 0), (2, 100)], 400, history) == 250
    assert divergence_point([(1, 0), (2, 100), (3, 250)], 400, history) == 400
    # An epoch the lineage dropped (a later election started below it): its bytes go.
    assert divergence_point([(1, 0), (2, 100), (4, 300)], 400, history) == 250
    with pytest.raises(RecordError):  # etcd disagrees on where epoch 2 starts
        divergence_point([(1, 0), (2, 90)], 400, history)
    with pytest.raises(RecordError):  # every epoch of this log was trimmed away
        divergence_point([(1, 0)], 50, ((5, 100),), trimmed=4)
    assert adopt_history([(1, 0)], 100, history) == [(1, 0), (2, 100), (3, 250)]
    assert adopt_history([(1, 0), (2, 100)], 180, history) == [(1, 0), (2, 100), (3, 250)]


def test_an_election_is_won_by_an_in_sync_member_and_the_old_master_leaves_the_set() -> None:
    new, cut, epochs = new_epoch_state(2, STATE, [(1, 0), (2, 100), (3, 250)], 400)
    assert (new.epoch, new.master, new.in_sync, cut) == (4, 2, frozenset({2, 3}), 400)
    assert new.history[-1] == (4, 400) and epochs[-1] == (4, 400)
    # A candidate whose last epoch is older cuts to where that epoch ends; later epochs that
    # start past the cut leave the lineage.
    new, cut, _ = new_epoch_state(3, STATE, [(1, 0)], 180)
    assert cut == 100 and new.history == ((1, 0), (4, 100))
    members = {2: MemberRecord(2, "", 400, 3), 3: MemberRecord(3, "", 300, 3)}
    action = election_action(3, STATE, 7, None, [(1, 0), (2, 100), (3, 250)], 300, members, 0.0, 1.0)
    assert isinstance(action, Wait)  # member 2's log is longer: it goes first
    action = election_action(3, STATE, 7, None, [(1, 0), (2, 100), (3, 250)], 300, members, 1.5, 1.0)
    assert isinstance(action, Campaign) and action.seen_revision == 7
    not_in_set = STATE.with_in_sync({1, 2})
    assert isinstance(election_action(3, not_in_set, 7, None, [], 0, {}, 9.0, 1.0), Wait)
    follow = election_action(2, STATE, 7, MASTER, [(1, 0), (2, 100)], 400, {}, 0.0, 1.0)
    assert isinstance(follow, Follow) and follow.cut == 250
    assert isinstance(election_action(1, STATE, 7, MASTER, [], 0, {}, 0.0, 1.0), Resign)


def test_a_member_repairing_a_corrupt_log_never_campaigns(tmp_path: Path) -> None:
    """A slave that cut its log at a corrupt message lacks bytes it acknowledged until it has
    taken them again: it stays out of every election, in the in-sync set or not, the best
    candidate or not, however long the set has had no master; it still follows a master."""
    from orbitmq.store.corruption import CorruptionWatch

    watch = CorruptionWatch(str(tmp_path))
    watch.cut(1000, 5000)  # the log ended at 5000, cut at 1000 for a corrupt message
    log = [(1, 0), (2, 100), (3, 250)]
    for end in (1000, 4999):
        why = watch.repair_pending(end)
        assert why is not None and "repairing" in why
        action = election_action(3, STATE, 7, None, log, end, {}, 60.0, 1.0, why)
        assert isinstance(action, Wait) and "not eligible" in action.why
        follow = election_action(2, STATE, 7, MASTER, log, end, {}, 0.0, 1.0, why)
        assert isinstance(follow, Follow)  # it takes the rest from the master
    assert watch.repair_pending(5000) is None  # whole again: eligible as before
    assert isinstance(election_action(3, STATE, 7, None, log, 5000, {}, 60.0, 1.0,
                                      watch.repair_pending(5000)), Campaign)
    watch.cut(1000, 5000)
    watch.forget_repair()  # a new master's log is the truth now
    assert watch.repair_pending(1000) is None


def test_in_sync_changes_acknowledgements_and_the_fence() -> None:
    tracker = CatchUpTracker(now=0.0)
    tracker.observe(0.5, 1000, {2: 0, 3: 0})  # both held the previous end (0)
    tracker.observe(1.0, 1200, {2: 1000})  # 3 fell behind
    remove, add = in_sync_changes(1, frozenset({1, 2, 3}), {2: 1000, 3: 10}, 1200, 900,
                                  tracker, 2.0, 1.5, 1 << 30)
    assert remove == {3} and not add
    remove, add = in_sync_changes(1, frozenset({1, 2}), {2: 1000, 3: 1000}, 1200, 900,
                                  tracker, 1.2, 1.5, 1 << 30)
    assert add == {3} and not remove
    _, add = in_sync_changes(1, frozenset({1, 2}), {3: 800}, 1200, 900, tracker, 1.2, 1.5, 1 << 30)
    assert not add  # it lacks acknowledged bytes
    assert may_acknowledge(100, {2, 3}, {2: 100, 3: 100}, 1.0, 2.0) is True
    assert may_acknowledge(100, {2, 3}, {2: 100}, 1.0, 2.0) is False
    assert isinstance(may_acknowledge(100, set(), {}, 1.0, 2.0), str)
    assert isinstance(may_acknowledge(100, {2}, {2: 100}, 2.0, 2.0), str)  # fenced
    assert fence_deadline(10.0, 6, 1.0) == 15.0


def test_the_epoch_file_is_replaced_whole_and_refused_when_broken(tmp_path: Path) -> None:
    epochs = EpochFile(str(tmp_path))
    assert epochs.load() == [] and epochs.last_epoch() == 0
    epochs.replace([(1, 0), (3, 400)])
    assert EpochFile(str(tmp_path)).load() == [(1, 0), (3, 400)]
    with pytest.raises(StoreError):
        epochs.replace([(3, 0), (2, 10)])
    (tmp_path / "epochs.json").write_text('{"epochs": [[1, 5], [2, 4]]}')
    with pytest.raises(StoreError):
        EpochFile(str(tmp_path)).load()


def test_the_hello_codec_and_etcd_answers_are_checked() -> None:
    frames = TransferReader(1024).feed(encode_epoch_frame(7, 2))
    assert frames[0].offset == HELLO_MARK
    assert unpack_identity(int.from_bytes(frames[0].data, "big", signed=True)) == (7, 2)
    with pytest.raises(RemoteProtocolError):
        unpack_identity(-5)
    with pytest.raises(RemoteProtocolError):  # any other negative offset is still refused
        TransferReader(1024).feed((-2).to_bytes(8, "big", signed=True) + (8).to_bytes(4, "big"))
    good = {"key": "YQ==", "value": "", "create_revision": "2", "mod_revision": "3", "version": "1"}
    assert _kv(good).mod_revision == 3
    for field, value in (("mod_revision", "-1"), ("version", "x"), ("key", "%%"),
                         ("create_revision", True)):
        with pytest.raises(EtcdError):
            _kv({**good, field: value})
