"""The failover tests' history checker (orbitmq.testing.failover_history): it must refuse the
histories it exists to catch, or the partition and soak tests' passes mean nothing."""

from __future__ import annotations

import pytest

from orbitmq.protocol import create_offset_msg_id
from orbitmq.testing.failover_history import Ack, check_history, store_address


def test_epochs_that_follow_each_other_pass_and_give_their_spans() -> None:
    spans = check_history([Ack(1, 0.0, "a:1"), Ack(1, 1.0, "a:1"), Ack(2, 1.2, "b:1"),
                           (2, 3.0)], margin_s=0.5)
    assert spans[1].first == 0.0 and spans[1].last == 1.0 and spans[1].count == 2
    assert spans[2].brokers == frozenset({"b:1"}) and spans[2].last == 3.0


def test_an_old_epoch_acknowledging_within_the_margin_passes() -> None:
    check_history([Ack(1, 0.0), Ack(2, 1.0), Ack(1, 1.4)], margin_s=0.5)


def test_an_old_epoch_acknowledging_beyond_the_margin_fails() -> None:
    with pytest.raises(AssertionError, match="epoch 1 acknowledged 0.600 s after epoch 2 began"):
        check_history([Ack(1, 0.0), Ack(2, 1.0), Ack(1, 1.6)], margin_s=0.5)


def test_an_overlap_across_a_silent_epoch_fails() -> None:
    # epoch 2 acknowledged nothing; epoch 1 still answered after epoch 3 began
    with pytest.raises(AssertionError, match="epoch 1 .* after epoch 3 began"):
        check_history([Ack(1, 0.0), Ack(3, 1.0), Ack(1, 2.0)], margin_s=0.5)


def test_one_epoch_answered_by_two_brokers_fails() -> None:
    with pytest.raises(AssertionError, match="epoch 1 acknowledged by"):
        check_history([Ack(1, 0.0, "a:1"), Ack(1, 0.1, "b:1")], margin_s=0.5)


def test_the_store_address_comes_from_the_offset_message_id() -> None:
    assert store_address(create_offset_msg_id("10.0.0.7", 10911, 4096)) == "10.0.0.7:10911"
