"""The API's DLQ replays (issue 16, item 4): a replay is a resource.

``POST .../dlq/replays`` creates one (201 with its id and progress), ``GET .../dlq/replays``
lists a topic's latest, ``GET .../dlq/replays/{replay}`` shows one (total, replayed, skipped,
remaining, rate, state), ``DELETE`` or ``POST .../cancel`` cancels it. The worker fleet moves the
letters (:mod:`worker.replay`); this module only writes and reads the store.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from emq.core import schema
from emq.core.errors import BackendUnavailable, InvalidInput, NotFound
from emq.core.model import TopicRef
from emq.core.replays import (
    Progress,
    Replay,
    ReplayStore,
    Selection,
    default_rate,
    is_replay_id,
    new_replay_id,
)
from emq.core.schema.replays import ReplayCreateIn, ReplaysQuery

if TYPE_CHECKING:
    from emq.api.app import Api

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
PATH = _TOPIC + "/dlq/replays"


class ReplayView(TypedDict):
    id: str
    tenant: str
    topic: str
    namespace: str
    state: Annotated[str, Field(description="running, done, cancelled or failed")]
    mode: Annotated[str, Field(description="all, ids or window")]
    since: float | None
    until: float | None
    rate: Annotated[
        float,
        Field(
            description="letters moved back into the topic's queues per second (delivered "
            "with its live jobs within its quota: under a live backlog, more slowly)"
        ),
    ]
    total: Annotated[int, Field(description="letters selected when the replay was created")]
    replayed: Annotated[int, Field(description="letters back in their queues")]
    skipped: Annotated[int, Field(description="selected letters not put back (unreadable, or "
                                              "gone from the DLQ meanwhile)")]  # fmt: skip
    remaining: int
    created_at: float
    finished_at: float | None
    error: str


class Replays(TypedDict):
    replays: list[ReplayView]


def view(progress: Progress) -> ReplayView:
    r, s = progress.replay, progress.replay.selection
    return {
        "id": r.id,
        "tenant": r.topic.tenant,
        "topic": r.topic.topic,
        "namespace": r.topic.namespace.value,
        "state": r.state.value,
        "mode": s.mode,
        "since": None if s.since_ms is None else s.since_ms / 1000,
        "until": None if s.until_ms is None else s.until_ms / 1000,
        "rate": r.rate,
        "total": r.total,
        "replayed": progress.replayed,
        "skipped": progress.skipped,
        "remaining": progress.remaining,
        "created_at": r.created_at,
        "finished_at": r.finished_at,
        "error": r.error,
    }


class ReplayRoutes:
    def __init__(self, api: Api, store: ReplayStore | None) -> None:
        self.api = api
        self._store = store

    @property
    def store(self) -> ReplayStore:
        if self._store is None:
            raise BackendUnavailable("DLQ replays are not served by this API (no replay store)")
        return self._store

    async def create(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        body = schema.validate(ReplayCreateIn, await self.api.json_object(request))
        selection = _selection(body)
        topic = await self.api.config.get_topic(ref)
        if selection.ids is not None:
            for text in selection.ids:
                if int(text.partition(":")[0]) >= topic.groups:
                    raise InvalidInput("ids", f"{text}: the topic has {topic.groups} groups")
        rate = body.rate if body.rate is not None else default_rate(topic.qps)
        replay = Replay(new_replay_id(), ref, topic.groups, rate, selection, created_at=time.time())
        replay = await self.store.create(replay)
        progress = await self.store.get(ref, replay.id)
        return web.json_response(view(progress), status=201)

    async def latest(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        query = schema.query(ReplaysQuery, request.query)
        ref = self.api.topic_ref(request, query)
        await self.api.config.get_topic(ref)  # an unknown topic is 404, not an empty list
        found = await self.store.latest(ref, query.limit)
        found = [p for p in found if p.replay.source == "dlq"]  # (not redeliveries)
        return web.json_response(Replays(replays=[view(p) for p in found]))

    async def show(self, request: web.Request) -> web.Response:
        ref, replay_id = await self._target(request)
        return web.json_response(view(await self.store.get(ref, replay_id)))

    async def cancel(self, request: web.Request) -> web.Response:
        ref, replay_id = await self._target(request)
        return web.json_response(view(await self.store.cancel(ref, replay_id)))

    async def _target(self, request: web.Request) -> tuple[TopicRef, str]:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        replay_id = request.match_info["replay"]
        if not is_replay_id(replay_id):
            raise NotFound(f"no replay {replay_id!r}")
        await self.api.config.get_topic(ref)
        return ref, replay_id


def _selection(body: ReplayCreateIn) -> Selection:
    if body.ids is not None and (body.since is not None or body.until is not None):
        raise InvalidInput("ids", "give ids or a time window (since/until), not both")
    if body.since is not None and body.until is not None and body.since > body.until:
        raise InvalidInput("until", f"must not be before since ({body.since:g})")
    return Selection(
        ids=tuple(body.ids) if body.ids is not None else None,
        since_ms=None if body.since is None else int(body.since * 1000),
        until_ms=None if body.until is None else int(body.until * 1000),
    )


def add_routes(app: web.Application, api: Api, store: ReplayStore | None) -> None:
    """Register the replay routes on the API's app."""
    routes = ReplayRoutes(api, store)
    app.router.add_routes(
        [
            web.post(PATH, routes.create),
            web.get(PATH, routes.latest),
            web.get(PATH + "/{replay}", routes.show),
            web.delete(PATH + "/{replay}", routes.cancel),
            web.post(PATH + "/{replay}/cancel", routes.cancel),
        ]
    )
