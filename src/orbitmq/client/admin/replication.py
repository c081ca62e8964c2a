"""Replication as an operator sees it: every broker set with its members, their roles, addresses
and each slave's lag in bytes and seconds (``orbitmq cluster list``, docs/replication.md).

A master answers GET_BROKER_HA_STATUS (RocketMQ 5's HARuntimeInfo) with one entry per slave
connection: how far the slave's copy provably reaches (``diff``: bytes behind) and how old the
oldest message it lacks is (OrbitMQ's ``lagMs``). A slave's runtime info names the local address
of its HA connection (``haClientAddr``), which is how its entry in its master's table is found.
A slave that is not connected (or whose master is gone) is shown with the bytes between the two
commit logs' ends, read from both runtime infos, when the master answers at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orbitmq.client.admin.models import _int, _obj
from orbitmq.errors import RemoteProtocolError

__all__ = ["SlaveLinkStatus", "HAStatus", "parse_ha_status", "BrokerMember", "member_rows"]


@dataclasses.dataclass(frozen=True, slots=True)
class SlaveLinkStatus:
    """One slave connection as its master sees it."""

    addr: str
    ack_offset: int  # -1: nothing acknowledged on this connection yet
    lag_bytes: int
    lag_ms: int
    in_sync: bool


@dataclasses.dataclass(frozen=True, slots=True)
class HAStatus:
    """A broker's GET_BROKER_HA_STATUS answer."""

    master: bool
    role: str
    master_max_offset: int
    in_sync_slaves: int
    links: tuple[SlaveLinkStatus, ...]
    ha_server_addr: str = ""
    master_addr: str = ""

    def link(self, addr: str) -> SlaveLinkStatus | None:
        return next((lk for lk in self.links if lk.addr == addr), None)


def parse_ha_status(body: bytes | memoryview | str) -> HAStatus:
    """RocketMQ 5's HARuntimeInfo JSON (OrbitMQ adds ``role``, ``lagMs`` and the addresses)."""
    data = _obj(body, "HA status")
    links = data.get("haConnectionInfo") or []
    if not isinstance(links, list):
        raise RemoteProtocolError("HA status: haConnectionInfo is not a list")
    parsed = []
    for entry in links:
        if not isinstance(entry, dict):
            raise RemoteProtocolError("HA status: a connection entry is not an object")
        parsed.append(SlaveLinkStatus(str(entry.get("addr", "")),
                                      _int(entry, "slaveAckOffset", default=-1),
                                      _int(entry, "diff"), _int(entry, "lagMs"),
                                      bool(entry.get("inSync", False))))
    master = bool(data.get("master", False))
    return HAStatus(master, str(data.get("role") or ("ASYNC_MASTER" if master else "SLAVE")),
                    _int(data, "masterCommitLogMaxOffset"), _int(data, "inSyncSlaveNums"),
                    tuple(parsed), str(data.get("haServerAddr") or ""),
                    str(data.get("masterAddr") or ""))


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerMember:
    """One member of a broker set, with what its runtime info (and its master's HA status, for
    a slave) says. ``error``: why it did not answer."""

    cluster: str
    broker_name: str
    broker_id: int
    addr: str
    role: str = ""
    max_offset: int = -1
    lag_bytes: int | None = None
    lag_seconds: float | None = None
    state: str = ""  # a slave's replication: "in sync", "behind", "not connected", "refused: ..."
    error: str = ""
    runtime: dict[str, str] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.pop("runtime")
        return out


def member_rows(members: list[BrokerMember], statuses: dict[str, HAStatus]) -> list[BrokerMember]:
    """``members`` (runtime info read) with each slave's lag filled in from its master's HA
    status (``statuses`` by broker name) or, failing that, from the two logs' ends."""
    masters = {m.broker_name: m for m in members if m.broker_id == 0 and not m.error}
    out = []
    for m in members:
        if m.broker_id == 0 or m.error:
            out.append(m)
            continue
        master, status = masters.get(m.broker_name), statuses.get(m.broker_name)
        refused = m.runtime.get("haRefused", "")
        link = status.link(m.runtime.get("haClientAddr", "")) if status is not None else None
        lag_b: int | None
        lag_s: float | None
        if link is not None:
            lag_b, lag_s = link.lag_bytes, link.lag_ms / 1000
            state = "in sync" if link.in_sync and link.lag_bytes == 0 else (
                "in sync (behind)" if link.in_sync else "behind")
        else:
            lag_b = (max(0, master.max_offset - m.max_offset) if master is not None
                     and master.max_offset >= 0 and m.max_offset >= 0 else None)
            lag_s = None
            state = "master gone" if master is None else "not connected"
        if refused:
            state = f"refused: {refused}"
        out.append(dataclasses.replace(m, lag_bytes=lag_b, lag_seconds=lag_s, state=state))
    return out
