"""The HTTP API: routes, request parsing and the app factory.

Routes (see ``/openapi.json`` for the full description):

=========  =================================================  ===============
POST       /v1/tenants                                        admin
GET        /v1/tenants                                        admin
POST       /v1/tenants/{tenant}/topics                        admin
GET        /v1/tenants/{tenant}/topics                        tenant or admin
GET        /v1/tenants/{tenant}/topics/{topic}                tenant or admin
PATCH      /v1/tenants/{tenant}/topics/{topic}                admin
POST       /v1/tenants/{tenant}/topics/{topic}/jobs           tenant or admin
GET        /v1/tenants/{tenant}/topics/{topic}/dlq            tenant or admin
POST       /v1/tenants/{tenant}/topics/{topic}/dlq/replay     tenant or admin
GET        /v1/workers                                        admin
*          .../topics/{topic}/schedules[/{id}] (emq.api.schedules) tenant or admin
GET        /v1/topics (every visible topic, live numbers)     tenant or admin
POST/GET   .../topics/{topic}/subscriptions[/{id}] (PATCH,    tenant or admin
           DELETE, POST .../rotate-secret: emq.api.subscriptions)
POST       .../topics/{topic}/events, GET .../events/{id}     tenant or admin
           (one delivery job per matching subscription: emq.api.events)
POST       /v1/plans (store a capacity plan, emq.api.plans)   admin
GET        /v1/plans/latest (its figures, the dry-run diff)   admin
GET/POST   /v1/changes[/{change}[/revert]] (emq.api.changes)  admin
*          /v1/rollouts[/{rollout}|latest|signals] (emq.api.rollouts) admin
GET        /ui (the web console's static files, emq.api.ui)   anyone
GET        /healthz, /metrics, /openapi.json                  anyone
=========  =================================================  ===============

Topic routes take ``?namespace=online|sandbox`` (default: the API's namespace). Every request is
authenticated first, then validated completely (bodies by :mod:`emq.core.schema`, the definition
``/openapi.json`` is built from), before anything is written.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import Any, cast

from aiohttp import web

from adapters.memory_changes import MemoryChangeLog
from capacity import group_count, kept_cap, split_quota
from emq.api import (
    answers,
    attempts,
    events,
    jsonbody,
    plans,
    replay,
    rollouts,
    subscriptions,
    transactions,
    ui,
)
from emq.api import schedules as schedule_routes
from emq.api.auth import Authenticator, new_token, token_hash
from emq.api.change_metrics import ChangeMetrics
from emq.api.changes import ChangeRecorder
from emq.api.changes import add_routes as add_change_routes
from emq.api.changes import context as change_context
from emq.api.coalesce import CoalescedPuts
from emq.api.endpoints import enable_endpoint
from emq.api.enqueue import BacklogGuard, Enqueuer, topic_backlog
from emq.api.errors import error_middleware
from emq.api.history import EnqueueHistory
from emq.api.jobs import job_status
from emq.api.latency import topic_latency
from emq.api.metrics import ApiMetrics
from emq.api.openapi import spec
from emq.api.settings import ApiSettings
from emq.api.tenants import tenant_row, with_cap
from emq.api.views import dlq_cursor, fleet_view, ids_by_group, letter_view
from emq.core import schema
from emq.core.changes import ChangeLog
from emq.core.endpoints import EndpointBoard
from emq.core.errors import (
    BackendUnavailable,
    InvalidInput,
    MalformedRequest,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
)
from emq.core.interfaces import (
    ApiQueues,
    ConfigStore,
    FleetView,
    HistoryStore,
)
from emq.core.jobs import JobStore
from emq.core.model import (
    JobLimits,
    Namespace,
    PriorityMode,
    Tenant,
    Topic,
    TopicRef,
    validate_name,
)
from emq.core.outbound import check_text
from emq.core.plans import PlanStore
from emq.core.replays import ReplayStore
from emq.core.rollouts import RolloutStore
from emq.core.schedules import ScheduleStore
from emq.core.settings import Settings
from emq.core.subscriptions import SubscriptionStore
from emq.core.transactions import TransactionStore

PROCESS_HEADER = "X-EMQ-Pid"  # on /healthz: the pid of the API process that answered


def new_secret() -> str:
    """A Standard Webhooks signing secret: ``whsec_`` + base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


class Api:
    """The route handlers, holding the dependencies the composition root gave them."""

    def __init__(
        self,
        settings: Settings,
        api: ApiSettings,
        config: ConfigStore,
        queues: ApiQueues,
        metrics: ApiMetrics,
        history: HistoryStore | None = None,
        fleet: FleetView | None = None,
        jobs: JobStore | None = None,
        endpoints: EndpointBoard | None = None,
        changes: ChangeLog | None = None,
    ) -> None:
        self.settings = settings
        self.endpoints = endpoints
        self.jobs = jobs
        self.fleet = fleet
        self.history = history
        self.enqueue_history = EnqueueHistory(history, api.history_interval_s) if history else None
        self.api = api
        self.config = config
        self.queues = queues
        self.metrics = metrics
        self.auth = Authenticator(config, settings.admin_token)
        # Quota, split, weight and cap changes are recorded (emq.api.changes); without a log
        # given, in this process's memory.
        log = changes or MemoryChangeLog(
            retention_s=settings.changes_retention_s, max_entries=settings.changes_max_entries
        )
        self.recorder = ChangeRecorder(config, log, metrics=ChangeMetrics(metrics.registry))
        limits = JobLimits(max_body_bytes=api.max_body_bytes)
        guard = BacklogGuard(queues, api.backlog_refresh_s)
        # Single-job requests arriving together share a Redis round trip (emq.api.coalesce)
        self.enqueuer = Enqueuer(config, CoalescedPuts(queues), limits=limits, guard=guard)
        self.transactions: transactions.Transactions | None = None  # set by make_app

    # ------------------------------------------------------------------ helpers

    async def _body(self, request: web.Request) -> object:
        if request.content.is_eof():  # all of it has arrived (most small bodies): no timer
            raw = await request.read()
        else:
            raw = await self._read_slow(request)
        if not raw:
            raise MalformedRequest(None, "request body is empty; send a JSON object")
        try:
            return jsonbody.decode(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise MalformedRequest(None, f"request body is not valid JSON: {e}") from None
        except RecursionError:
            raise MalformedRequest(None, "request body is JSON nested too deeply") from None

    async def _read_slow(self, request: web.Request) -> bytes:
        try:
            async with asyncio.timeout(self.api.body_timeout_s):  # a slow-body client
                return await request.read()  # aiohttp refuses bodies over client_max_size: 413
        except TimeoutError:
            raise RequestTimeout(
                f"request body was not received within {self.api.body_timeout_s:g} s"
            ) from None

    async def _object(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        if not isinstance(body, dict):
            raise MalformedRequest(None, "request body must be a JSON object")
        return body

    async def read_object(self, request: web.Request) -> dict[str, Any]:
        """The request's body: a JSON object, or the error that says why not."""
        return await self._object(request)

    def namespace(
        self, request: web.Request, query: schema.NamespaceQuery | None = None
    ) -> Namespace:
        """The route's namespace: from ``query`` (a route whose query model is another,
        already read), else the query read as a :class:`~emq.core.schema.NamespaceQuery`
        (unknown parameters refused)."""
        if query is None:
            if not request.query:  # the usual case, and an enqueue's: no model to validate
                return self.settings.namespace
            query = schema.query(schema.NamespaceQuery, request.query)
        raw = query.namespace
        return self.settings.namespace if raw is None else Namespace(raw)

    def _ref(self, request: web.Request, query: schema.NamespaceQuery | None = None) -> TopicRef:
        tenant = validate_name(request.match_info["tenant"], "tenant")
        topic = validate_name(request.match_info["topic"], "topic")
        return TopicRef(self.namespace(request, query), tenant, topic)

    def topic_ref(
        self, request: web.Request, query: schema.NamespaceQuery | None = None
    ) -> TopicRef:
        """The route's topic (tenant and topic checked), for the routes of other modules."""
        return self._ref(request, query)

    async def json_object(self, request: web.Request) -> dict[str, Any]:
        """The request's body as a JSON object (read within the body timeout)."""
        return await self._object(request)

    def view(self, topic: Topic, *, secret: bool = False) -> answers.TopicView:
        ref = topic.ref
        out: answers.TopicView = {
            "namespace": ref.namespace.value,
            "tenant": ref.tenant,
            "topic": ref.topic,
            "qps": topic.qps,
            "groups": topic.groups,
            "group_qps": list(
                split_quota(
                    topic.qps,
                    kept_cap(topic.qps, topic.groups, self.settings.max_group_qps),
                    groups=topic.groups,
                )
            ),
            "paused": topic.paused,
            "max_backlog": topic.max_backlog,
            "endpoint_concurrency": topic.endpoint_concurrency,
            "priority_mode": topic.priority_mode.value,
            "retry": cast(answers.RetryView, topic.retry.to_dict()),
            "dlq_max_entries": topic.dlq_max_entries,
            "dlq_max_age_s": topic.dlq_max_age_s,
            "endpoints": cast(answers.EndpointsView, topic.endpoints.view()),
            "weight": topic.weight,
            "burst": topic.burst,
            "transaction_default": topic.transaction_default,
            **attempts.topic_view(topic),  # type: ignore[typeddict-item]
        }
        if secret:
            out["secret"] = topic.secret
        return out

    # ------------------------------------------------------------------ tenants

    async def create_tenant(self, request: web.Request) -> web.Response:
        await self.auth.admin(request)
        body = schema.validate(schema.TenantIn, await self._object(request))
        display = check_text(body.name, "name")
        token = new_token(body.tenant)
        tenant = Tenant(body.tenant, display, token_hash(token), round(time.time(), 3))
        await self.config.create_tenant(tenant)
        created: answers.TenantCreated = {
            "tenant": body.tenant,
            "name": display,
            "token": token,
            "created_at": tenant.created_at,
        }
        return web.json_response(created, status=201)

    async def list_tenants(self, request: web.Request) -> web.Response:
        await self.auth.admin(request)
        tenants = await self.config.list_tenants()
        return web.json_response(answers.Tenants(tenants=[tenant_row(t) for t in tenants]))

    async def patch_tenant(self, request: web.Request) -> web.Response:
        """Set or remove the tenant's cap in a namespace (docs/concepts/quotas.md, tenant caps)."""
        ctx = change_context(request, await self.auth.admin(request))
        name = validate_name(request.match_info["tenant"], "tenant")
        body = schema.validate(schema.TenantPatch, await self._object(request))
        ns = self.namespace(request) if body.namespace is None else Namespace(body.namespace)
        cap = partial(with_cap, ns, body.qps_cap)
        tenant, _ = await self.recorder.update_tenant(ctx, name, ns, cap)
        return web.json_response(tenant_row(tenant))

    # ------------------------------------------------------------------ topics

    async def create_topic(self, request: web.Request) -> web.Response:
        ctx = change_context(request, await self.auth.admin(request))
        tenant = validate_name(request.match_info["tenant"], "tenant")
        body = schema.validate(schema.TopicIn, await self._object(request))
        query_ns = self.namespace(request)  # (the query is checked even when the body names one)
        ns = query_ns if body.namespace is None else Namespace(body.namespace)
        ref = TopicRef(ns, tenant, body.topic)
        changes = schema.given(body)
        for name in ("topic", "qps", "namespace"):
            changes.pop(name, None)
        topic = self._apply(
            Topic(
                ref,
                body.qps,
                group_count(body.qps, self.settings.max_group_qps),
                secret=new_secret(),
            ),
            changes,
        )
        await self.config.get_tenant(tenant)  # 404 for an unknown tenant
        await self.config.create_topic(topic)
        await self.recorder.created(ctx, topic)
        return web.json_response(self.view(topic, secret=True), status=201)

    async def list_topics(self, request: web.Request) -> web.Response:
        await self.auth.tenant_or_admin(request, request.match_info["tenant"])
        tenant = validate_name(request.match_info["tenant"], "tenant")
        await self.config.get_tenant(tenant)
        topics = await self.config.list_topics(self.namespace(request), tenant)
        return web.json_response(answers.Topics(topics=[self.view(t) for t in topics]))

    async def show_topic(self, request: web.Request) -> web.Response:
        await self.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self._ref(request)
        topic = await self.config.get_topic(ref)
        numbers = await topic_backlog(self.queues, topic)
        rate = await self.history.rate(str(ref)) if self.history is not None else None
        latency: dict[str, Any] = dict((await topic_latency(self.history, [ref])).get(ref) or {})
        shown = self.view(topic) | numbers | {"delivered_per_s": rate} | latency
        if self.endpoints is not None:  # what workers see of its endpoints (emq.api.endpoints)
            shown["endpoint_status"] = await self.endpoints.read(str(ref))
        return web.json_response(shown)

    async def patch_topic(self, request: web.Request) -> web.Response:
        ctx = change_context(request, await self.auth.admin(request))
        ref = self._ref(request)
        changes = schema.given(schema.validate(schema.TopicPatch, await self._object(request)))
        self._apply(await self.config.get_topic(ref), changes)  # validate before writing
        apply = partial(self._apply, changes=changes)
        topic, _ = await self.recorder.update_topic(ctx, ref, apply)
        return web.json_response(self.view(topic))

    def applied(self, topic: Topic, changes: Mapping[str, Any]) -> Topic:
        """``topic`` with validated ``changes`` applied, as a PATCH applies them."""
        return self._apply(topic, changes)

    def _apply(self, topic: Topic, changes: Mapping[str, Any]) -> Topic:
        """``topic`` with validated ``changes`` applied (the quota re-splits the groups)."""
        new = dict(changes)
        if "qps" in changes:
            qps = changes["qps"]
            # Groups never shrink: jobs already queued in a group must stay reachable.
            groups = max(topic.groups, group_count(qps, self.settings.max_group_qps))
            if qps < groups:
                raise InvalidInput(
                    "qps", f"topic has {groups} groups, each needs at least 1 QPS; minimum {groups}"
                )
            new["groups"] = groups
        if "retry" in changes:
            new["retry"] = changes["retry"].policy()
        if "priority_mode" in changes:
            new["priority_mode"] = PriorityMode(changes["priority_mode"])
        if "endpoints" in changes:
            new["endpoints"] = changes["endpoints"].applied(topic.endpoints)
        return replace(topic, **new)

    # ------------------------------------------------------------------ jobs

    async def enqueue(self, request: web.Request) -> web.Response:
        await self.auth.tenant_or_admin(request, request.match_info["tenant"])
        if "transaction_id" in request.query and self.transactions is not None:
            return await self.transactions.enqueue(request)  # prepared, not queued
        ref = self._ref(request)
        body = await self._body(request)
        jobs = body.get("jobs") if isinstance(body, dict) else None
        if isinstance(jobs, list) and len(jobs) > self.api.max_batch_jobs:
            limit = self.api.max_batch_jobs
            raise PayloadTooLarge("jobs", f"more than {limit} jobs in one request")
        accepted = await self.enqueuer.accept(ref, body)
        stored = len(accepted.ids) - accepted.duplicates
        self.metrics.accepted(ref, stored, accepted.duplicates)
        if self.enqueue_history is not None and stored:
            self.enqueue_history.add(await self.config.get_topic(ref), stored)
        answer: answers.Accepted = {"ids": accepted.ids, "duplicates": accepted.duplicates}
        return web.json_response(answer, status=202, dumps=jsonbody.encode)

    async def job_status(self, request: web.Request) -> web.Response:
        ref = self._ref(request)
        await self.auth.tenant_or_admin(request, ref.tenant)
        topic = await self.config.get_topic(ref)
        if self.transactions is not None:  # held in a transaction: "prepared"
            prepared = await self.transactions.job_status(topic, request.match_info["id"])
            if prepared is not None:
                return web.json_response(prepared)
        if self.jobs is None:
            raise NotFound("job status is not served by this API (no job store)")
        return web.json_response(await job_status(self.jobs, topic, request.match_info["id"]))

    # ------------------------------------------------------------------ dead letters

    async def dlq_list(self, request: web.Request) -> web.Response:
        await self.auth.tenant_or_admin(request, request.match_info["tenant"])
        query = schema.query(schema.DlqQuery, request.query)
        ref = self._ref(request, query)
        limit = query.limit
        start_group, after = dlq_cursor(query.cursor)
        topic = await self.config.get_topic(ref)
        rows: list[answers.DeadLetter] = []
        next_cursor = None
        for group in topic.group_refs()[start_group:]:
            letters = await self.queues.list_dead(
                group, after if group.index == start_group else None, limit - len(rows)
            )
            rows += [letter_view(group.index, d) for d in letters]
            if len(rows) >= limit:
                next_cursor = rows[-1]["id"]
                break
        return web.json_response(answers.DeadLetters(dead=rows, next_cursor=next_cursor))

    async def dlq_replay(self, request: web.Request) -> web.Response:
        await self.auth.tenant_or_admin(request, request.match_info["tenant"])
        ref = self._ref(request)
        body = schema.validate(schema.ReplayIn, await self._object(request))
        limit = body.limit
        by_group = None if body.ids is None else ids_by_group(body.ids)
        topic = await self.config.get_topic(ref)
        replayed = 0
        for group in topic.group_refs():
            if replayed >= limit:
                break
            if by_group is None:
                replayed += await self.queues.replay_dead(group, None, limit - replayed)
            elif group.index in by_group:
                replayed += await self.queues.replay_dead(group, by_group[group.index], limit)
        return web.json_response(answers.Replayed(replayed=replayed))

    # ------------------------------------------------------------------ fleet

    async def workers(self, request: web.Request) -> web.Response:
        """The fleet: members with their groups, epochs and delivered/s (see openapi.py)."""
        await self.auth.admin(request)
        if self.fleet is None:
            raise BackendUnavailable("this API has no view of the worker fleet")
        state = await self.fleet.state(self.namespace(request))
        rates = await self.history.source_rates() if self.history is not None else {}
        return web.json_response(fleet_view(state, rates))

    # ------------------------------------------------------------------ operations

    async def healthz(self, request: web.Request) -> web.Response:
        checks: dict[str, str] = {}
        for name, probe in (("redis", self.queues.ping), ("zookeeper", self.config.ping)):
            try:
                await probe()
                checks[name] = "ok"
            except BackendUnavailable as e:
                checks[name] = f"unavailable: {e.message}"
        ok = all(v == "ok" for v in checks.values())
        # Which process answered: one of several with ``emq api --workers N``
        pid = {PROCESS_HEADER: str(os.getpid())}
        if not ok:
            body = {"status": "unavailable", **checks}
            return web.json_response(body, status=503, headers=pid)
        return web.json_response({"status": "ok", **checks}, headers=pid)

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(spec())


API_KEY = web.AppKey("emq_api", Api)


def make_app(
    settings: Settings,
    api: ApiSettings,
    config: ConfigStore,
    queues: ApiQueues,
    history: HistoryStore | None = None,
    fleet: FleetView | None = None,
    jobs: JobStore | None = None,
    *,
    replays: ReplayStore | None = None,
    endpoints: EndpointBoard | None = None,
    plan_store: PlanStore | None = None,
    subscription_store: SubscriptionStore | None = None,
    transaction_store: TransactionStore | None = None,
    schedules: ScheduleStore | None = None,
    changes: ChangeLog | None = None,
    rollout_store: RolloutStore | None = None,
) -> web.Application:
    """The aiohttp application; the caller owns the backends and closes them."""
    metrics = ApiMetrics()
    metrics.watch_topics(config, queues, jobs, settings.namespace)
    handlers = Api(settings, api, config, queues, metrics, history, fleet, jobs, endpoints, changes)
    app = web.Application(
        client_max_size=api.max_request_bytes,
        middlewares=[metrics.middleware, error_middleware],
    )
    app[API_KEY] = handlers
    if handlers.enqueue_history is not None:
        app.cleanup_ctx.append(handlers.enqueue_history.context)
    topic = "/v1/tenants/{tenant}/topics/{topic}"
    app.router.add_routes(
        [
            web.post("/v1/tenants", handlers.create_tenant),
            web.get("/v1/tenants", handlers.list_tenants),
            web.patch("/v1/tenants/{tenant}", handlers.patch_tenant),
            web.post("/v1/tenants/{tenant}/topics", handlers.create_topic),
            web.get("/v1/tenants/{tenant}/topics", handlers.list_topics),
            web.get(topic, handlers.show_topic),
            web.patch(topic, handlers.patch_topic),
            web.post(topic + "/jobs", handlers.enqueue),
            web.get(topic + "/jobs/{id}", handlers.job_status),
            web.get(topic + "/dlq", handlers.dlq_list),
            web.post(topic + "/dlq/replay", handlers.dlq_replay),
            web.post(topic + "/endpoints/enable", functools.partial(enable_endpoint, handlers)),
            web.get("/v1/workers", handlers.workers),
            web.get("/healthz", handlers.healthz),
            web.get("/metrics", metrics.handle),
            web.get("/openapi.json", handlers.openapi),
        ]
    )
    ui.add_routes(app, handlers)
    replay.add_routes(app, handlers, replays)
    attempts.add_routes(app, handlers, replays)
    plans.add_routes(app, handlers, plan_store)
    subscriptions.add_routes(app, handlers, subscription_store)
    events.add_routes(app, handlers, subscription_store, CoalescedPuts(queues))
    handlers.transactions = transactions.add_routes(app, handlers, transaction_store)
    if transaction_store is not None:
        app.cleanup_ctx.append(transactions.runner_context(handlers, transaction_store))
    schedule_routes.add_routes(app, handlers, schedules)
    add_change_routes(app, handlers, handlers.recorder)
    rollouts.add_routes(app, handlers, rollout_store)
    return app
