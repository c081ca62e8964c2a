"""Pages from Jinja2 templates (autoescaped: topic names, keys, properties and message bodies are
all shown as text, never as markup), the filters they use, and the three views of a body.

Times are shown in UTC (``2026-11-01 12:00:00.123Z``) and the forms read times in UTC, so that
what an operator types means the same whatever the browser's or the server's time zone.
"""

from __future__ import annotations

import datetime
import enum
import json
import re
import string
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from orbitmq.console.security import CSRF_FIELD
from orbitmq.console.state import state, user_of

__all__ = [
    "make_templates",
    "page",
    "format_ms",
    "format_bytes",
    "format_uptime",
    "BodyView",
    "body_view",
    "NOTICES",
    "BODY_SHOWN_MAX",
]

BODY_SHOWN_MAX = 64 * 1024  # bytes of a body a page shows (the rest is counted, not shown)
PREVIEW_CHARS = 80
HEX_ROW = 16
_PRINTABLE = frozenset(string.printable) - frozenset("\x0b\x0c")

# What a redirect after a form may say (?notice=...): fixed texts, nothing from the request.
NOTICES = {
    "saved": "Saved.",
    "created": "Topic created.",
    "deleted": "Topic deleted.",
    "reset": "Offsets reset.",
    "logged-out": "Logged out.",
    "user-created": "User created.",
    "user-saved": "User saved.",
    "user-deleted": "User deleted.",
    "acl-added": "Rule added.",
    "acl-deleted": "Rules deleted.",
}


class BodyView(enum.StrEnum):
    AUTO = "auto"
    TEXT = "text"
    JSON = "json"
    HEX = "hex"


def format_ms(ms: int | None) -> str:
    """Epoch milliseconds as UTC text; '-' for none."""
    if not ms or ms <= 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_bytes(n: int | float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns


def format_age(ms: int) -> str:
    seconds = max(ms, 0) // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


_RUNTIME = re.compile(r"(\d+)\s*days?,\s*(\d+)\s*hours?,\s*(\d+)\s*minutes?,\s*(\d+)\s*seconds?")


def format_uptime(runtime: str | None) -> str:
    """A broker's ``runtime`` (RocketMQ's ``[ 3 days, 4 hours, 5 minutes, 6 seconds ]``) as
    ``3 d 4 h 5 min``: the largest units only, seconds under a minute; other text as it is."""
    found = _RUNTIME.search(runtime or "")
    if found is None:
        return runtime or "-"
    days, hours, minutes, seconds = (int(g) for g in found.groups())
    if days:
        return f"{days} d {hours} h {minutes} min"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else f"{seconds} s"


def _text(body: bytes) -> str | None:
    """The body as UTF-8 text, when it is that and printable."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if all(c in _PRINTABLE or ord(c) > 127 for c in text) else None


def _hex(body: bytes) -> str:
    rows = []
    for at in range(0, len(body), HEX_ROW):
        chunk = body[at:at + HEX_ROW]
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        rows.append(f"{at:08x}  {chunk.hex(' '):<{HEX_ROW * 3 - 1}}  {shown}")
    return "\n".join(rows)


def body_view(body: bytes, view: BodyView = BodyView.AUTO) -> tuple[BodyView, str]:
    """(the view used, the body shown in it). AUTO picks JSON when the body parses as JSON,
    text when it is printable UTF-8, hex otherwise; a view that does not fit falls back to hex.
    At most BODY_SHOWN_MAX bytes are shown."""
    shown = body[:BODY_SHOWN_MAX]
    if view in (BodyView.AUTO, BodyView.JSON):
        try:
            return BodyView.JSON, json.dumps(json.loads(shown), indent=2, ensure_ascii=False)
        except (ValueError, UnicodeDecodeError):
            if view is BodyView.JSON:
                return BodyView.HEX, _hex(shown)
    if view in (BodyView.AUTO, BodyView.TEXT):
        text = _text(shown)
        if text is not None:
            return BodyView.TEXT, text
    return BodyView.HEX, _hex(shown)


def preview(body: bytes) -> str:
    """One line of a body for a table: its text, or its first bytes in hex."""
    text = _text(body[:PREVIEW_CHARS * 4])
    if text is None:
        return body[: PREVIEW_CHARS // 3].hex(" ")
    line = " ".join(text.split())
    return line if len(line) <= PREVIEW_CHARS else line[: PREVIEW_CHARS - 1] + "…"


def make_templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("orbitmq.console", "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ms=format_ms, bytes=format_bytes, age=format_age, uptime=format_uptime, preview=preview,
        q=lambda s: quote(str(s), safe=""),
    )
    return env


def page(request: web.Request, template: str, *, http_status: int = 200, **context: Any) -> web.Response:
    """Render ``template`` with what every page shows (the navigation, the CSRF field, a notice,
    the user logged in)."""
    st = state(request)
    notice = NOTICES.get(request.query.get("notice", ""))
    user = user_of(request)
    html = st.templates.get_template(template).render(
        csrf_field=CSRF_FIELD, csrf=st.guard.csrf_token(request), path=request.path,
        login_required=bool(st.guard.token) or st.guard.user_login, notice=notice,
        namesrv=st.config.namesrv_addr, username=user.username if user else None,
        ask_token=bool(st.guard.token), ask_user=st.guard.user_login, **context)
    return web.Response(text=html, content_type="text/html", status=http_status)
