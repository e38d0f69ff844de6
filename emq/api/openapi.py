"""The OpenAPI 3.1 document served at ``/openapi.json``, derived from the definitions.

Request bodies and query parameters are the models of :mod:`emq.core.schema` (the ones the
API validates with), answers are the dictionaries of :mod:`emq.api.answers` (the ones the
handlers build); their JSON Schemas become ``components.schemas``. What is written here is only
the route table: who may call a route, which body it takes, what it answers. A test checks
that the table lists exactly the app's routes, and a schemathesis run checks the server against
the document (``tests/api/test_openapi_fuzz.py``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from emq import __version__
from emq.api import answers, events_doc, plan_answers, replay, transactions, ui
from emq.api import attempts as attempt_routes
from emq.api import changes as change_routes
from emq.api import rollouts as rollout_routes
from emq.api import schedules as schedule_api
from emq.core import plan_schema, schema
from emq.core.replays import REPLAY_ID_PATTERN
from emq.core.schema import replays as schema_replay
from emq.core.schema import schedules as schema_schedules
from emq.core.schema import transactions as schema_tx
from emq.core.schema.endpoints import EndpointEnableIn
from emq.core.transactions import TRANSACTION_ID_PATTERN

Auth = Literal["admin", "tenant", "none"]

_ERRORS = {
    400: "malformed JSON, or a body that is not a JSON object",
    401: "missing or invalid token (checked before anything else)",
    403: "not allowed for this token (a tenant token on an admin route)",
    404: "unknown tenant or topic (another tenant's are unknown too); no plan stored yet",
    408: "request headers or body not received in time (EMQ_API_*_TIMEOUT_S)",
    409: "already exists, or changed concurrently",
    413: "job or request too large",
    422: "invalid field; error.field names it (jobs[3].url, headers.X-A, retry.jitter)",
    429: "topic backlog above max_backlog (see Retry-After)",
    503: "Redis or ZooKeeper unreachable",
}
_AUTH_ERRORS: dict[Auth, tuple[int, ...]] = {
    "admin": (401, 403),
    "tenant": (401, 404),
    "none": (),
}


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    summary: str
    auth: Auth
    answer: tuple[int, str, type[Any] | None]
    errors: tuple[int, ...] = (503,)
    body: Any = None  # a model of emq.core.schema, or a JSON Schema
    query: type[schema.Query] | None = None


_TOPIC = "/v1/tenants/{tenant}/topics/{topic}"
_BODY_ERRORS = (400, 408, 422, 503)
# Schedules (emq.api.schedules): a topic's cron-fired job templates.
_SCHEDULE_ROUTES = (
    Route(
        "post",
        schedule_api.PATH,
        "Create a schedule: a job template fired on a cron expression in a time zone, one job "
        "per tick (docs/concepts/schedules.md)",
        "tenant",
        (201, "the schedule", schedule_api.ScheduleView),
        (*_BODY_ERRORS, 409, 413),
        schema_schedules.ScheduleIn,
        schema.NamespaceQuery,
    ),
    Route(
        "get",
        schedule_api.PATH,
        "A topic's schedules, by id, each with its next tick",
        "tenant",
        (200, "schedules", schedule_api.Schedules),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "get",
        schedule_api.ONE,
        "A schedule: its last tick fired (job id and the job's state), the next ticks (?next=N, "
        "default 5) and its counters (fired, late, skipped)",
        "tenant",
        (200, "the schedule", schedule_api.ScheduleView),
        (422, 503),
        query=schema_schedules.ScheduleQuery,
    ),
    Route(
        "patch",
        schedule_api.ONE,
        "Change a schedule (at least one field); pause and resume are {\"paused\": true|false}. "
        "A change to its timing computes the next tick again from now",
        "tenant",
        (200, "the schedule", schedule_api.ScheduleView),
        (*_BODY_ERRORS, 413),
        schema_schedules.SchedulePatch,
        schema.NamespaceQuery,
    ),
    Route(
        "delete",
        schedule_api.ONE,
        "Delete a schedule (jobs it enqueued stay)",
        "tenant",
        (200, "deleted", schedule_api.ScheduleDeleted),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
)

ROUTES = (
    Route(
        "post",
        "/v1/tenants",
        "Create a tenant; the answer holds its API token, shown once",
        "admin",
        (201, "created", answers.TenantCreated),
        (*_BODY_ERRORS, 409),
        schema.TenantIn,
    ),
    Route("get", "/v1/tenants", "List tenants", "admin", (200, "tenants", answers.Tenants)),
    Route(
        "patch",
        "/v1/tenants/{tenant}",
        "Set or remove a tenant's cap over all its topics in a namespace (tenant quota)",
        "admin",
        (200, "tenant", answers.TenantRow),
        (*_BODY_ERRORS, 404, 409),
        schema.TenantPatch,
        schema.NamespaceQuery,
    ),
    Route(
        "post",
        "/v1/tenants/{tenant}/topics",
        "Create a topic; groups follow the split rule",
        "admin",
        (201, "created", answers.TopicView),
        (*_BODY_ERRORS, 404, 409),
        schema.TopicIn,
        schema.NamespaceQuery,
    ),
    Route(
        "get",
        "/v1/tenants/{tenant}/topics",
        "List a tenant's topics",
        "tenant",
        (200, "topics", answers.Topics),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "get",
        _TOPIC,
        "Show a topic: quota, groups, backlog per priority, delivered/s, enqueue-to-delivery "
        "p50/p99 over the last minute (estimates within fixed buckets), paused",
        "tenant",
        (200, "topic", answers.TopicView),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "patch",
        _TOPIC,
        "Change a topic live: quota, pause, retry, limits (at least one field)",
        "admin",
        (200, "topic", answers.TopicView),
        (*_BODY_ERRORS, 404, 409),
        schema.TopicPatch,
        schema.NamespaceQuery,
    ),
    Route(
        "post",
        _TOPIC + "/jobs",
        "Enqueue one job or a batch; 202 = durably stored",
        "tenant",
        (202, "accepted", answers.Accepted),
        (*_BODY_ERRORS, 404, 409, 413, 429),
        {"oneOf": [schema.JobIn, schema.JobBatchIn]},
        schema_tx.EnqueueQueryDoc,
    ),
    Route(
        "get",
        _TOPIC + "/jobs/{id}",
        "One job's state and, while it waits, why (docs: concepts/job-status.md)",
        "tenant",
        (200, "the job's status", answers.JobStatus),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "get",
        _TOPIC + "/dlq",
        "List dead-lettered jobs, oldest first",
        "tenant",
        (200, "dead letters", answers.DeadLetters),
        (422, 503),
        query=schema.DlqQuery,
    ),
    Route(
        "post",
        _TOPIC + "/dlq/replay",
        "Put dead letters back in their queues (delivered at the quota)",
        "tenant",
        (200, "replayed", answers.Replayed),
        _BODY_ERRORS,
        schema.ReplayIn,
        schema.NamespaceQuery,
    ),
    Route(
        "post",
        replay.PATH,
        "Start a paced replay of dead letters (all, by ids, or by time of failure) at its own "
        "rate (default 5% of the quota); the answer holds its id",
        "tenant",
        (201, "the replay", replay.ReplayView),
        _BODY_ERRORS,
        schema_replay.ReplayCreateIn,
        schema.NamespaceQuery,
    ),
    Route(
        "get",
        replay.PATH,
        "A topic's latest replays, newest first",
        "tenant",
        (200, "replays", replay.Replays),
        (422, 503),
        query=schema_replay.ReplaysQuery,
    ),
    Route(
        "get",
        replay.PATH + "/{replay}",
        "A replay's progress: total, replayed, skipped, remaining, rate, state",
        "tenant",
        (200, "the replay", replay.ReplayView),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "delete",
        replay.PATH + "/{replay}",
        "Cancel a replay (what it moved stays moved)",
        "tenant",
        (200, "the replay, cancelled", replay.ReplayView),
        (409, 422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        replay.PATH + "/{replay}/cancel",
        "Cancel a replay (the same as DELETE)",
        "tenant",
        (200, "the replay, cancelled", replay.ReplayView),
        (409, 422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        transactions.PATH,
        "Open a transaction: jobs prepared in it are stored but delivered only once it commits; "
        "if still open after timeout_s, EMQ asks check_url for the decision",
        "tenant",
        (201, "the transaction", transactions.TransactionView),
        (*_BODY_ERRORS, 429),
        schema_tx.TransactionIn,
        schema.NamespaceQuery,
    ),
    Route(
        "get",
        transactions.PATH,
        "A topic's transactions, newest first",
        "tenant",
        (200, "transactions", transactions.TransactionList),
        (422, 503),
        query=schema_tx.TransactionsQuery,
    ),
    Route(
        "get",
        transactions.PATH + "/{transaction_id}",
        "A transaction: state, jobs, its decision and where it came from, its log",
        "tenant",
        (200, "the transaction", transactions.TransactionView),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        transactions.PATH + "/{transaction_id}/jobs",
        "Prepare one job or a batch in an open transaction (the same body as an enqueue; also "
        "POST .../jobs?transaction_id=); 409 if it is decided",
        "tenant",
        (202, "prepared", transactions.Prepared),
        (*_BODY_ERRORS, 409, 413, 429),
        {"oneOf": [schema.JobIn, schema.JobBatchIn]},
        schema.NamespaceQuery,
    ),
    Route(
        "post",
        transactions.PATH + "/{transaction_id}/commit",
        "Commit: every job is delivered (idempotent); 409 with the final state if it was "
        "rolled back",
        "tenant",
        (200, "the transaction, committed", transactions.TransactionView),
        (409, 422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        transactions.PATH + "/{transaction_id}/rollback",
        "Roll back: every job is discarded (idempotent); 409 with the final state if it was "
        "committed",
        "tenant",
        (200, "the transaction, rolled back", transactions.TransactionView),
        (409, 422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        _TOPIC + "/endpoints/enable",
        "Re-enable an endpoint workers disabled after repeated failures (* for all); its held "
        "jobs go again",
        "admin",
        (200, "the topic", answers.TopicView),
        (*_BODY_ERRORS, 404, 409),
        EndpointEnableIn,
        schema.NamespaceQuery,
    ),
    Route(
        "get",
        "/v1/workers",
        "The worker fleet: members, their groups, epochs and rates",
        "admin",
        (200, "the fleet", answers.Fleet),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "get",
        "/v1/topics",
        "Every topic the caller may see (admin: all; a tenant: its own), with backlog, delayed, "
        "delivered/s and enqueue-to-delivery p50/p99 over the last minute: what the console polls",
        "tenant",
        (200, "the topics", None),
        (422, 503),
        query=schema.NamespaceQuery,
    ),
    Route(
        "post",
        "/v1/plans",
        "Store a capacity plan (plan.json of emq plan run; emq plan apply sends it): the latest "
        "EMQ_API_PLANS_KEPT are kept",
        "admin",
        (201, "stored", plan_answers.PlanStored),
        (*_BODY_ERRORS, 413),
        plan_schema.PlanIn,
        plan_schema.PlanQuery,
    ),
    Route(
        "get",
        "/v1/plans/latest",
        "The latest capacity plan: the report's figures and series, and the dry-run diff "
        "against the configuration now (the rules of emq plan apply)",
        "admin",
        (200, "the plan", plan_answers.PlanView),
        (404, 503),
    ),
    Route("get", "/ui", "The web console (redirects to /ui/)", "none", (302, "redirect", None), ()),
    Route("get", "/ui/", "The web console's page", "none", (200, "the page", None), ()),
    Route(
        "get",
        "/ui/{name}",
        "The web console's script and style sheet",
        "none",
        (200, "the file", None),
        (404,),
    ),
    Route("get", "/healthz", "Liveness and backends", "none", (200, "ok", answers.Health)),
    Route("get", "/metrics", "Prometheus metrics (text)", "none", (200, "metrics", None), ()),
    Route("get", "/openapi.json", "This document", "none", (200, "OpenAPI 3.1", None), ()),
    *_SCHEDULE_ROUTES,
    *attempt_routes.openapi_routes(Route),
)

ROUTES += events_doc.routes(Route)  # subscriptions and events (emq.api.events_doc)
ROUTES += change_routes.openapi_routes(Route)  # the change log (emq.api.changes)
ROUTES += rollout_routes.openapi_routes(Route)  # plan rollouts (emq.api.rollouts)


# The console's routes (emq.api.ui) answer files, not JSON: their content types.
_CONSOLE_TYPES: dict[str, tuple[str, ...]] = {
    "/ui": (),
    "/ui/": ("text/html",),
    "/ui/{name}": tuple(sorted(set(ui.FILES.values()))),
}


def _ref(model: type[Any]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _models() -> list[tuple[type[Any], Literal["validation", "serialization"]]]:
    models = (*schema.REQUEST_MODELS, *schema.QUERY_MODELS)
    models += tuple(r.body for r in ROUTES if isinstance(r.body, type) and r.body not in models)
    for r in ROUTES:  # the models of a {"oneOf": [...]} body
        if isinstance(r.body, dict):
            models += tuple(m for ms in r.body.values() for m in ms if m not in models)
    models += tuple(r.query for r in ROUTES if r.query is not None and r.query not in models)
    requests = [(m, "validation") for m in models]
    replies = [(r.answer[2], "serialization") for r in ROUTES if r.answer[2] is not None]
    return [*requests, *replies, (answers.Error, "serialization")]  # type: ignore[list-item]


class _Generator(GenerateJsonSchema):
    """pydantic's JSON Schema, with a dict whose keys have a pattern said as JSON Schema means
    it: ``propertyNames`` (pydantic's ``patternProperties`` would let other keys through)."""

    def dict_schema(self, schema: Any) -> dict[str, Any]:
        out = super().dict_schema(schema)
        patterns = out.get("patternProperties", {})
        if len(patterns) == 1:
            ((pattern, values),) = patterns.items()
            del out["patternProperties"]
            out["propertyNames"] = {"pattern": pattern}
            out["additionalProperties"] = values
        return out


def _components() -> dict[str, Any]:
    inputs = [(m, mode, TypeAdapter(m)) for m, mode in dict(_models()).items()]
    _, top = TypeAdapter.json_schemas(
        inputs, ref_template="#/components/schemas/{model}", schema_generator=_Generator
    )
    return dict(top["$defs"])


def _parameters(route: Route, components: dict[str, Any]) -> list[dict[str, Any]]:
    params = [
        {"name": name, "in": "path", "required": True, "schema": _name_schema()}
        for name in ("tenant", "topic")
        if "{" + name + "}" in route.path
    ]
    if "{id}" in route.path:
        job_id = {"type": "string", "pattern": "^msg_[0-9a-z]{26}$"}
        params.append({"name": "id", "in": "path", "required": True, "schema": job_id})
    if "{transaction_id}" in route.path:
        tx_id = {"type": "string", "pattern": TRANSACTION_ID_PATTERN}
        params.append({"name": "transaction_id", "in": "path", "required": True, "schema": tx_id})
    if "{replay}" in route.path:
        replay_id = {"type": "string", "pattern": REPLAY_ID_PATTERN}
        params.append({"name": "replay", "in": "path", "required": True, "schema": replay_id})
    params += events_doc.path_parameters(route.path)
    params += change_routes.path_parameters(route.path)
    params += rollout_routes.path_parameters(route.path)
    if "{schedule}" in route.path:
        named = {"name": "schedule", "in": "path", "required": True, "schema": _name_schema()}
        params.append(named)
    if "{name}" in route.path:
        schema_ = {"type": "string", "enum": sorted(ui.FILES)}
        params.append({"name": "name", "in": "path", "required": True, "schema": schema_})
    if route.query is not None:
        props = components[route.query.__name__]["properties"]
        required = set(components[route.query.__name__].get("required", ()))
        params += [
            {"name": name, "in": "query", "required": name in required, "schema": _plain(prop)}
            for name, prop in props.items()
        ]
    return params


def _name_schema() -> dict[str, Any]:
    return {"type": "string", "pattern": schema.NAME_PATTERN}


def _plain(prop: dict[str, Any]) -> dict[str, Any]:
    """A query parameter's schema: the non-null branch of an optional field, without title."""
    branches = [b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"]
    out = {k: v for k, v in branches[0].items() if k != "title"}
    if "default" in prop and prop["default"] is not None:
        out["default"] = prop["default"]
    return out


def _body(body: Any) -> dict[str, Any]:
    if isinstance(body, dict):
        body = {k: [_ref(m) for m in v] for k, v in body.items()}
    else:
        body = _ref(body)
    return {"required": True, "content": {"application/json": {"schema": body}}}


def _responses(route: Route) -> dict[str, Any]:
    status, description, model = route.answer
    ok: dict[str, Any] = {"description": description}
    if model is not None:
        ok["content"] = {"application/json": {"schema": _ref(model)}}
    elif route.path == "/metrics":
        ok["content"] = {"text/plain": {"schema": {"type": "string"}}}
    elif route.path in _CONSOLE_TYPES:
        types = _CONSOLE_TYPES[route.path]
        ok["content"] = {t: {"schema": {"type": "string"}} for t in types}
        if not types:
            del ok["content"]
    else:
        ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    out = {str(status): ok}
    for code in sorted({*_AUTH_ERRORS[route.auth], *route.errors}):
        content = {"application/json": {"schema": _ref(answers.Error)}}
        out[str(code)] = {"description": _ERRORS[code], "content": content}
    if route.path == "/healthz":
        out["503"]["content"] = {"application/json": {"schema": _ref(answers.Health)}}
    return out


def _operation(route: Route, components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": route.summary + ("" if route.auth != "admin" else " (admin token)"),
        "operationId": route.method + re.sub(r"[^a-z0-9]+", "_", route.path).rstrip("_"),
        "security": [] if route.auth == "none" else [{"bearer": []}],
        "responses": _responses(route),
    }
    if route.auth == "tenant":
        op["description"] = "The tenant's own token or the admin token."
    params = _parameters(route, components)
    if params:
        op["parameters"] = params
    if route.body is not None:
        op["requestBody"] = _body(route.body)
    return op


@functools.cache
def spec() -> dict[str, Any]:
    """The document (built once: the definitions do not change while the process runs)."""
    components = _components()
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "EMQ API", "version": __version__},
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "paths": paths,
    }
