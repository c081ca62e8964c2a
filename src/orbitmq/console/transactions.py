"""Unresolved transactions: half messages neither committed, rolled back nor discarded yet, on
every master broker (the SDK's ``list_transactions``)."""

from __future__ import annotations

from aiohttp import web

from orbitmq.console.render import page
from orbitmq.console.state import admin_of, state

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/transactions")
async def transaction_list(request: web.Request) -> web.StreamResponse:
    st = state(request)
    pending = await admin_of(request).list_transactions(st.config.console_rows_max)
    return page(request, "transactions.html", title="Unresolved transactions", pending=pending,
                rows_max=st.config.console_rows_max)
