"""The change log's routes, and the one place quota, split, weight and cap changes are recorded.

``PATCH /v1/tenants/{tenant}/topics/{topic}`` and ``PATCH /v1/tenants/{tenant}`` write through
:class:`ChangeRecorder`: the change function runs inside the configuration store's
compare-and-set, so the values it saw last are the ones the write replaced, and what it
returned is what was written; the recorded fields (:data:`emq.core.changes.TOPIC_FIELDS`,
``qps_cap``) that differ become one :class:`~emq.core.changes.Change`. A topic's creation is
recorded too (its fields, with an empty ``before``), and is not revertible. The CLI and
``emq plan apply`` reach the same routes through the client, which says so in
``X-EMQ-Change-Route`` (``cli``, ``plan``; absent: ``api``) and passes ``--why`` in
``X-EMQ-Change-Why`` (percent-encoded UTF-8, at most 500 characters).

Routes (admin):

=====  ============================  ========================================================
GET    /v1/changes                   newest first; ?namespace, tenant, topic, since, cursor
GET    /v1/changes/{change}          one change
POST   /v1/changes/{change}/revert   its ``before`` applied again (?force=true)
=====  ============================  ========================================================

A revert goes through the same recorder (recorded with reason ``revert of <id>``). It is refused
with 409 when a field it would set back has changed since (its value now is not the change's
``after``), unless ``force``; the check runs inside the compare-and-set, so no write slips
between it and the revert.

The change is applied before it is recorded: if Redis refuses the record, the change stays
applied and the record is written to the API's log (error level) instead of being lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import unquote

from aiohttp import web
from typing_extensions import TypedDict

from emq.api.auth import Principal
from emq.api.change_metrics import ChangeMetrics
from emq.api.tenants import with_cap
from emq.core import schema
from emq.core.changes import (
    CHANGE_ID_PATTERN,
    MAX_REASON_CHARS,
    TENANT_FIELDS,
    TOPIC_SETTABLE,
    Change,
    ChangeFilter,
    ChangeLog,
    ChangeRoute,
    diff,
    stale_fields,
    tenant_fields,
    topic_fields,
)
from emq.core.errors import ConfigConflict, InvalidInput
from emq.core.interfaces import ConfigStore
from emq.core.model import Namespace, Tenant, Topic, TopicRef
from emq.core.schema.changes import ChangesQuery, RevertQuery

if TYPE_CHECKING:
    from emq.api.app import Api

log = logging.getLogger(__name__)

PATH = "/v1/changes"
ONE = PATH + "/{change}"
ROUTE_HEADER = "X-EMQ-Change-Route"
WHY_HEADER = "X-EMQ-Change-Why"
_T = TypeVar("_T")


class ChangeView(TypedDict):
    id: str
    at: float
    actor: str
    route: str
    namespace: str
    tenant: str
    topic: str | None
    before: dict[str, int | None]
    after: dict[str, int | None]
    reason: str
    revert_of: str | None


class Changes(TypedDict):
    changes: list[ChangeView]
    next_cursor: str | None


class Reverted(TypedDict):
    reverted: str
    change: ChangeView | None


@dataclass(frozen=True, slots=True)
class Context:
    """Who is changing something, by which route, and why."""

    actor: str
    route: ChangeRoute
    why: str = ""


def actor_of(who: Principal) -> str:
    """The name a change is recorded under: the admin token's (``admin``) or a tenant's."""
    return "admin" if who.is_admin else f"tenant:{who.tenant}"


def context(request: web.Request, who: Principal) -> Context:
    """The request's change context; a bad route or reason header is a 422 naming it."""
    raw = request.headers.get(ROUTE_HEADER, ChangeRoute.API.value)
    try:
        route = ChangeRoute(raw.strip().lower())
    except ValueError:
        choices = ", ".join(r.value for r in ChangeRoute)
        raise InvalidInput(ROUTE_HEADER, f"must be one of {choices}") from None
    try:
        why = unquote(request.headers.get(WHY_HEADER, ""), errors="strict").strip()
    except UnicodeDecodeError:
        raise InvalidInput(WHY_HEADER, "must be percent-encoded UTF-8") from None
    if len(why) > MAX_REASON_CHARS or not why.isprintable():
        raise InvalidInput(WHY_HEADER, f"must be printable text of at most {MAX_REASON_CHARS} "
                                       "characters")  # fmt: skip
    return Context(actor_of(who), route, why)


class _Seen:
    """A change function that remembers what it was last given: under a compare-and-set that
    retries, the last call is the one whose result was written."""

    def __init__(self, change: Callable[[_T], _T]) -> None:
        self.change = change
        self.before: Any = None

    def __call__(self, current: Any) -> Any:
        self.before = current
        return self.change(current)


class ChangeRecorder:
    """Applies topic and tenant changes through the configuration store and records them."""

    def __init__(
        self,
        config: ConfigStore,
        changes: ChangeLog,
        clock: Callable[[], float] = time.time,
        metrics: ChangeMetrics | None = None,
    ) -> None:
        self.config = config
        self.log = changes
        self._clock = clock
        self.metrics = metrics

    async def update_topic(
        self,
        ctx: Context,
        ref: TopicRef,
        change: Callable[[Topic], Topic],
        revert_of: str | None = None,
    ) -> tuple[Topic, Change | None]:
        seen = _Seen(change)
        topic = await self.config.update_topic(ref, seen)
        before, after = diff(topic_fields(seen.before), topic_fields(topic))
        where = (ref.namespace.value, ref.tenant, ref.topic)
        return topic, await self._record(ctx, where, before, after, revert_of)

    async def created(self, ctx: Context, topic: Topic) -> Change | None:
        """Record a topic's creation: its fields, with nothing before (not revertible)."""
        ref = topic.ref
        where = (ref.namespace.value, ref.tenant, ref.topic)
        return await self._record(ctx, where, {}, topic_fields(topic), None)

    async def update_tenant(
        self,
        ctx: Context,
        name: str,
        namespace: Namespace,
        change: Callable[[Tenant], Tenant],
        revert_of: str | None = None,
    ) -> tuple[Tenant, Change | None]:
        seen = _Seen(change)
        tenant = await self.config.update_tenant(name, seen)
        before, after = diff(
            tenant_fields(seen.before, namespace), tenant_fields(tenant, namespace)
        )
        where = (namespace.value, name, None)
        return tenant, await self._record(ctx, where, before, after, revert_of)

    async def _record(
        self,
        ctx: Context,
        where: tuple[str, str, str | None],
        before: Mapping[str, Any],
        after: Mapping[str, Any],
        revert_of: str | None,
    ) -> Change | None:
        if not after:
            return None
        reason = ctx.why
        if revert_of is not None:
            reason = f"revert of {revert_of}" + (f": {ctx.why}" if ctx.why else "")
        namespace, tenant, topic = where
        change = Change(
            round(self._clock(), 3), ctx.actor, ctx.route, namespace, tenant, topic,
            before, after, reason, revert_of,
        )  # fmt: skip
        if self.metrics is not None:  # applied, whether or not the log then takes it
            self.metrics.applied(change)
        try:
            return await self.log.append(change)
        except Exception:  # applied already: the record must not be lost, nor fail the answer
            log.exception("change applied but not recorded: %s", change.to_dict())
            return None


def view(change: Change) -> ChangeView:
    return cast(ChangeView, change.to_dict())


class ChangeRoutes:
    """The change log's routes, with the API's dependencies and the recorder."""

    def __init__(self, api: Api, recorder: ChangeRecorder) -> None:
        self.api = api
        self.recorder = recorder

    async def list(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        q = schema.query(ChangesQuery, request.query)
        query = ChangeFilter(q.namespace, q.tenant, q.topic, q.since, q.cursor or None, q.limit)
        page = await self.recorder.log.page(query)
        answer = Changes(changes=[view(c) for c in page.changes], next_cursor=page.next_cursor)
        return web.json_response(answer)

    async def show(self, request: web.Request) -> web.Response:
        await self.api.auth.admin(request)
        return web.json_response(view(await self.recorder.log.get(request.match_info["change"])))

    async def revert(self, request: web.Request) -> web.Response:
        ctx = context(request, await self.api.auth.admin(request))
        force = schema.query(RevertQuery, request.query).force
        old = await self.recorder.log.get(request.match_info["change"])
        if old.topic is None:
            new = await self._revert_tenant(ctx, old, force)
        else:
            new = await self._revert_topic(ctx, old, force)
        answer = Reverted(reverted=old.id, change=None if new is None else view(new))
        return web.json_response(answer)

    async def _revert_topic(self, ctx: Context, old: Change, force: bool) -> Change | None:
        assert old.topic is not None
        ref = TopicRef(Namespace(old.namespace), old.tenant, old.topic)
        values = {k: v for k, v in old.before.items() if k in TOPIC_SETTABLE}
        if not values:  # a creation: topics are not deleted
            raise ConfigConflict(f"change {old.id} created {ref}: a creation is not reverted")

        def back(current: Topic) -> Topic:
            if not force:
                _refuse_stale(old, topic_fields(current), TOPIC_SETTABLE)
            return self.api.applied(current, values)

        return (await self.recorder.update_topic(ctx, ref, back, revert_of=old.id))[1]

    async def _revert_tenant(self, ctx: Context, old: Change, force: bool) -> Change | None:
        ns = Namespace(old.namespace)

        def back(current: Tenant) -> Tenant:
            if not force:
                _refuse_stale(old, tenant_fields(current, ns), TENANT_FIELDS)
            return with_cap(ns, old.before.get("qps_cap"), current)

        return (await self.recorder.update_tenant(ctx, old.tenant, ns, back, old.id))[1]


def _refuse_stale(old: Change, current: Mapping[str, Any], settable: tuple[str, ...]) -> None:
    stale = stale_fields(old, current, settable)
    if stale:
        now = ", ".join(f"{k} is {current.get(k)} (the change left {old.after[k]})" for k in stale)
        raise ConfigConflict(
            f"change {old.id} is stale: {now}; revert with force=true to set it back anyway"
        )


def openapi_routes(route: Any) -> tuple[Any, ...]:
    """This module's routes for the OpenAPI document (``route``: its ``Route`` class)."""
    return (
        route("get", PATH, "Recorded quota, split, weight and cap changes, newest first: who, "
              "when, by which route (api, cli, plan), before, after, why", "admin",
              (200, "changes", Changes), (422, 503), query=ChangesQuery),
        route("get", ONE, "One recorded change", "admin", (200, "the change", ChangeView),
              (404, 503)),
        route("post", ONE + "/revert", "Set a change's fields back to their values before it "
              "(recorded as a change, reason 'revert of <id>'); 409 if they have changed since, "
              "unless force=true", "admin", (200, "the revert and its record", Reverted),
              (404, 409, 422, 503), query=RevertQuery),
    )  # fmt: skip


def path_parameters(path: str) -> list[dict[str, Any]]:
    """The path parameter of these routes' change id."""
    if "{change}" not in path:
        return []
    id_schema = {"type": "string", "pattern": CHANGE_ID_PATTERN}
    return [{"name": "change", "in": "path", "required": True, "schema": id_schema}]


def add_routes(app: web.Application, api: Api, recorder: ChangeRecorder) -> None:
    """Register the change log's routes on the API's app."""
    routes = ChangeRoutes(api, recorder)
    app.router.add_routes(
        [
            web.get(PATH, routes.list),
            web.get(ONE, routes.show),
            web.post(ONE + "/revert", routes.revert),
        ]
    )
