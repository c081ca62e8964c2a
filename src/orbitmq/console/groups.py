"""Consumer groups: the list with their lag, one group's lag per queue, its live clients and
subscriptions, which client holds which queue, and the form that resets its offsets to a time."""

from __future__ import annotations

import asyncio
import dataclasses
from urllib.parse import quote

from aiohttp import web

from orbitmq.client import (
    ConsumerConnectionInfo,
    GroupStatus,
    check_group,
    check_topic,
    is_system_group,
    topic_kind,
)
from orbitmq.console import forms
from orbitmq.console.namespaces import chosen_namespace, in_namespace, namespace_of, namespaces_in
from orbitmq.console.render import page
from orbitmq.console.state import admin_of

__all__ = ["routes", "is_internal_group", "reset_topics"]

routes = web.RouteTableDef()


def is_internal_group(group: str) -> bool:
    """Groups the brokers and OrbitMQ's tools use for themselves (admin reads, the transaction
    check, dead letter resend marks...), listed only on request."""
    return is_system_group(group)


def reset_topics(topics: set[str]) -> list[str]:
    """The topics the offset reset form offers, the group's real topics first (the first is
    the default): its retry topic sorts before them by name but is rarely what is meant."""
    return sorted(topics, key=lambda t: (topic_kind(t) != "normal", t))


@dataclasses.dataclass(frozen=True)
class GroupRow:
    group: str
    status: GroupStatus
    clients: int

    @property
    def topics(self) -> list[str]:
        return sorted({q.queue.topic for q in self.status.queues})

    @property
    def namespace(self) -> str:
        return namespace_of(self.group)


@routes.get("/groups")
async def group_list(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    show_all = forms.flag(request.query, "all")
    namespace = chosen_namespace(request.query)
    every = [g for g in await admin.list_groups() if show_all or not is_internal_group(g)]
    names = [g for g in every if in_namespace(g, namespace)]
    statuses, conns = await asyncio.gather(
        asyncio.gather(*(admin.group_status(g) for g in names)),
        asyncio.gather(*(admin.consumer_connections(g) for g in names)))
    rows = [GroupRow(g, s, len(c.connections)) for g, s, c in zip(names, statuses, conns,
                                                                  strict=True)]
    return page(request, "groups.html", title="Consumer groups", groups=rows, show_all=show_all,
                namespace=namespace, namespaces=namespaces_in(every))


@routes.get("/groups/{group}")
async def group_detail(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    group = check_group(request.match_info["group"])
    status: GroupStatus
    conns: ConsumerConnectionInfo
    status, conns, holders = await asyncio.gather(
        admin.group_status(group), admin.consumer_connections(group),
        admin.queue_holders(group))
    topics = reset_topics({q.queue.topic for q in status.queues} | set(conns.subscriptions))
    return page(request, "group.html", title=f"Group {group}", group=group, status=status,
                conns=conns, holders=holders, topics=topics)


@routes.post("/groups/{group}/reset")
async def group_reset(request: web.Request) -> web.StreamResponse:
    """Move the group's committed offsets of a topic to the first message stored at or after a
    time (stop the group's consumers first: a running one may commit over it)."""
    group = check_group(request.match_info["group"])
    form = await request.post()
    topic = check_topic(forms.text(form, "topic"))
    at_ms = forms.utc_ms(form, "time")
    assert at_ms is not None
    await admin_of(request).reset_offset(group, topic, at_ms)
    raise web.HTTPSeeOther(f"/groups/{quote(group, safe='')}?notice=reset")
