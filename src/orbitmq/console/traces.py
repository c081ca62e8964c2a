"""A message's trace page (the console's "Message Trace", as RocketMQ's dashboard has one): who
sent it, where it is stored, which groups and clients consumed it and how long each step took,
its retries and dead letter, from the trace topic's records and the brokers (the SDK's
``AsyncAdmin.message_trace``)."""

from __future__ import annotations

from aiohttp import web

from orbitmq.client import check_topic
from orbitmq.console import forms
from orbitmq.console.render import page
from orbitmq.console.state import admin_of

__all__ = ["routes"]

routes = web.RouteTableDef()

MSG_ID_MAX = 128


@routes.get("/messages/trace")
async def message_trace(request: web.Request) -> web.StreamResponse:
    """The form; with ``id`` (and optionally ``topic`` and ``trace_topic``), the journey too."""
    q = request.query
    trace = None
    if q.get("id", "").strip():
        msg_id = forms.text(q, "id")
        if len(msg_id) > MSG_ID_MAX:
            raise forms.FormError(f"a message id has at most {MSG_ID_MAX} characters")
        topic = forms.text(q, "topic", required=False) or None
        trace_topic = forms.text(q, "trace_topic", required=False) or None
        trace = await admin_of(request).message_trace(
            msg_id, topic=check_topic(topic) if topic else None,
            trace_topic=check_topic(trace_topic) if trace_topic else None)
    return page(request, "trace.html", title="Message trace", q=q, trace=trace)
