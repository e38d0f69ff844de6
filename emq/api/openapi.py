"""The OpenAPI 3.1 description served at ``/openapi.json``.

Written by hand next to the handlers; a test checks that it lists exactly the app's routes.
"""

from __future__ import annotations

from typing import Any

from emq import __version__
from emq.core.model import DLQ_LIMITS, DLQ_MAX_AGE_S, DLQ_MAX_ENTRIES

_NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"}
_NS = {
    "name": "namespace",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "enum": ["online", "sandbox"]},
}

# Dead-letter retention per group (README "Data at rest").
_DLQ_DEFAULTS = {"dlq_max_entries": DLQ_MAX_ENTRIES, "dlq_max_age_s": DLQ_MAX_AGE_S}
_DLQ_SETTINGS: dict[str, Any] = {
    name: {"type": "integer", "minimum": lo, "maximum": hi, "default": _DLQ_DEFAULTS[name]}
    for name, (lo, hi) in DLQ_LIMITS.items()
}


_JOB_ID = {"type": "string", "pattern": "^msg_[0-9a-z]{26}$"}
_REASON = {
    "type": ["object", "null"],
    "required": ["code", "detail"],
    "properties": {
        "code": {
            "enum": [
                "quota",
                "endpoint_concurrency",
                "retry_after",
                "backoff",
                "paused",
                "no_owner",
                "worker_backlog",
                "dead",
            ]
        },
        "detail": {"type": "string"},
        "until": {"type": "string", "format": "date-time"},
    },
}
_JOB_STATUS = {
    "type": "object",
    "required": ["id", "topic", "state", "reason"],
    "properties": {
        "id": _JOB_ID,
        "topic": {"type": "string"},
        "state": {
            "enum": [
                "delayed",
                "queued",
                "buffered",
                "in_flight",
                "retry_wait",
                "delivered",
                "dead",
            ]
        },
        "reason": _REASON,
    },
    "additionalProperties": True,
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _path_params(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "path", "required": True, "schema": _NAME} for n in names]


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _answer(status: int, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description}
    if schema is not None:
        out["content"] = {"application/json": {"schema": schema}}
    return {str(status): out}


def _errors(*statuses: int) -> dict[str, Any]:
    text = {
        400: "malformed JSON",
        401: "missing or invalid token",
        403: "not allowed for this token",
        404: "unknown tenant or topic",
        408: "request headers or body not received in time (EMQ_API_*_TIMEOUT_S)",
        409: "already exists",
        413: "job or request too large",
        422: "invalid field (error.field names it)",
        429: "topic backlog above max_backlog (see Retry-After)",
        503: "Redis or ZooKeeper unreachable",
    }
    out: dict[str, Any] = {}
    for s in sorted(statuses):
        out |= _answer(s, text[s], _ref("Error"))
    return out


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": "string"},
                },
            }
        },
    },
    "Retry": {
        "type": "object",
        "properties": {
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100, "default": 8},
            "base_delay_s": {"type": "number", "default": 1.0},
            "multiplier": {"type": "number", "default": 2.0},
            "max_delay_s": {"type": "number", "default": 600.0},
            "jitter": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.2},
        },
        "additionalProperties": False,
    },
    "TopicSettings": {
        "type": "object",
        "properties": {
            "qps": {"type": "integer", "minimum": 1},
            "paused": {"type": "boolean"},
            "retry": _ref("Retry"),
            "endpoint_concurrency": {"type": "integer", "minimum": 1, "maximum": 10000},
            "max_backlog": {"type": "integer", "minimum": 1},
            "priority_mode": {"type": "string", "enum": ["strict", "weighted"]},
            **_DLQ_SETTINGS,
        },
        "additionalProperties": False,
    },
    "Topic": {
        "type": "object",
        "properties": {
            "namespace": {"type": "string"},
            "tenant": {"type": "string"},
            "topic": {"type": "string"},
            "qps": {"type": "integer"},
            "groups": {"type": "integer"},
            "group_qps": {"type": "array", "items": {"type": "integer"}},
            "paused": {"type": "boolean"},
            "max_backlog": {"type": "integer"},
            "endpoint_concurrency": {"type": "integer"},
            "priority_mode": {"type": "string"},
            "retry": _ref("Retry"),
            **_DLQ_SETTINGS,
            "secret": {"type": "string", "description": "signing secret; only on creation"},
            "backlog": {
                "type": "object",
                "properties": {p: {"type": "integer"} for p in ("high", "medium", "low")},
            },
            "delayed": {"type": "integer"},
            "per_group": {"type": "array", "items": {"type": "object"}},
        },
    },
    "Job": {
        "type": "object",
        "required": ["url"],
        "additionalProperties": False,
        "properties": {
            "url": {"type": "string", "format": "uri", "description": "http or https"},
            "method": {
                "type": "string",
                "enum": ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                "default": "POST",
            },
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": ["string", "object", "array", "null"]},
            "priority": {"type": "string", "enum": ["high", "medium", "low"], "default": "medium"},
            "key": {"type": "string", "description": "same key, same group, order kept"},
            "idempotency_key": {"type": "string"},
            "delay_s": {"type": "number", "minimum": 0},
        },
    },
    "Accepted": {
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": {"type": "string"}},
            "duplicates": {"type": "integer"},
        },
    },
    "DeadLetter": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "job_id": {"type": ["string", "null"]},
            "priority": {"type": "string"},
            "job": {"oneOf": [_ref("Job"), {"type": "null"}]},
            "raw": {
                "type": "string",
                "description": "an entry that could not be read as a job (job is null), as text",
            },
            "error": {"type": "string"},
            "status": {"type": ["integer", "null"]},
            "attempts": {"type": "integer"},
            "failed_at": {"type": "number"},
        },
    },
}


_SCHEMAS["FleetWorker"] = {
    "type": "object",
    "description": "A registered worker and what the current assignment gives it",
    "properties": {
        "id": {"type": "string"},
        "host": {"type": "string"},
        "pid": {"type": "integer"},
        "weight": {"type": "integer", "description": "capacity weight"},
        "started_at": {"type": "number", "description": "registration time, epoch seconds"},
        "metrics": {
            "type": "string",
            "description": "host:port of the worker's /metrics and /healthz ('' if none)",
        },
        "leader": {"type": "boolean"},
        "group_count": {"type": "integer"},
        "groups": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "group": {"type": "string", "description": "namespace/tenant/topic/g<i>"},
                    "epoch": {"type": "integer", "description": "the owner's fencing epoch"},
                },
            },
        },
        "delivered_per_s": {"type": "number", "description": "as last published by the worker"},
        "topics_per_s": {"type": "object", "additionalProperties": {"type": "number"}},
    },
}
_SCHEMAS["Fleet"] = {
    "type": "object",
    "properties": {
        "namespace": {"type": "string"},
        "generation": {"type": "integer", "description": "of the assignment; only grows"},
        "leader": {"type": ["string", "null"]},
        "assigned_at": {"type": "number", "description": "when the leader wrote it, epoch s"},
        "workers": {"type": "array", "items": _ref("FleetWorker")},
        "orphans": {
            "type": "array",
            "description": "groups assigned to a worker that is no longer registered",
            "items": {
                "type": "object",
                "properties": {"group": {"type": "string"}, "worker": {"type": "string"}},
            },
        },
    },
}


def _paths() -> dict[str, Any]:
    topic = "/v1/tenants/{tenant}/topics/{topic}"
    tp = [*_path_params("tenant", "topic"), _NS]
    return {
        "/v1/tenants": {
            "post": {
                "summary": "Create a tenant (admin); the answer holds its API token, shown once",
                "requestBody": _body(
                    {
                        "type": "object",
                        "required": ["tenant"],
                        "properties": {"tenant": _NAME, "name": {"type": "string"}},
                    }
                ),
                "responses": _answer(201, "created") | _errors(400, 401, 408, 403, 409, 422, 503),
            },
            "get": {
                "summary": "List tenants (admin)",
                "responses": _answer(200, "tenants") | _errors(401, 403, 503),
            },
        },
        "/v1/tenants/{tenant}/topics": {
            "parameters": [*_path_params("tenant"), _NS],
            "post": {
                "summary": "Create a topic (admin); groups follow the split rule",
                "requestBody": _body(
                    {
                        "allOf": [_ref("TopicSettings")],
                        "required": ["topic", "qps"],
                        "properties": {"topic": _NAME, "namespace": _NS["schema"]},
                    }
                ),
                "responses": _answer(201, "created", _ref("Topic"))
                | _errors(400, 401, 408, 403, 404, 409, 422, 503),
            },
            "get": {
                "summary": "List a tenant's topics",
                "responses": _answer(200, "topics") | _errors(401, 404, 503),
            },
        },
        topic: {
            "parameters": tp,
            "get": {
                "summary": "Show a topic: quota, groups, backlog per priority, paused",
                "responses": _answer(200, "topic", _ref("Topic")) | _errors(401, 404, 422, 503),
            },
            "patch": {
                "summary": "Change a topic live (admin): quota, pause, retry, limits",
                "requestBody": _body(_ref("TopicSettings")),
                "responses": _answer(200, "topic", _ref("Topic"))
                | _errors(400, 401, 408, 403, 404, 409, 422, 503),
            },
        },
        topic + "/jobs": {
            "parameters": tp,
            "post": {
                "summary": "Enqueue one job or a batch of up to 1000; 202 = durably stored",
                "requestBody": _body(
                    {
                        "oneOf": [
                            _ref("Job"),
                            {
                                "type": "object",
                                "required": ["jobs"],
                                "properties": {
                                    "jobs": {
                                        "type": "array",
                                        "items": _ref("Job"),
                                        "maxItems": 1000,
                                    }
                                },
                            },
                        ]
                    }
                ),
                "responses": _answer(202, "accepted", _ref("Accepted"))
                | _errors(400, 401, 408, 404, 413, 422, 429, 503),
            },
        },
        topic + "/jobs/{id}": {
            "parameters": [*tp, {"name": "id", "in": "path", "required": True, "schema": _JOB_ID}],
            "get": {
                "summary": "One job's state and, while it waits, the reason (README, Job status)",
                "responses": _answer(200, "the job's status", _JOB_STATUS)
                | _errors(401, 403, 404, 422, 503),
            },
        },
        topic + "/dlq": {
            "parameters": [
                *tp,
                {"name": "limit", "in": "query", "schema": {"type": "integer", "maximum": 1000}},
                {"name": "cursor", "in": "query", "schema": {"type": "string"}},
            ],
            "get": {
                "summary": "List dead-lettered jobs, oldest first",
                "responses": _answer(
                    200,
                    "dead letters",
                    {
                        "type": "object",
                        "properties": {
                            "dead": {"type": "array", "items": _ref("DeadLetter")},
                            "next_cursor": {"type": ["string", "null"]},
                        },
                    },
                )
                | _errors(401, 404, 422, 503),
            },
        },
        topic + "/dlq/replay": {
            "parameters": tp,
            "post": {
                "summary": "Put dead letters back in their queues (delivered at the quota)",
                "requestBody": _body(
                    {
                        "type": "object",
                        "properties": {
                            "ids": {"type": "array", "items": {"type": "string"}},
                            "limit": {"type": "integer", "minimum": 1},
                        },
                    }
                ),
                "responses": _answer(200, "replayed") | _errors(400, 401, 408, 404, 422, 503),
            },
        },
        "/v1/workers": {
            "parameters": [_NS],
            "get": {
                "summary": "The worker fleet (admin): members, their groups, epochs and rates",
                "responses": _answer(200, "the fleet", _ref("Fleet")) | _errors(401, 403, 422, 503),
            },
        },
        "/healthz": {"get": {"summary": "Liveness and backends", "responses": _answer(200, "ok")}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": _answer(200, "text")}},
        "/openapi.json": {"get": {"summary": "This document", "responses": _answer(200, "spec")}},
    }


def spec() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "EMQ API", "version": __version__},
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": _paths(),
    }
