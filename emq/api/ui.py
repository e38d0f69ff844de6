"""The web console: its static files at ``/ui`` and the one read it polls, ``GET /v1/topics``.

The files are shipped in the package (``emq/api/console/``: plain HTML, CSS and JavaScript, no
build step) and served without authentication: they hold no data. Every data call the page makes
carries the token the user signed in with as ``Authorization: Bearer``; the token lives in the
tab's ``sessionStorage``, never in a URL.

``GET /v1/topics`` answers every topic the caller may see with its live numbers (backlog,
delayed, delivered/s, enqueue-to-delivery p50/p99 over the last minute) in one request, so a
console polling once a second costs the API one request a second, whatever the number of
topics: the admin sees every tenant's topics, a tenant only its own (the same rule as the
per-topic routes).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from emq.api.enqueue import topic_backlog
from emq.api.latency import topic_latency
from emq.core.model import Topic

if TYPE_CHECKING:
    from emq.api.app import Api

ASSETS = Path(__file__).with_name("console")
# Everything the page loads besides index.html, with its type (said, not guessed: Python's
# mimetypes answers differently across versions, and /openapi.json documents these).
FILES = {
    "app.js": "text/javascript",
    "replays.js": "text/javascript",
    "subscriptions.js": "text/javascript",
    "schedules.js": "text/javascript",
    "attempts.js": "text/javascript",
    "app.css": "text/css",
}
MAX_TOPICS = 500  # a console row each: beyond that a table is no longer read, and each costs reads

# The page loads nothing but its own files and talks to nothing but this API.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class Console:
    """Serves the console's files and its overview read, with the API's dependencies."""

    def __init__(self, api: Api) -> None:
        self.api = api

    async def redirect(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/")

    async def index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(ASSETS / "index.html", headers=HEADERS)

    async def asset(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in FILES:  # a fixed list: no path from the URL ever reaches the disk
            raise web.HTTPNotFound()
        return web.FileResponse(ASSETS / name, headers=HEADERS | {"Content-Type": FILES[name]})

    async def topics(self, request: web.Request) -> web.Response:
        """Every topic visible to the caller, with backlog, delayed and delivered/s."""
        who = await self.api.auth.principal(request)
        namespace = self.api.namespace(request)  # (the query checked as every route's)
        if who.tenant is None:
            tenants = [t.name for t in await self.api.config.list_tenants()]
        else:
            tenants = [who.tenant]
        topics: list[Topic] = []
        for tenant in tenants:
            topics += await self.api.config.list_topics(namespace, tenant)
        shown = topics[:MAX_TOPICS]
        rows = await asyncio.gather(*(self._row(t) for t in shown))
        latency = await topic_latency(self.api.history, [t.ref for t in shown])
        for topic, row in zip(shown, rows, strict=True):
            row.update(latency.get(topic.ref, {}))
        return web.json_response(
            {
                "namespace": namespace.value,
                "tenant": who.tenant,
                "at": round(time.time(), 3),
                "topics": rows,
                "truncated": len(topics) > len(shown),
            }
        )

    async def _row(self, topic: Topic) -> dict[str, Any]:
        numbers = await topic_backlog(self.api.queues, topic)
        numbers.pop("per_group")  # the per-topic route has them; the table does not
        history = self.api.history
        rate = await history.rate(str(topic.ref)) if history is not None else None
        row = self.api.view(topic) | numbers | {"delivered_per_s": rate}
        board = self.api.endpoints
        if board is not None and topic.endpoints.active:  # (emq.api.endpoints)
            row["endpoint_status"] = await board.read(str(topic.ref))
        return row


def add_routes(app: web.Application, api: Api) -> None:
    """Register the console's routes on the API's app."""
    console = Console(api)
    app.router.add_routes(
        [
            web.get("/ui", console.redirect),
            web.get("/ui/", console.index),
            web.get("/ui/{name}", console.asset),
            web.get("/v1/topics", console.topics),
        ]
    )
