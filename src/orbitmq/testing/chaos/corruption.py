"""The chaos run's corruption faults on a slave (docs/replication.md, "Corruption"): a bit
flipped in the body of a message in the middle of its newest commit log segment, under the
running broker's mapping or while it is down (killed -9, damaged, started again), or that
segment truncated in the middle of a message while it is down (a live truncation under a
mapping ends the process with SIGBUS, which the kill fault covers already).

After the heal, :func:`check_repair` pulls the damaged message's queue from the slave itself, every
answer's messages decoded with their CRC checked (one corrupt message served fails the step),
until the slave holds the master's bytes at the damaged offset again and serves that message
intact: the report says how long the repair took.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from orbitmq.errors import OrbitMQError, RemoteProtocolError
from orbitmq.protocol.codes import RequestCode, ResponseCode
from orbitmq.protocol.command import RemotingCommand
from orbitmq.protocol.headers import PullMessageRequestHeader, PullSysFlag
from orbitmq.protocol.stored import iter_stored_messages
from orbitmq.testing.corrupt import Damage, damage_segment, last_segment
from orbitmq.transport import RemotingClient

__all__ = ["damage_slave", "check_repair", "REPAIR_WAIT_S", "STOPPED"]

REPAIR_WAIT_S = 30.0  # from the heal until the slave serves the damaged message intact
STOPPED = "-stopped"  # a target's suffix: the damage is done while the slave is down
CHECK_GROUP = "chaos-corruption-check"


def damage_slave(store: str | Path, bitflip: bool) -> Damage:
    """A flipped body bit (``bitflip``) or a cut in the middle of a message, in the newest
    segment of the slave's store."""
    path = last_segment(store)
    if path is None:
        raise RuntimeError(f"no commit log segment in {store}")
    return damage_segment(path, "body" if bitflip else "truncate")


async def _pull(client: RemotingClient, addr: str, damage: Damage, offset: int
                ) -> tuple[int, int, list[bytes]]:
    header = PullMessageRequestHeader(
        consumer_group=CHECK_GROUP, topic=damage.topic, queue_id=damage.queue_id,
        queue_offset=offset, max_msg_nums=32, sys_flag=int(PullSysFlag.SUBSCRIPTION),
        commit_offset=-1, suspend_timeout_millis=0, subscription="*")
    r = await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE,
                                                          header.to_ext_fields()), 5.0)
    nxt = int(r.ext_fields.get("nextBeginOffset", offset))
    # CRC checked: a corrupt message served raises RemoteProtocolError.
    bodies = [m.body for m in iter_stored_messages(r.body, check_crc=True)] if r.body else []
    return r.code, nxt, bodies


def _same_bytes(master_store: str | Path, slave_store: str | Path, damage: Damage) -> bool:
    """Whether the slave's segment holds the master's bytes of the damaged message again."""
    name = os.path.basename(damage.path)
    try:
        with open(Path(master_store) / "commitlog" / name, "rb") as f:
            f.seek(damage.offset - int(name))
            head = f.read(4)
            want = head + f.read(int.from_bytes(head, "big", signed=True) - 4)
        with open(Path(slave_store) / "commitlog" / name, "rb") as f:
            f.seek(damage.offset - int(name))
            got = f.read(len(want))
    except (OSError, ValueError):
        return False
    return len(want) > 4 and got == want


def check_repair(master_store: str | Path, slave_store: str | Path, slave_addr: str,
                 damage: Damage, timeout_s: float = REPAIR_WAIT_S) -> str:
    """Pull the damaged message's queue from the slave (from a little before it) until the slave
    holds the master's bytes there and serves the message; what the report says.

    Raises:
        AssertionError: the slave served a corrupt message, or was not repaired in time.
    """
    return asyncio.run(_check(master_store, slave_store, slave_addr, damage, timeout_s))


async def _check(master_store: str | Path, slave_store: str | Path, slave_addr: str,
                 damage: Damage, timeout_s: float) -> str:
    began = time.monotonic()
    start = max(damage.queue_offset - 4, 0)
    pulls = served = 0
    client = RemotingClient()
    try:
        while True:
            offset = start
            seen_damaged = False
            for _ in range(8):  # read through the damaged offset once
                try:
                    code, nxt, bodies = await _pull(client, slave_addr, damage, offset)
                except RemoteProtocolError as e:
                    raise AssertionError(f"the slave at {slave_addr} served a corrupt message "
                                         f"of {damage.text()}: {e}") from None
                except (OrbitMQError, OSError, TimeoutError):
                    break  # the slave is still starting: try again
                pulls += 1
                served += len(bodies)
                if code != ResponseCode.SUCCESS or nxt <= offset:
                    break
                if offset <= damage.queue_offset < nxt:
                    seen_damaged = True
                    break
                offset = nxt
            if seen_damaged and _same_bytes(master_store, slave_store, damage):
                return (f"repaired in {time.monotonic() - began:.2f} s: the slave serves the "
                        f"message intact again ({pulls} pulls, {served} messages, 0 corrupt)")
            if time.monotonic() - began > timeout_s:
                raise AssertionError(f"the slave at {slave_addr} did not repair {damage.text()} "
                                     f"within {timeout_s:.0f} s ({pulls} pulls, 0 corrupt)")
            await asyncio.sleep(0.2)
    finally:
        await client.close()
