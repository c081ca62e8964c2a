"""The cluster page: name servers, brokers (role, address, version, disk use, rates), every field
of each broker's runtime info, and the rates over time as charts (drawn by static/console.js from
``/api/brokers/series``).

A logged-in cluster user (:mod:`orbitmq.console.acting`) sees the runtime info its own signed
reads return, and the charts of those brokers alone; the others show the servers' refusal."""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp import web

from orbitmq.console.render import page
from orbitmq.console.sampler import BrokerIdentity, disk_use, first_rate, read_runtime
from orbitmq.console.state import state, user_of
from orbitmq.errors import AccessDeniedError

__all__ = ["routes", "BrokerRow"]

routes = web.RouteTableDef()


@dataclasses.dataclass(frozen=True)
class BrokerRow:
    """What the cluster page shows of one broker address."""

    ident: BrokerIdentity
    table: dict[str, str]
    error: str | None

    @property
    def disk_ratio(self) -> float | None:
        return disk_use(self.table)[0]

    @property
    def held_bytes(self) -> int | None:
        return disk_use(self.table)[1]

    @property
    def put_tps(self) -> float | None:
        return first_rate(self.table.get("putTps"))

    @property
    def get_tps(self) -> float | None:
        return first_rate(self.table.get("getTransferedTps"))


@routes.get("/")
async def cluster_page(request: web.Request) -> web.StreamResponse:
    st = state(request)
    rows: dict[str, list[BrokerRow]] = {}
    user = user_of(request)
    if user is not None:  # read now as the user: what its rules let it see
        brokers, answers = await read_runtime(user.admin)
        user.readable_brokers = frozenset(a for a, v in answers.items() if isinstance(v, dict))
        for addr, ident in sorted(brokers.items(), key=lambda kv: kv[1]):
            answer = answers[addr]
            rows.setdefault(ident.cluster, []).append(
                BrokerRow(ident, answer, None) if isinstance(answer, dict) else
                BrokerRow(ident, {}, _why(answer)))
        return page(request, "cluster.html", title="Cluster", clusters=rows,
                    interval_ms=st.config.console_sample_interval_ms)
    await st.sampler.sample_once()  # the page shows now, the charts show the past
    for addr, ident in sorted(st.sampler.brokers.items(), key=lambda kv: kv[1]):
        latest = st.sampler.latest(addr)
        rows.setdefault(ident.cluster, []).append(
            BrokerRow(ident, latest.table if latest else {}, st.sampler.errors.get(addr)))
    return page(request, "cluster.html", title="Cluster", clusters=rows,
                interval_ms=st.config.console_sample_interval_ms)


@routes.get("/api/brokers/series")
async def broker_series(request: web.Request) -> web.StreamResponse:
    """Per broker address: identity and chart data (times in s; None where unknown)."""
    data: dict[str, Any] = state(request).sampler.all_series()
    user = user_of(request)
    if user is not None:  # the brokers the user's own reads reached on its last cluster page
        data = {addr: v for addr, v in data.items() if addr in user.readable_brokers}
    return web.json_response(data)


def _why(error: Exception) -> str:
    if isinstance(error, AccessDeniedError):
        return f"not allowed: {error.remark}"
    return str(error) or type(error).__name__
