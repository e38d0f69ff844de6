"""The API's schedules (issue 28, section 2): a topic's cron-fired job templates.

``POST .../schedules`` creates one (201), ``GET .../schedules`` lists a topic's, ``GET
.../schedules/{schedule}`` shows one with its last tick (job id and the job's state) and the next
ticks (``?next=N``, default 5), ``PATCH`` changes it (pause and resume are ``{"paused": ...}``),
``DELETE`` removes it. Firing is :mod:`emq.scheduler.firer`'s; this module writes and reads the
store. The tenant's own token or the admin's.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from aiohttp import web
from pydantic import Field
from typing_extensions import TypedDict

from emq.api.jobs import job_status
from emq.core import schema
from emq.core.errors import BackendUnavailable, EmqError, InvalidInput, NotFound
from emq.core.model import TopicRef, validate_name
from emq.core.schedules import (
    Schedule,
    ScheduleState,
    ScheduleStore,
    first_tick,
    new_schedule_id,
    upcoming,
)
from emq.core.schema.schedules import (
    ScheduleIn,
    SchedulePatch,
    ScheduleQuery,
    checked,
    template,
)

if TYPE_CHECKING:
    from emq.api.app import Api

_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
PATH = _TOPIC + "/schedules"
ONE = PATH + "/{schedule}"

# What changes the ticks: a change to one of these computes the next tick again from now.
_TIMING = frozenset({"cron", "timezone", "start_at", "end_at", "paused"})


class TickView(TypedDict):
    at: Annotated[float, Field(description="epoch seconds")]
    local: Annotated[str, Field(description="ISO 8601 in the schedule's time zone")]


class LastTickView(TypedDict):
    at: float
    local: str
    job_id: str
    job_state: Annotated[
        str | None, Field(description="the job's state (job status), null if no longer known")
    ]
    fired_at: float | None
    lag_s: Annotated[
        float | None,
        Field(description="from the tick to its job stored (negative: stored ahead of it)"),
    ]


class ScheduleView(TypedDict):
    id: str
    namespace: str
    tenant: str
    topic: str
    cron: str
    timezone: str
    job: dict[str, Any]
    start_at: float | None
    end_at: float | None
    catch_up: Annotated[str, Field(description="skip, latest or all")]
    catch_up_max: int
    paused: bool
    created_at: float
    updated_at: float
    next_tick: TickView | None
    next_ticks: list[TickView]
    last_tick: LastTickView | None
    pending_tick: Annotated[
        float | None, Field(description="a tick being fired (its job may be stored already)")
    ]
    fired: Annotated[int, Field(description="ticks whose job was stored")]
    late: Annotated[int, Field(description="of those, fired late (by the catch-up policy)")]
    skipped: Annotated[int, Field(description="ticks the catch-up policy passed over")]


class Schedules(TypedDict):
    schedules: list[ScheduleView]


class ScheduleDeleted(TypedDict):
    id: str
    deleted: bool


def _tick(epoch: int | None, schedule: Schedule) -> TickView | None:
    if epoch is None:
        return None
    return {"at": epoch, "local": datetime.fromtimestamp(epoch, schedule.zone).isoformat()}


def view(
    schedule: Schedule, state: ScheduleState, *, count: int = 5, job_state: str | None = None
) -> ScheduleView:
    # The ticks not fired yet: the cursor (overdue while firers catch up), then the next ones.
    nexts = [] if state.cursor is None else [state.cursor]
    if nexts and count > 1:
        nexts += upcoming(schedule, state.cursor or 0, count - 1)
    last: LastTickView | None = None
    if state.last_tick is not None and state.last_job is not None:
        tick = _tick(state.last_tick, schedule)
        assert tick is not None
        last = {**tick, "job_id": state.last_job, "job_state": job_state,
                "fired_at": state.last_fired_at, "lag_s": state.last_lag_s}  # fmt: skip
    d = schedule.to_dict()
    return {
        **d,  # type: ignore[typeddict-item]
        "next_tick": _tick(state.cursor, schedule),
        "next_ticks": [t for t in (_tick(n, schedule) for n in nexts) if t is not None],
        "last_tick": last,
        "pending_tick": state.pending_tick,
        "fired": state.fired,
        "late": state.late,
        "skipped": state.skipped,
    }


class ScheduleRoutes:
    def __init__(self, api: Api, store: ScheduleStore | None) -> None:
        self.api = api
        self._store = store

    @property
    def store(self) -> ScheduleStore:
        if self._store is None:
            raise BackendUnavailable("schedules are not served by this API (no schedule store)")
        return self._store

    async def _topic(self, request: web.Request, query: ScheduleQuery | None = None) -> TopicRef:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request, query)
        await self.api.config.get_topic(ref)  # 404 for an unknown topic
        return ref

    async def create(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self.api.topic_ref(request)
        body = schema.validate(ScheduleIn, await self.api.json_object(request))
        cron = checked(body.cron, body.timezone)
        assert cron is not None
        job = template(body.job, self.api.enqueuer.limits)
        await self.api.config.get_topic(ref)
        now = time.time()
        schedule = Schedule(
            ref, body.id or new_schedule_id(), cron, body.timezone, job, body.start_at,
            body.end_at, body.catch_up, body.catch_up_max, body.paused, now, now,
        )  # fmt: skip
        cursor = None if schedule.paused else first_tick(schedule, now)
        await self.store.create(schedule, cursor)
        return web.json_response(view(schedule, await self._state(schedule)), status=201)

    async def _state(self, schedule: Schedule) -> ScheduleState:
        return (await self.store.get(schedule.topic, schedule.id))[1]

    async def list(self, request: web.Request) -> web.Response:
        ref = await self._topic(request)
        rows = await self.store.of_topic(ref)
        return web.json_response(Schedules(schedules=[view(s, st, count=1) for s, st in rows]))

    async def show(self, request: web.Request) -> web.Response:
        await self.api.auth.tenant_or_admin(request, request.match_info["tenant"])  # (first)
        query = schema.query(ScheduleQuery, request.query)
        ref = await self._topic(request, query)
        schedule, state = await self.store.get(ref, _schedule_id(request))
        job = await self._job_state(ref, state.last_job)
        return web.json_response(view(schedule, state, count=query.next, job_state=job))

    async def _job_state(self, ref: TopicRef, job_id: str | None) -> str | None:
        if job_id is None or self.api.jobs is None:
            return None
        try:
            found = await job_status(self.api.jobs, await self.api.config.get_topic(ref), job_id)
        except EmqError:  # no longer known (records expire), or the store unreachable
            return None
        state = found.get("state")
        return state if isinstance(state, str) else None

    async def patch(self, request: web.Request) -> web.Response:
        ref = await self._topic(request)
        body = schema.validate(SchedulePatch, await self.api.json_object(request))
        changes = schema.given(body)
        current, state = await self.store.get(ref, _schedule_id(request))
        new = self._changed(current, changes)
        now = time.time()
        keep = not (_TIMING & changes.keys()) and state.cursor is not None and not new.paused
        cursor = state.cursor if keep else (None if new.paused else first_tick(new, now))
        state = await self.store.replace(new, cursor)
        job = await self._job_state(ref, state.last_job)
        return web.json_response(view(new, state, job_state=job))

    def _changed(self, current: Schedule, changes: dict[str, Any]) -> Schedule:
        fields = dict(changes)
        if "cron" in fields or "timezone" in fields:
            fields["cron"] = checked(fields.get("cron", current.cron), fields.get("timezone"))
        if "job" in fields:
            fields["job"] = template(fields["job"], self.api.enqueuer.limits)
        fields["updated_at"] = max(time.time(), current.updated_at + 0.001)
        try:
            return current.changed(**fields)
        except InvalidInput:
            raise
        except (TypeError, ValueError) as e:
            raise InvalidInput(None, str(e)) from None

    async def delete(self, request: web.Request) -> web.Response:
        ref = await self._topic(request)
        schedule_id = _schedule_id(request)
        await self.store.delete(ref, schedule_id)
        return web.json_response(ScheduleDeleted(id=schedule_id, deleted=True))


def _schedule_id(request: web.Request) -> str:
    raw = request.match_info["schedule"]
    try:
        return validate_name(raw, "schedule")
    except InvalidInput:
        raise NotFound(f"no schedule {raw!r}") from None


def add_routes(app: web.Application, api: Api, store: ScheduleStore | None) -> None:
    """Register the schedule routes on the API's app."""
    routes = ScheduleRoutes(api, store)
    app.router.add_routes(
        [
            web.post(PATH, routes.create),
            web.get(PATH, routes.list),
            web.get(ONE, routes.show),
            web.patch(ONE, routes.patch),
            web.delete(ONE, routes.delete),
        ]
    )
