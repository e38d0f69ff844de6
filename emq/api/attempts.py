"""The API of the attempt log, the job search and redeliveries (docs/concepts/attempts.md).

* ``GET .../jobs/{id}/attempts``: a job's recorded attempts, oldest first;
* ``GET .../jobs?state=&key=&idempotency_key=&since=&until=&limit=&cursor=``: the topic's jobs
  whose records are retained, newest outcome first, paged by ``next_cursor``;
* ``POST .../redeliveries`` ``{since, until?, rate?}``: send again, paced, the jobs delivered
  in a window (a replay of the delivered logs: :mod:`emq.api.replay`'s progress and cancel),
  ``GET .../redeliveries`` (latest), ``GET``/``DELETE .../redeliveries/{replay}``,
  ``POST .../redeliveries/{replay}/cancel``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from typing_extensions import TypedDict

from emq.api.replay import ReplayView, view
from emq.core import schema
from emq.core.attempts import AttemptStore, Search, check_window, decode_cursor, encode_cursor
from emq.core.errors import BackendUnavailable, ConfigConflict, InvalidInput, NotFound
from emq.core.jobs import job_place
from emq.core.model import Topic
from emq.core.replays import (
    Progress,
    Replay,
    ReplayStore,
    Selection,
    default_rate,
    is_replay_id,
    new_replay_id,
)
from emq.core.schema.attempts import JobSearchQuery, RedeliveryIn
from emq.core.schema.replays import ReplaysQuery

if TYPE_CHECKING:
    from emq.api.app import Api

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
ATTEMPTS_PATH = _TOPIC + "/jobs/{id}/attempts"
SEARCH_PATH = _TOPIC + "/jobs"
REDELIVERIES_PATH = _TOPIC + "/redeliveries"


class AttemptView(TypedDict, total=False):
    attempt: int
    started_at_ms: int
    duration_ms: int
    outcome: str  # http, timeout, connect, reset, tls, refused, protocol, error
    status: int | None
    detail: str
    headers: dict[str, str]
    response_excerpt: str


class Attempts(TypedDict):
    job_id: str
    attempts: list[AttemptView]
    retention_s: int


class FoundJob(TypedDict):
    id: str
    state: str
    at_ms: int
    attempts: int
    status: int | None
    last_error: str | None


class FoundJobs(TypedDict):
    jobs: list[FoundJob]
    next_cursor: str | None


class Redeliveries(TypedDict):
    redeliveries: list[ReplayView]


def topic_view(topic: Topic) -> dict[str, Any]:
    """The topic's fields of this feature, for its view."""
    return {
        "response_excerpt_bytes": topic.response_excerpt_bytes,
        "callback_url": topic.callback_url,
        "failure_callback_url": topic.failure_callback_url,
        "keep_delivered_s": topic.keep_delivered_s,
    }


class AttemptRoutes:
    def __init__(self, api: Api, replays: ReplayStore | None) -> None:
        self.api = api
        self._replays = replays

    def _store(self) -> AttemptStore:
        jobs = self.api.jobs
        store = jobs.attempt_store if jobs is not None else None
        if store is None:
            raise BackendUnavailable("the attempt log is not served by this API (no job store)")
        return store

    @property
    def replays(self) -> ReplayStore:
        if self._replays is None:
            raise BackendUnavailable("redeliveries are not served by this API (no replay store)")
        return self._replays

    async def _topic(self, request: web.Request, query: Any = None) -> Topic:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request, query)
        return await self.api.config.get_topic(ref)

    async def attempts(self, request: web.Request) -> web.Response:
        query = schema.query(schema.NamespaceQuery, request.query)
        topic = await self._topic(request, query)
        job_id = request.match_info["id"]
        if job_place(job_id) is None:
            raise NotFound(f"no job {job_id!r}")
        store = self._store()
        if not await store.belongs(str(topic.ref), job_id):
            raise NotFound(f"no attempts of job {job_id} recorded in {topic.ref}")
        found = await store.attempts(job_id, 200)
        views: list[AttemptView] = [a.to_dict() for a in found]  # type: ignore[misc]
        return web.json_response(Attempts(job_id=job_id, attempts=views, retention_s=store.ttl_s))

    async def search(self, request: web.Request) -> web.Response:
        q = schema.query(JobSearchQuery, request.query)
        topic = await self._topic(request, q)
        store = self._store()
        name = str(topic.ref)
        since = None if q.since is None else int(q.since * 1000)
        until = None if q.until is None else int(q.until * 1000)
        check_window(since, until, int(time.time() * 1000), store.ttl_s)
        if q.key is not None and q.idempotency_key is not None:
            raise InvalidInput("idempotency_key", "give key or idempotency_key, not both")
        after = decode_cursor(name, q.cursor) if q.cursor else None
        search = Search(q.state, q.key, q.idempotency_key, since, until, q.limit, after)
        found, more = await store.search(name, search)
        cursor = None
        if more and found:
            cursor = encode_cursor(name, found[-1].at_ms, found[-1].job_id)
        rows: list[FoundJob] = [f.to_dict() for f in found]  # type: ignore[misc]
        return web.json_response(FoundJobs(jobs=rows, next_cursor=cursor))

    async def redeliver(self, request: web.Request) -> web.Response:
        topic = await self._topic(request)
        body = schema.validate(RedeliveryIn, await self.api.json_object(request))
        if topic.keep_delivered_s <= 0:
            raise ConfigConflict(
                f"{topic.ref} keeps no delivered jobs: set its keep_delivered_s first"
            )
        since, until = (
            int(body.since * 1000),
            None if body.until is None else int(body.until * 1000),
        )
        check_window(since, until, int(time.time() * 1000), topic.keep_delivered_s)
        rate = body.rate if body.rate is not None else default_rate(topic.qps)
        replay = Replay(
            new_replay_id(),
            topic.ref,
            topic.groups,
            rate,
            Selection(since_ms=since, until_ms=until),
            created_at=time.time(),
            source="delivered",
        )
        replay = await self.replays.create(replay)
        progress = await self.replays.get(topic.ref, replay.id)
        return web.json_response(view(progress), status=201)

    async def latest(self, request: web.Request) -> web.Response:
        query = schema.query(ReplaysQuery, request.query)
        topic = await self._topic(request, query)
        found = await self.replays.latest(topic.ref, query.limit)
        rows = [view(p) for p in found if p.replay.source == "delivered"]
        return web.json_response(Redeliveries(redeliveries=rows))

    async def show(self, request: web.Request) -> web.Response:
        return web.json_response(view(await self._redelivery(request)))

    async def cancel(self, request: web.Request) -> web.Response:
        progress = await self._redelivery(request)
        ref = progress.replay.topic
        return web.json_response(view(await self.replays.cancel(ref, progress.replay.id)))

    async def _redelivery(self, request: web.Request) -> Progress:
        topic = await self._topic(request)
        replay_id = request.match_info["replay"]
        if not is_replay_id(replay_id):
            raise NotFound(f"no redelivery {replay_id!r}")
        progress = await self.replays.get(topic.ref, replay_id)
        if progress.replay.source != "delivered":
            raise NotFound(f"no redelivery {replay_id} of {topic.ref} (a DLQ replay)")
        return progress


def add_routes(app: web.Application, api: Api, replays: ReplayStore | None) -> None:
    """Register the attempt log's, the search's and the redeliveries' routes."""
    routes = AttemptRoutes(api, replays)
    app.router.add_routes(
        [
            web.get(ATTEMPTS_PATH, routes.attempts),
            web.get(SEARCH_PATH, routes.search),
            web.post(REDELIVERIES_PATH, routes.redeliver),
            web.get(REDELIVERIES_PATH, routes.latest),
            web.get(REDELIVERIES_PATH + "/{replay}", routes.show),
            web.delete(REDELIVERIES_PATH + "/{replay}", routes.cancel),
            web.post(REDELIVERIES_PATH + "/{replay}/cancel", routes.cancel),
        ]
    )


def openapi_routes(route: Any) -> tuple[Any, ...]:
    """This module's routes for the OpenAPI document (``route``: its ``Route`` class)."""
    ns = schema.NamespaceQuery
    r = REDELIVERIES_PATH
    return (
        route("get", ATTEMPTS_PATH, "A job's recorded attempts, oldest first", "tenant",
              (200, "its attempts", Attempts), (404, 422, 503), query=ns),
        route("get", SEARCH_PATH, "The topic's jobs with retained records, newest outcome "
              "first: by state, key or idempotency key, in a time window", "tenant",
              (200, "jobs", FoundJobs), (404, 422, 503), query=JobSearchQuery),
        route("post", r, "Send again, paced, the jobs delivered in a window (each as a new "
              "attempt of the same job)", "tenant", (201, "the redelivery", ReplayView),
              (400, 404, 408, 409, 422, 503), RedeliveryIn, ns),
        route("get", r, "A topic's latest redeliveries, newest first", "tenant",
              (200, "redeliveries", Redeliveries), (404, 422, 503), query=ReplaysQuery),
        route("get", r + "/{replay}", "A redelivery's progress", "tenant",
              (200, "the redelivery", ReplayView), (404, 422, 503), query=ns),
        route("delete", r + "/{replay}", "Cancel a redelivery", "tenant",
              (200, "the redelivery, cancelled", ReplayView), (404, 409, 422, 503), query=ns),
        route("post", r + "/{replay}/cancel", "Cancel a redelivery (the same as DELETE)",
              "tenant", (200, "the redelivery, cancelled", ReplayView), (404, 409, 422, 503),
              query=ns),
    )  # fmt: skip
