"""Messages: found by id, by key, by queue offset or by store time range; one message with its
properties, its body as text, JSON or hex, and which consumer groups consumed it (those whose
committed offset of its queue is past its queue offset)."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from orbitmq.client import AsyncAdmin, check_topic, consumed_by
from orbitmq.console import forms
from orbitmq.console.render import BodyView, body_view, page
from orbitmq.console.state import ConsoleState, admin_of, state
from orbitmq.errors import AccessDeniedError, ClientError
from orbitmq.protocol.bodies import MessageQueue
from orbitmq.protocol.message import MessageExt

__all__ = ["routes", "SEARCHES"]

routes = web.RouteTableDef()

SEARCHES = ("id", "key", "queue", "time")
OFFSET_MAX = 2**63 - 1
QUEUE_ID_MAX = 2**31 - 1
DAY_MS = 86_400_000


async def _broker_of(admin: AsyncAdmin, msg: MessageExt) -> str | None:
    """The name of the broker that stored ``msg`` (by its store address)."""
    addr = f"{msg.store_host[0]}:{msg.store_host[1]}"
    info = await admin.cluster_info()
    return next((name for name, bd in info.broker_addr_table.items()
                 if addr in bd.broker_addrs.values()), None)


async def _queue_of(admin: AsyncAdmin, topic: str, broker: str, queue_id: int) -> MessageQueue:
    """The queue named by a form: ``broker`` may be left out when one broker has the topic."""
    route = await admin.topic_route(topic)
    names = sorted(q.broker_name for q in route.queue_datas)
    if not broker:
        if len(names) != 1:
            raise forms.FormError(f"topic {topic} is on brokers {', '.join(names)}: pick one")
        broker = names[0]
    elif broker not in names:
        raise forms.FormError(f"topic {topic} has no queues on broker {broker}")
    return MessageQueue(topic, broker, queue_id)


async def _search(st: ConsoleState, admin: AsyncAdmin, by: str, q: Any) -> list[MessageExt]:
    rows_max = st.config.console_rows_max
    topic = check_topic(forms.text(q, "topic"))
    if by == "key":
        now_ms = int(time.time() * 1000)
        begin = forms.utc_ms(q, "begin", default=0)
        end = forms.utc_ms(q, "end", default=now_ms + 1)
        assert begin is not None and end is not None
        return await admin.query_messages(topic, forms.text(q, "key"), rows_max, begin, end)
    if by == "queue":
        mq = await _queue_of(admin, topic, forms.text(q, "broker", required=False),
                             forms.integer(q, "queue_id", 0, QUEUE_ID_MAX))
        count = forms.integer(q, "count", 1, rows_max, default=min(32, rows_max))
        return await admin.queue_messages(mq, forms.integer(q, "offset", 0, OFFSET_MAX), count)
    end = forms.utc_ms(q, "end", default=int(time.time() * 1000))
    assert end is not None
    begin = forms.utc_ms(q, "begin", default=end - DAY_MS)
    assert begin is not None
    queue_id = forms.integer(q, "queue_id", 0, QUEUE_ID_MAX, default=-1)
    return await admin.messages_between(topic, begin, end, rows_max,
                                        queue_id=None if queue_id < 0 else queue_id)


@routes.get("/messages")
async def message_search(request: web.Request) -> web.StreamResponse:
    """The search forms; with ``by`` (and its fields) in the query, their results too."""
    st = state(request)
    q = request.query
    by = forms.choice(q, "by", SEARCHES, "key")
    found: list[MessageExt] | None = None
    if "topic" in q and by != "id":
        found = await _search(st, admin_of(request), by, q)
    return page(request, "messages.html", title="Messages", by=by, q=q, found=found,
                rows_max=st.config.console_rows_max)


@routes.get("/messages/view")
async def message_view(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    q = request.query
    msg_id = forms.text(q, "id")
    topic = forms.text(q, "topic", required=False) or None
    view = BodyView(forms.choice(q, "view", tuple(v.value for v in BodyView), "auto"))
    msg = await admin.view_message(msg_id, topic)
    broker = await _broker_of(admin, msg)
    consumed: dict[str, bool] = {}
    consumed_refused = None
    if broker is not None:
        try:
            offsets = await admin.committed_offsets(msg.topic)
        except ClientError:
            offsets = {}  # a topic deleted since: its message stays readable by id
        except AccessDeniedError as e:  # the user may read the message, not every group's offsets
            offsets, consumed_refused = {}, e.remark
        consumed = consumed_by(offsets, MessageQueue(msg.topic, broker, msg.queue_id),
                               msg.queue_offset)
    shown_as, shown = body_view(bytes(msg.body), view)
    return page(request, "message.html", title=f"Message {msg.msg_id}", msg=msg, broker=broker,
                consumed=consumed, consumed_refused=consumed_refused, view=shown_as, requested=view, body=shown, msg_id=msg_id,
                topic=topic or "", views=[v.value for v in BodyView if v is not BodyView.AUTO])
