"""The HTTP API's answers, defined once.

The handlers build these dictionaries (so mypy holds them to the definition, at no cost per
request) and :mod:`emq.api.openapi` turns the same definitions into the response schemas of
``/openapi.json``. The requests are :mod:`emq.core.schema`.

``typing_extensions.TypedDict``: pydantic reads a stdlib ``TypedDict`` only from Python 3.12.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict


class ErrorDetail(TypedDict):
    code: str
    message: str
    field: NotRequired[str]


class Error(TypedDict):
    """Every error: ``error.field`` names the bad field (``jobs[3].url``) where there is one."""

    error: ErrorDetail


class TenantCreated(TypedDict):
    tenant: str
    name: str
    token: Annotated[str, Field(description="the tenant's API token; shown only here")]
    created_at: float


class TenantRow(TypedDict):
    tenant: str
    name: str
    created_at: float
    qps_caps: NotRequired[
        Annotated[dict[str, int], Field(description="namespace -> cap over its topics there")]
    ]


class Tenants(TypedDict):
    tenants: list[TenantRow]


class RetryView(TypedDict):
    base_delay_s: float
    jitter: float
    max_attempts: int
    max_delay_s: float
    multiplier: float


class EndpointsView(TypedDict):
    """A topic's per-endpoint flow control (docs/concepts/flow-control.md)."""

    adaptive: bool
    decrease: float
    increase_qps: float
    min_qps: float
    latency_ms: int
    disable_after: int
    disable_after_s: int


class EndpointStatus(TypedDict):
    """One endpoint as one worker sees it: its state, current rate and why."""

    endpoint: Annotated[str, Field(description="host:port")]
    worker: str
    state: Literal["open", "limited", "held", "disabled"]
    rate_qps: Annotated[float, Field(description="current rate on this worker (0: disabled)")]
    reason: Annotated[str, Field(description='"429 at t", "Retry-After until t", "latency ..."')]
    reason_at: float | None
    hold_until: float | None
    parked: Annotated[int, Field(description="jobs waiting for its pace (no attempt burnt)")]
    failures: Annotated[int, Field(description="consecutive failures (429s not counted)")]
    throttled: Annotated[int, Field(description="429/503 answers seen")]


class Backlog(TypedDict):
    high: int
    medium: int
    low: int


class GroupBacklog(TypedDict):
    index: int
    backlog: Backlog
    delayed: int


class TopicView(TypedDict):
    """A topic's settings; ``secret`` only when it is created; the numbers only when shown."""

    namespace: str
    tenant: str
    topic: str
    qps: int
    groups: int
    group_qps: list[int]
    paused: bool
    max_backlog: int
    endpoint_concurrency: int
    priority_mode: str
    retry: RetryView
    dlq_max_entries: int
    dlq_max_age_s: int
    endpoints: EndpointsView
    weight: NotRequired[int]
    burst: NotRequired[int]
    transaction_default: NotRequired[str]
    response_excerpt_bytes: NotRequired[int]  # (docs/concepts/attempts.md)
    callback_url: NotRequired[str]
    failure_callback_url: NotRequired[str]
    keep_delivered_s: NotRequired[int]
    secret: NotRequired[Annotated[str, Field(description="Standard Webhooks signing secret")]]
    backlog: NotRequired[Backlog]
    delayed: NotRequired[int]
    per_group: NotRequired[list[GroupBacklog]]
    delivered_per_s: NotRequired[float | None]
    endpoint_status: NotRequired[list[EndpointStatus]]
    p50_ms: NotRequired[float | None]
    p99_ms: NotRequired[
        Annotated[
            float | None,
            Field(
                description="enqueue-to-delivery p99 over the last latency_window_s (an estimate "
                "within fixed buckets; null: nothing delivered in the window)"
            ),
        ]
    ]
    latency_window_s: NotRequired[int]


class Latency(TypedDict):
    """A topic's enqueue-to-delivery latency over the last ``latency_window_s`` seconds."""

    p50_ms: float | None
    p99_ms: float | None
    latency_window_s: int


class Topics(TypedDict):
    topics: list[TopicView]


class Accepted(TypedDict):
    """One id per job, in order (a duplicate gets the first job's id)."""

    ids: list[str]
    duplicates: int


class DeadLetter(TypedDict):
    id: Annotated[str, Field(description="<group>:<entry>, for replay and as a cursor")]
    job_id: str | None
    job: dict[str, Any] | None
    raw: NotRequired[Annotated[str, Field(description="an entry that is not a job, as text")]]
    priority: str
    error: str
    status: int | None
    attempts: int
    failed_at: float


class DeadLetters(TypedDict):
    dead: list[DeadLetter]
    next_cursor: str | None


class Replayed(TypedDict):
    replayed: int


class GroupEpoch(TypedDict):
    group: Annotated[str, Field(description="namespace/tenant/topic/g<i>")]
    epoch: Annotated[int, Field(description="the owner's fencing epoch")]


class FleetWorker(TypedDict):
    """A registered worker and what the current assignment gives it."""

    id: str
    host: str
    pid: int
    weight: int
    started_at: float
    metrics: Annotated[str, Field(description="host:port of its /metrics ('' if none)")]
    leader: bool
    group_count: int
    groups: list[GroupEpoch]
    delivered_per_s: float
    topics_per_s: dict[str, float]


class Orphan(TypedDict):
    group: str
    worker: str


class Fleet(TypedDict):
    namespace: str
    generation: Annotated[int, Field(description="of the assignment; only grows")]
    leader: str | None
    assigned_at: float
    workers: list[FleetWorker]
    orphans: Annotated[list[Orphan], Field(description="groups of unregistered workers")]


class Health(TypedDict):
    status: str
    redis: str
    zookeeper: str


class JobReason(TypedDict):
    code: Literal[
        "quota",
        "endpoint_concurrency",
        "retry_after",
        "backoff",
        "paused",
        "no_owner",
        "worker_backlog",
        "dead",
    ]
    detail: str
    until: NotRequired[str]  # ISO 8601, UTC


class JobStatus(TypedDict):
    """``GET .../jobs/{id}`` (emq.api.jobs): the state, why it waits, and the state's fields
    (position, eta_s, until, attempt, last_status, delivered_at, latency_ms, ...)."""

    id: str
    topic: str
    state: Literal[
        "prepared", "delayed", "queued", "buffered", "in_flight", "retry_wait", "delivered", "dead"
    ]
    reason: JobReason | None
    transaction_id: NotRequired[str]
