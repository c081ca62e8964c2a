"""Offset message ids and UNIQ_KEY ids."""

from __future__ import annotations

import datetime
import os
import re
import threading

import pytest

from orbitmq.errors import ClientError, RemoteProtocolError
from orbitmq.protocol import UniqIdGenerator, create_offset_msg_id, decode_offset_msg_id


def test_offset_msg_id_layout() -> None:
    msg_id = create_offset_msg_id("127.0.0.1", 10911, 0x1234)
    assert msg_id == "7F000001" + "00002A9F" + "0000000000001234"
    assert decode_offset_msg_id(msg_id) == ("127.0.0.1", 10911, 0x1234)


def test_offset_msg_id_round_trips() -> None:
    for host, port, offset in [("10.1.2.3", 0, 0), ("255.255.255.255", 65535, 2**63 - 1),
                               ("192.168.0.7", 10911, 1024 * 1024 * 1024 * 7 + 5)]:
        msg_id = create_offset_msg_id(host, port, offset)
        assert len(msg_id) == 32 and msg_id == msg_id.upper()
        assert decode_offset_msg_id(msg_id) == (host, port, offset)


def test_lower_case_ids_decode_too() -> None:
    assert decode_offset_msg_id("7f00000100002a9f0000000000000010") == ("127.0.0.1", 10911, 16)


def test_ipv6_store_host_gives_56_digits() -> None:
    msg_id = create_offset_msg_id("::1", 10911, 99)
    assert len(msg_id) == 56
    assert decode_offset_msg_id(msg_id) == ("::1", 10911, 99)


@pytest.mark.parametrize("bad", ["", "7F00", "Z" * 32, " " * 32, "7F000001 0002A9F000000000000001",
                                 "0" * 33, "é" * 32])
def test_bad_offset_ids(bad: str) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_offset_msg_id(bad)


@pytest.mark.parametrize(("host", "port", "offset"),
                         [("localhost", 1, 1), ("1.2.3", 1, 1), ("1.2.3.4", 2**31, 0),
                          ("1.2.3.4", 1, 2**63)])
def test_bad_offset_id_inputs_are_misuse(host: str, port: int, offset: int) -> None:
    with pytest.raises(ClientError):
        create_offset_msg_id(host, port, offset)


class FakeClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def local_ms(*args: int) -> int:
    return int(datetime.datetime(*args).timestamp() * 1000)  # type: ignore[arg-type]


def test_uniq_id_layout() -> None:
    clock = FakeClock(local_ms(2024, 3, 5, 0, 0, 1))
    generator = UniqIdGenerator("192.168.1.20", pid=0x1_2345, random_part=0xCAFEBABE,
                                clock_ms=clock)
    first, second = generator.next(), generator.next()
    elapsed = 4 * 86_400_000 + 1000  # since March 1st, local time
    assert first == f"C0A80114" f"2345" f"CAFEBABE" f"{elapsed:08X}" "0000"
    assert second == first[:-4] + "0001"
    assert re.fullmatch(r"[0-9A-F]{32}", first)


def test_uniq_id_month_rollover_and_counter_wrap() -> None:
    clock = FakeClock(local_ms(2024, 1, 31, 23, 59, 59))
    generator = UniqIdGenerator(pid=1, random_part=2, clock_ms=clock)
    generator._counter = 0xFFFF
    late = generator.next()
    assert late.endswith("FFFF")
    clock.ms = local_ms(2024, 2, 1, 0, 0, 0) + 5
    early = generator.next()
    assert early[20:] == "00000005" "0000"
    assert int(late[20:28], 16) == 31 * 86_400_000 - 1000


def test_uniq_ids_are_unique_across_threads() -> None:
    generator = UniqIdGenerator()
    seen: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        ids = [generator.next() for _ in range(2000)]
        with lock:
            seen.extend(ids)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == 16000 and len(set(seen)) == 16000


def test_uniq_generator_needs_ipv4() -> None:
    with pytest.raises(ClientError):
        UniqIdGenerator("::1")


def test_default_generator_names_this_process() -> None:
    uid = UniqIdGenerator().next()
    assert uid[:8] == "7F000001"
    assert int(uid[8:12], 16) == os.getpid() & 0xFFFF
