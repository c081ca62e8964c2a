"""Dead letters: the groups that have some, one group's dead letters (each saying whether it was
resent), and the resend form, with the SDK's rules (:mod:`orbitmq.client.admin.dead_letters`): a dead
letter goes back to its own group only (the group's retry topic), and one resent before is
skipped unless ``force`` is ticked. The page after a resend shows what happened, counted: sent,
skipped as resent before, skipped for having no original topic, not reached."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

from aiohttp import web

from orbitmq.client import DLQ_TOPIC_PREFIX, check_group, original_topic
from orbitmq.console import forms
from orbitmq.console.render import page
from orbitmq.console.state import admin_of, state

__all__ = ["routes"]

routes = web.RouteTableDef()

RESENT_SHOWN_MAX = 1_000_000  # a bound on the counts a page after a resend reads back
# The counts a resend redirects with: sent, skipped (resent before, no original topic), not reached.
OUTCOME_COUNTS = ("sent", "skipped", "before", "no_topic", "left")


@routes.get("/dead-letters")
async def dead_letter_groups(request: web.Request) -> web.StreamResponse:
    admin = admin_of(request)
    topics = [t for t in await admin.list_topics() if t.startswith(DLQ_TOPIC_PREFIX)]
    statuses = await asyncio.gather(*(admin.topic_status(t) for t in topics))
    rows = [(t.removeprefix(DLQ_TOPIC_PREFIX), sum(q.max_offset - q.min_offset for q in s))
            for t, s in zip(topics, statuses, strict=True)]
    return page(request, "dead_letters.html", title="Dead letters", groups=rows)


@routes.get("/dead-letters/{group}")
async def dead_letter_list(request: web.Request) -> web.StreamResponse:
    """The group's dead letters; after a resend, how many were sent and skipped."""
    st = state(request)
    group = check_group(request.match_info["group"])
    entries = await admin_of(request).dead_letter_entries(group, st.config.console_rows_max)
    outcome = None
    if "sent" in request.query:
        outcome = {name: forms.integer(request.query, name, 0, RESENT_SHOWN_MAX)
                   for name in OUTCOME_COUNTS}
    return page(request, "dead_letter_group.html", title=f"Dead letters of {group}", group=group,
                entries=entries, original_topic=original_topic, outcome=outcome,
                rows_max=st.config.console_rows_max)


@routes.post("/dead-letters/{group}/resend")
async def dead_letter_resend(request: web.Request) -> web.StreamResponse:
    """Resend one dead letter (``msg_id``) or all not resent yet (all with ``force``), then show
    the list again (a redirect: reloading the page does not resend)."""
    st = state(request)
    group = check_group(request.match_info["group"])
    form = await request.post()
    msg_id = forms.text(form, "msg_id", required=False) or None
    report = await admin_of(request).resend_report(group, msg_id=msg_id,
                                                   force=forms.flag(form, "force"),
                                                   max_messages=st.config.console_rows_max)
    counts = (report.sent, report.skipped, report.skipped_resent_before, report.skipped_no_topic,
              report.left)
    query = "&".join(f"{n}={c}" for n, c in zip(OUTCOME_COUNTS, counts, strict=True))
    raise web.HTTPSeeOther(f"/dead-letters/{quote(group, safe='')}?{query}")
