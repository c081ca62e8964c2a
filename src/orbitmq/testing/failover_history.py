"""The history checker of the failover tests (docs/failover.md): which broker, in which epoch,
acknowledged each send and when the answer arrived, and the one property a history must keep.

Every SEND_OK of a broker in controller mode carries the epoch of the master that stored the
message (``SendResult.master_epoch``) and the store address of that master (in
``offset_msg_id``). Two masters may both believe they are master for a moment (the old one
cut off from etcd), but the old one must stop acknowledging before the new one can be elected
(fencing): an answer of an older epoch arriving after the first answer of a newer epoch by more
than the margin is a split brain that acknowledged writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from orbitmq.protocol import decode_offset_msg_id

__all__ = ["Ack", "EpochSpan", "check_history", "store_address"]


@dataclasses.dataclass(frozen=True)
class Ack:
    """One SEND_OK as a producer saw it: ``at`` is when the answer arrived (monotonic s)."""

    epoch: int
    at: float
    broker: str = ""


@dataclasses.dataclass(frozen=True)
class EpochSpan:
    """The first and last answer of one epoch and the brokers that gave them."""

    first: float
    last: float
    brokers: frozenset[str]
    count: int


def store_address(offset_msg_id: str) -> str:
    """``host:port`` of the broker that stored a message (from its offset message id)."""
    host, port, _ = decode_offset_msg_id(offset_msg_id)
    return f"{host}:{port}"


def check_history(acks: Iterable[Ack | tuple[int, float]], margin_s: float) -> dict[int, EpochSpan]:
    """Per epoch, its span of answers; AssertionError when an older epoch acknowledged later than
    ``margin_s`` after a newer one began, or when one epoch's answers came from two brokers (an
    epoch has one master: two would be a broken election)."""
    spans: dict[int, EpochSpan] = {}
    for ack in acks:
        if not isinstance(ack, Ack):
            ack = Ack(ack[0], ack[1])
        span = spans.get(ack.epoch)
        brokers = frozenset({ack.broker} if ack.broker else ())
        if span is None:
            spans[ack.epoch] = EpochSpan(ack.at, ack.at, brokers, 1)
        else:
            spans[ack.epoch] = EpochSpan(min(span.first, ack.at), max(span.last, ack.at),
                                         span.brokers | brokers, span.count + 1)
    ordered = sorted(spans.items())
    for epoch, span in ordered:
        assert len(span.brokers) <= 1, f"epoch {epoch} acknowledged by {sorted(span.brokers)}"
    # Every older epoch against every newer one: epoch 3 may begin before epoch 1's last answer
    # even when epoch 2 acknowledged nothing.
    for index, (e1, s1) in enumerate(ordered):
        for e2, s2 in ordered[index + 1:]:
            assert s1.last <= s2.first + margin_s, (
                f"epoch {e1} acknowledged {s1.last - s2.first:.3f} s after epoch {e2} began "
                f"(margin {margin_s} s)")
    return spans
