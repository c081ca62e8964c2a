"""Pure parts of replication (issue 15): the HA framing codec fed whole and byte by byte, its
bounds; the SYNC_MASTER condition's groups, acknowledgements, timeouts and SLAVE_NOT_AVAILABLE;
the role checks of the config."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orbitmq.broker.durable_save import Unmet
from orbitmq.broker.replication.progress import ReplicaProgress
from orbitmq.broker.replication.replica_ack import ReplicaAck
from orbitmq.config import BrokerConfig, BrokerRole, ConfigError
from orbitmq.errors import RemoteProtocolError
from orbitmq.protocol.ha import (
    CONFIRM_MARK,
    ReportReader,
    TransferFrame,
    TransferReader,
    encode_confirm_frame,
    encode_report,
    encode_transfer_header,
)
from orbitmq.store.status import PutMessageStatus


# -- the codec ---------------------------------------------------------------------------------
@given(st.lists(st.integers(0, 2**63 - 1), max_size=20), st.integers(1, 17))
def test_reports_come_out_whole_however_the_bytes_are_cut(offsets: list[int], step: int) -> None:
    data = b"".join(encode_report(o) for o in offsets)
    reader, out = ReportReader(), []
    for i in range(0, len(data), step):
        out += reader.feed(data[i:i + step])
    assert out == offsets and reader.buffered == 0


@given(st.lists(st.tuples(st.integers(0, 2**40), st.binary(max_size=300)), max_size=10),
       st.integers(1, 64))
def test_frames_come_out_whole_however_the_bytes_are_cut(frames: list[tuple[int, bytes]],
                                                          step: int) -> None:
    data = b"".join(encode_transfer_header(o, len(b)) + b for o, b in frames)
    reader, out = TransferReader(300), []
    for i in range(0, len(data), step):
        out += reader.feed(data[i:i + step])
    assert out == [TransferFrame(o, b) for o, b in frames]
    assert reader.buffered == 0


@given(st.integers(0, 2**63 - 1), st.integers(1, 30))
def test_a_confirm_frame_between_transfer_frames_comes_out_whole(offset: int, step: int) -> None:
    data = (encode_transfer_header(0, 3) + b"abc" + encode_confirm_frame(offset)
            + encode_transfer_header(3, 0))
    reader, out = TransferReader(16), []
    for i in range(0, len(data), step):
        out += reader.feed(data[i:i + step])
    assert out == [TransferFrame(0, b"abc"), TransferFrame(CONFIRM_MARK, offset.to_bytes(8, "big")),
                   TransferFrame(3, b"")]


def test_a_marked_frame_of_another_size_is_refused() -> None:
    with pytest.raises(RemoteProtocolError):
        TransferReader(300).feed(struct.pack(">qi", CONFIRM_MARK, 16))
    with pytest.raises(ValueError):
        encode_confirm_frame(-1)


def test_a_frame_header_out_of_bounds_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="size=301"):
        TransferReader(300).feed(encode_transfer_header(0, 301))
    with pytest.raises(RemoteProtocolError, match="offset=-1"):
        TransferReader(300).feed(struct.pack(">qi", -1, 0))
    with pytest.raises(RemoteProtocolError):
        TransferReader(300).feed(struct.pack(">qi", 0, -5))
    with pytest.raises(ValueError):
        encode_report(-1)


def test_random_bytes_never_make_the_reader_hold_more_than_a_frame() -> None:
    rng = random.Random(7)
    for _ in range(200):
        reader = TransferReader(1024)
        try:
            for _ in range(20):
                reader.feed(rng.randbytes(rng.randrange(1, 200)))
                assert reader.buffered <= 12 + 1024 + 200
        except RemoteProtocolError:
            pass


# -- the SYNC_MASTER condition ----------------------------------------------------------------
def _condition(timeout_ms: int = 60_000, gap: int = 1 << 30) -> tuple[ReplicaProgress, ReplicaAck,
                                                                      list[int]]:
    progress = ReplicaProgress()
    pumps: list[int] = []
    return progress, ReplicaAck(progress, timeout_ms, gap, lambda: pumps.append(1)), pumps


def test_no_slave_or_a_slave_too_far_behind_is_slave_not_available() -> None:
    async def go() -> None:
        progress, ack, _ = _condition(gap=1000)
        verdict = ack.durable_up_to(100).result(0)
        assert isinstance(verdict, Unmet)
        assert verdict.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert "no slave" in (verdict.remark or "")
        link = progress.open("10.0.0.2:5555")
        link.reported = 0  # a slave that says it holds nothing yet
        far = ack.durable_up_to(5000).result(0)
        assert isinstance(far, Unmet) and "5000 bytes behind" in (far.remark or "")
        assert not ack.durable_up_to(900).done()  # within the gap: it waits
        ack.stop()

    asyncio.run(go())


def test_one_future_per_loop_iteration_and_acks_answer_every_group_below_them() -> None:
    async def go() -> None:
        progress, ack, pumps = _condition()
        link = progress.open("10.0.0.2:5555")
        link.reported = 0
        first = [ack.durable_up_to(end) for end in (100, 250, 180)]
        assert first[0] is first[1] is first[2]  # one group for the iteration
        await asyncio.sleep(0)  # the loop seals it and pumps once
        assert pumps == [1]
        second = ack.durable_up_to(400)
        assert second is not first[0]
        progress.acked(link, 200)  # below the first group's end (250): nothing yet
        assert not first[0].done()
        progress.acked(link, 260)
        assert first[0].result(0) is True and not second.done()
        progress.acked(link, 400)
        assert second.result(0) is True
        assert ack.durable_up_to(300).result(0) is True  # acknowledged already
        assert ack.waiting == 0

    asyncio.run(go())


def test_a_group_no_slave_confirms_in_time_is_answered_false() -> None:
    async def go() -> None:
        progress, ack, _ = _condition(timeout_ms=50)
        progress.open("10.0.0.2:5555").reported = 0
        waiting = ack.durable_up_to(100)
        await asyncio.sleep(0.2)
        assert waiting.result(0) is False  # the seam answers FLUSH_SLAVE_TIMEOUT
        assert ack.failure_status() is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert ack.waiting == 0

    asyncio.run(go())


def test_a_closed_connection_takes_its_acknowledgement_away() -> None:
    progress, _, _ = _condition()
    a, b = progress.open("a:1"), progress.open("b:1")
    progress.acked(a, 500)
    progress.acked(b, 300)
    assert progress.best_acked == 500
    progress.close(a)
    assert progress.best_acked == 300 and progress.connected == 1
    assert [lk.peer for lk in progress.in_sync(400, 200)] == ["b:1"]


# -- roles in the config ----------------------------------------------------------------------
@pytest.mark.parametrize(("role", "broker_id", "ok"), [
    (BrokerRole.ASYNC_MASTER, 0, True), (BrokerRole.SYNC_MASTER, 0, True),
    (BrokerRole.SLAVE, 1, True), (BrokerRole.SLAVE, 0, False), (BrokerRole.SYNC_MASTER, 2, False),
])
def test_a_role_and_a_broker_id_must_agree(role: BrokerRole, broker_id: int, ok: bool) -> None:
    cfg = BrokerConfig(broker_role=role, broker_id=broker_id)
    if ok:
        cfg.check_whole()
    else:
        with pytest.raises(ConfigError, match="broker_role") as refused:
            cfg.check_whole()
        assert "\n" not in str(refused.value)


def test_the_ha_port_defaults_to_the_listen_port_plus_one() -> None:
    assert BrokerConfig().effective_ha_listen_port == 10912
    assert BrokerConfig(listen_port=20911).effective_ha_listen_port == 20912
    assert BrokerConfig(listen_port=0).effective_ha_listen_port == 0
    assert BrokerConfig(ha_listen_port=0, listen_port=20911).effective_ha_listen_port == 0
    with pytest.raises(ConfigError, match="ha_master_address"):
        BrokerConfig(ha_master_address="nohost")
