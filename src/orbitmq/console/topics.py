"""Topics: the list with each topic's queues and stored messages (system topics on request), one
topic's route, queues with their min and max offsets and the groups that consume it, and the forms
that create, update and delete topics."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from orbitmq.client import SYSTEM_TOPICS, AsyncAdmin, check_topic, topic_kind
from orbitmq.config import QUEUE_NUMS_MAX
from orbitmq.console import forms
from orbitmq.console.namespaces import chosen_namespace, in_namespace, namespace_of, namespaces_in
from orbitmq.console.render import page
from orbitmq.console.state import admin_of
from orbitmq.errors import AccessDeniedError, OrbitMQError, TopicExistsError, TopicNotFoundError
from orbitmq.protocol.bodies import MessageQueue

__all__ = ["routes", "topic_kind", "SYSTEM_TOPICS", "PERMS"]

routes = web.RouteTableDef()

ROUTE_WAIT_S = 5.0  # how long a save waits for the name servers to route the topic anew
ROUTE_POLL_S = 0.05
# PermName bits a topic may have: read 4, write 2.
PERMS = {"6": "read and write", "4": "read only", "2": "write only"}


STATUS_READS_MAX = 16  # topics whose queue offsets the list reads at once


@dataclasses.dataclass(frozen=True)
class TopicRow:
    """One line of the topic list; ``queues`` and ``messages`` are None when the brokers did
    not say (a topic a user may not read, a broker down)."""

    topic: str
    kind: str
    queues: int | None
    messages: int | None

    @property
    def namespace(self) -> str:
        return namespace_of(self.topic)


async def _row(admin: AsyncAdmin, topic: str, kind: str, slots: asyncio.Semaphore) -> TopicRow:
    """The topic's queues and the messages they hold (max offset minus min offset)."""
    async with slots:
        try:
            status = await admin.topic_status(topic)
        except (OrbitMQError, OSError):
            return TopicRow(topic, kind, None, None)
    return TopicRow(topic, kind, len(status),
                    sum(max(0, s.max_offset - s.min_offset) for s in status))


@dataclasses.dataclass(frozen=True)
class GroupProgress:
    """One group on one topic: committed offsets, and how many messages it has not consumed."""

    group: str
    lag: int
    queues: int


@routes.get("/topics")
async def topic_list(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    show_all = forms.flag(request.query, "all")
    namespace = chosen_namespace(request.query)
    names, info = await asyncio.gather(admin.list_topics(), admin.cluster_info())
    reserved = set(info.cluster_addr_table) | set(info.broker_addr_table)
    kinds = [(t, topic_kind(t, reserved)) for t in names]
    shown = [(t, kind) for t, kind in kinds
             if (show_all or kind == "normal") and in_namespace(t, namespace)]
    slots = asyncio.Semaphore(STATUS_READS_MAX)
    rows = await asyncio.gather(*(_row(admin, t, kind, slots) for t, kind in shown))
    return page(request, "topics.html", title="Topics", topics=rows, show_all=show_all,
                hidden=sum(1 for t, kind in kinds if kind != "normal" and in_namespace(t, namespace)
                           ) if not show_all else 0,
                perms=PERMS, queue_nums_max=QUEUE_NUMS_MAX, namespace=namespace,
                namespaces=namespaces_in(names))


async def _save(request: web.Request, topic: str, form: Mapping[str, Any], *,
                create: bool) -> None:
    """Create ``topic`` on every master, or update it on its brokers, with the form's settings,
    then wait (at most ROUTE_WAIT_S) until the name servers route it so: brokers tell them in
    the background, and the page shown next reads the route.

    Creating a topic that exists is refused (it would rewrite its queues); an update that lowers
    the read queues below queues with unconsumed messages is refused unless ``force`` is ticked
    (the refusal names the queues and counts)."""
    admin = admin_of(request)
    read_nums = forms.integer(form, "read_queue_nums", 1, QUEUE_NUMS_MAX)
    write_nums = forms.integer(form, "write_queue_nums", 1, QUEUE_NUMS_MAX)
    perm = int(forms.choice(form, "perm", tuple(PERMS), "6"))
    settings: dict[str, Any] = {"read_queue_nums": read_nums, "write_queue_nums": write_nums,
                                "perm": perm, "order": forms.flag(form, "order")}
    if create:
        try:
            brokers = await admin.create_topic(topic, **settings)
        except TopicExistsError as e:
            raise forms.FormError(f"topic {topic} exists (on {', '.join(e.brokers)}): change it "
                                  f"with the Update form on its page") from None
    else:
        brokers = await admin.update_topic(topic, force=forms.flag(form, "force"), **settings)
    wanted = {(b, read_nums, write_nums, perm) for b in brokers}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ROUTE_WAIT_S
    while loop.time() < deadline:
        try:
            route = await admin.topic_route(topic)
        except TopicNotFoundError:
            route = None
        if route is not None and wanted <= {(q.broker_name, q.read_queue_nums, q.write_queue_nums,
                                              q.perm) for q in route.queue_datas}:
            return
        await asyncio.sleep(ROUTE_POLL_S)


@routes.post("/topics")
async def topic_create(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    topic = check_topic(forms.text(form, "topic"))
    await _save(request, topic, form, create=True)
    raise web.HTTPSeeOther(f"/topics/{quote(topic, safe='')}?notice=created")


async def _offsets(admin: AsyncAdmin, topic: str) -> tuple[
        dict[str, dict[MessageQueue, int]], str | None]:
    """Every group's committed offsets of ``topic``, or none and the cluster's refusal (a user
    may read a topic without being allowed every group's offsets)."""
    try:
        return await admin.committed_offsets(topic), None
    except AccessDeniedError as e:
        return {}, e.remark


@routes.get("/topics/{topic}")
async def topic_detail(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    topic = check_topic(request.match_info["topic"])
    route, status, (offsets, groups_refused) = await asyncio.gather(
        admin.topic_route(topic), admin.topic_status(topic), _offsets(admin, topic))
    max_of = {s.queue: s.max_offset for s in status}
    progress = [
        GroupProgress(group, sum(max(0, max_of.get(mq, 0) - off) for mq, off in queues.items()),
                      len(queues))
        for group, queues in offsets.items()]
    first = route.queue_datas[0] if route.queue_datas else None
    return page(request, "topic.html", title=f"Topic {topic}", topic=topic, route=route,
                status=status, groups=progress, groups_refused=groups_refused, first=first,
                perms=PERMS,
                queue_nums_max=QUEUE_NUMS_MAX)


@routes.post("/topics/{topic}/update")
async def topic_update(request: web.Request) -> web.StreamResponse:
    topic = check_topic(request.match_info["topic"])
    await _save(request, topic, await request.post(), create=False)
    raise web.HTTPSeeOther(f"/topics/{quote(topic, safe='')}?notice=saved")


@routes.post("/topics/{topic}/delete")
async def topic_delete(request: web.Request) -> web.StreamResponse:
    topic = check_topic(request.match_info["topic"])
    form = await request.post()
    if forms.text(form, "confirm", required=False) != topic:
        raise forms.FormError(f"type the topic's name ({topic}) into confirm to delete it")
    await admin_of(request).delete_topic(topic)
    raise web.HTTPSeeOther("/topics?notice=deleted")
