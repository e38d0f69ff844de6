"""A plan's rollout (``emq plan apply --canary``) and the signals it watches.

Routes (admin):

=====  =========================  ==========================================================
POST   /v1/rollouts               start one: its canary, steps, thresholds, topics (before)
GET    /v1/rollouts/latest        the rollout started last (what the console's Plan view shows)
GET    /v1/rollouts/{rollout}     one rollout
PATCH  /v1/rollouts/{rollout}     its phase, state, topics' statuses and signals; a heartbeat
GET    /v1/rollouts/signals       watched topics' signals: ?topics=ns/t/x,...&since=&until=
=====  =========================  ==========================================================

The CLI drives the rollout and PATCHes what it sees; the API keeps it (:mod:`emq.core.rollouts`)
and answers a running rollout whose CLI stopped PATCHing as ``abandoned``.

**Signals.** Per topic: ``backlog`` (jobs stored and not finished, now) and ``oldest_age_s``
(the oldest of them, now), read from the queues like ``GET .../topics/{topic}``; ``delivered``,
``failed`` (failed answers: 429/503, other statuses, timeouts) and ``throttled`` (jobs buffered
and waiting for quota at the last interval's end) from the workers' traffic history rows of the
complete intervals in ``[since, until]``. ``interval_s`` is the history interval those rows are
computed over: the larger of the API's (``EMQ_API_HISTORY_INTERVAL_S``) and the workers' latest
rows' (``EMQ_WORKER_HISTORY_INTERVAL_S``); a watch shorter than it sees no complete interval.
One call reads the history written since ``since`` once, for all the topics asked.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web
from typing_extensions import TypedDict

from emq.api.change_metrics import RolloutMetrics
from emq.api.changes import actor_of
from emq.core import schema
from emq.core.errors import ConfigConflict, InvalidInput, NotFound
from emq.core.interfaces import HistoryRow
from emq.core.model import Namespace, Topic, TopicRef, validate_name
from emq.core.rollouts import ID_PATTERN, ID_RE, RolloutStore, merged, shown
from emq.core.schema.rollouts import (
    MAX_SIGNAL_TOPICS,
    RolloutIn,
    RolloutPatch,
    SignalsQuery,
)

if TYPE_CHECKING:
    from emq.api.app import Api

PATH = "/v1/rollouts"
ONE = PATH + "/{rollout}"
ONE_ROUTED = PATH + "/{rollout:" + ID_RE + "}"  # so /latest and /signals are never ids
LATEST = PATH + "/latest"
SIGNALS = PATH + "/signals"
# A history row is written just after its interval ends: an interval that ended less than
# this long ago may not be in yet, so it is not counted.
ROW_GRACE_S = 0.5


class RolloutView(TypedDict, total=False):
    """A stored rollout as answered (``state`` read at answer time: ``abandoned`` when stale)."""

    id: str
    created_at: float
    updated_at: float
    actor: str
    plan: str
    plan_id: str | None
    canary_pct: float
    watch_s: float
    steps: int
    heartbeat_s: float
    thresholds: dict[str, float]
    state: str
    phase: str
    step: int
    reason: str
    topics_done: int
    topics: list[dict[str, Any]]


class TopicSignals(TypedDict):
    name: str
    qps: int
    backlog: int
    oldest_age_s: float
    delivered: int
    failed: int
    throttled: int
    covered_s: float


class SignalsView(TypedDict):
    since: float
    until: float
    interval_s: float
    topics: list[TopicSignals]


class Rollouts:
    """The rollout routes, with the API's dependencies and the rollout store."""

    def __init__(self, api: Api, store: RolloutStore) -> None:
        self.api = api
        self.store = store
        self.metrics = RolloutMetrics(api.metrics.registry, store)
        api.metrics.refreshers.append(self.metrics.latest.refresh)

    async def start(self, request: web.Request) -> web.Response:
        who = await self.api.auth.admin(request)
        body = schema.validate(RolloutIn, await self.api.read_object(request))
        now = time.time()
        rollout = body.model_dump(mode="json") | {
            "id": f"ro_{int(now * 1000)}_{secrets.token_hex(3)}",
            "created_at": round(now, 3),
            "updated_at": round(now, 3),
            "actor": actor_of(who),
            "state": "running",
            "phase": "starting",
            "step": 0,
            "reason": "",
        }
        await self.store.save(rollout, latest=True)
        self.metrics.started.inc()
        return web.json_response(shown(rollout, now), status=201)

    async def latest(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        rollout = await self.store.latest()
        if rollout is None:
            raise NotFound("no rollout yet: run 'emq plan apply PLAN.json --canary 10% --watch 5m'")
        return web.json_response(shown(rollout, time.time()))

    async def show(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        return web.json_response(shown(await self._get(request), time.time()))

    async def patch(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        body = schema.validate(RolloutPatch, await self.api.read_object(request))
        rollout = await self._get(request)
        if rollout.get("state") != "running":
            raise ConfigConflict(f"rollout {rollout['id']} is {rollout.get('state')}: not changed")
        names = {t["name"] for t in rollout.get("topics") or []}
        for i, t in enumerate(body.topics or []):
            if t.name not in names:
                raise InvalidInput(f"topics[{i}].name", f"{t.name} is not in this rollout")
        now = time.time()
        new = merged(rollout, body.model_dump(mode="json", exclude_none=True), now)
        await self.store.save(new)
        self.metrics.patched(rollout, new)
        return web.json_response(shown(new, now))

    async def _get(self, request: web.Request) -> dict[str, Any]:
        rollout_id = request.match_info["rollout"]
        rollout = await self.store.get(rollout_id)
        if rollout is None:
            raise NotFound(f"no rollout {rollout_id} (unknown, or expired)")
        return rollout

    async def signals(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        q = schema.query(SignalsQuery, request.query)
        refs = _refs(q.topics)
        now = time.time()
        until = min(q.until if q.until is not None else now, now)
        # at once, not one round trip after another; a 404 names the (first) unknown topic
        topics = await asyncio.gather(*(self.api.config.get_topic(ref) for ref in refs))
        rows = await self._rows(q.since) if self.api.history is not None else []
        interval = max([float(self.api.api.history_interval_s)] + [r.interval_s for r in rows])
        start = math.ceil(q.since / interval) * interval
        end = math.floor((until - ROW_GRACE_S) / interval) * interval
        covered = max(0.0, end - start)
        backlog, oldest = await self._queued(topics, now)
        answer: SignalsView = {
            "since": q.since,
            "until": until,
            "interval_s": interval,
            "topics": [
                _signals(t, backlog[i], oldest[i], rows, start, end, covered)
                for i, t in enumerate(topics)
            ],
        }
        return web.json_response(answer)

    async def _rows(self, since: float) -> list[HistoryRow]:
        assert self.api.history is not None
        return await self.api.history.recent(max(0, int(since)))

    async def _queued(self, topics: Sequence[Topic], now: float) -> tuple[list[int], list[float]]:
        groups = [t.group_refs() for t in topics]
        queues = [q for gs in groups for g in gs for q in g.queues()]
        counts = await self.api.queues.backlog(queues)
        jobs = self.api.jobs
        firsts = await jobs.oldest_ms(queues) if jobs is not None else [None] * len(queues)
        backlog, oldest, qi = [], [], 0
        for gs in groups:
            n = 3 * len(gs)
            backlog.append(sum(counts[qi : qi + n]))
            first = [ms for ms in firsts[qi : qi + n] if ms is not None]
            oldest.append(round(max(0.0, now - min(first) / 1000), 3) if first else 0.0)
            qi += n
        return backlog, oldest


def _refs(text: str) -> list[TopicRef]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or len(names) > MAX_SIGNAL_TOPICS:
        raise InvalidInput("topics", f"must name 1 to {MAX_SIGNAL_TOPICS} topics")
    out = []
    for name in names:
        parts = name.split("/")
        if len(parts) != 3:
            raise InvalidInput("topics", f"{name!r} is not namespace/tenant/topic")
        ns = Namespace.parse(parts[0], "topics")
        tenant, topic = validate_name(parts[1], "topics"), validate_name(parts[2], "topics")
        out.append(TopicRef(ns, tenant, topic))
    return out


def _signals(
    topic: Topic,
    backlog: int,
    oldest: float,
    rows: Sequence[HistoryRow],
    start: float,
    end: float,
    covered: float,
) -> TopicSignals:
    ref = topic.ref
    mine = [
        r for r in rows
        if (r.namespace, r.tenant, r.topic) == (ref.namespace.value, ref.tenant, ref.topic)
        and r.source != "api"
        and start <= r.interval_start and r.interval_start + r.interval_s <= end
    ]  # fmt: skip
    last = max((r.interval_start for r in mine), default=None)
    return {
        "name": str(ref),
        "qps": topic.qps,
        "backlog": backlog,
        "oldest_age_s": oldest,
        "delivered": sum(r.delivered for r in mine),
        "failed": sum(r.failed for r in mine),
        "throttled": sum(r.throttled_backlog for r in mine if r.interval_start == last),
        "covered_s": covered,
    }


def openapi_routes(route: Any) -> tuple[Any, ...]:
    """This module's routes for the OpenAPI document (``route``: its ``Route`` class)."""
    return (
        route("post", PATH, "Start a plan's rollout (emq plan apply --canary): its canary, "
              "steps, thresholds and topics with their values before", "admin",
              (201, "the rollout", RolloutView), (400, 408, 413, 422, 503), RolloutIn),
        route("get", LATEST, "The rollout started last: phase, state (abandoned when its CLI "
              "stopped beating), per-topic statuses, signals and breaches", "admin",
              (200, "the rollout", RolloutView), (404, 503)),
        route("get", SIGNALS, "Watched topics' signals: backlog and oldest job now, delivered, "
              "failed and throttled over the complete history intervals in [since, until]",
              "admin", (200, "the signals", SignalsView), (404, 422, 503), query=SignalsQuery),
        route("get", ONE, "One rollout", "admin", (200, "the rollout", RolloutView), (404, 503)),
        route("patch", ONE, "Record a rollout's progress (also its heartbeat); 409 once it "
              "has ended", "admin", (200, "the rollout", RolloutView),
              (400, 404, 408, 409, 413, 422, 503), RolloutPatch),
    )  # fmt: skip


def path_parameters(path: str) -> list[dict[str, Any]]:
    """The path parameter of these routes' rollout id."""
    if "{rollout}" not in path:
        return []
    id_schema = {"type": "string", "pattern": ID_PATTERN}
    return [{"name": "rollout", "in": "path", "required": True, "schema": id_schema}]


def add_routes(app: web.Application, api: Api, store: RolloutStore | None) -> None:
    """Register the rollout routes on the API's app (a store in memory when none is given)."""
    if store is None:
        from adapters.memory_rollouts import MemoryRolloutStore

        store = MemoryRolloutStore()
    routes = Rollouts(api, store)
    app.router.add_routes(
        [
            web.post(PATH, routes.start),
            web.get(LATEST, routes.latest),
            web.get(SIGNALS, routes.signals),
            web.get(ONE_ROUTED, routes.show),
            web.patch(ONE_ROUTED, routes.patch),
        ]
    )
