"""A capacity plan as the API takes it (``POST /v1/plans``): ``plan.json`` of ``emq plan run``.

Only what the console shows is read: the report's figures (history span, parameters, fleet
sizing), the planned topics (quota, groups, what they have now, rates, the replay's wait) and the
report's series (fleet traffic against capacity, the charted topics), each bounded in length.
Fields this definition does not name are dropped, so a plan written by a newer planner is taken
as it is. Types are exact as in every body (``"5"`` is not a number); an integer may be written
``5.0``, as JSON Schema's ``integer`` allows.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import ConfigDict, Field, model_validator

from emq.core.model import MAX_TOPIC_QPS
from emq.core.schema import Body, Name, NamespaceName, Query

MAX_PLAN_TOPICS = 100_000
MAX_POINTS = 2_000  # per series: the planner keeps at most this many (it thins longer ones)
MAX_CHARTED_TOPICS = 50
Count = Annotated[int, Field(ge=0)]
Figure = Annotated[float, Field(ge=-1e15, le=1e15)]  # finite, and within what JSON keeps exactly
Points = Annotated[list[Figure], Field(max_length=MAX_POINTS)]


class PlanPart(Body):
    """A body whose unknown fields are dropped (a newer planner's) rather than refused; types
    are exact; an integer field takes ``5.0`` (JSON Schema's integer), not ``5.5``."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _integral(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        ints = {k for k, f in cls.model_fields.items() if int in _types(f.annotation)}
        return {
            k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v
            for k, v in data.items()
        }


def _types(annotation: Any) -> tuple[Any, ...]:
    """The plain types of an annotation (``int | None`` -> int, NoneType)."""
    inner = get_args(annotation)
    if not inner:
        return (annotation,)
    if getattr(annotation, "__metadata__", None) is not None:  # Annotated[int, ...]
        return _types(inner[0])
    return tuple(t for a in inner for t in _types(a))


class PlanHistory(PlanPart):
    path: Annotated[str, Field(max_length=4096)] = ""
    rows: Count = 0
    topics: Count = 0
    first_s: Figure | None = None
    end_s: Figure | None = None
    days: Figure = 0.0


class PlanParameters(PlanPart):
    headroom: Figure | None = None
    max_group_qps: Count | None = None
    target_wait_s: Figure | None = None


class PlanFleet(PlanPart):
    """The fleet sizing (``spark/planning.py:size_fleet``)."""

    workers: Count = 0
    active_workers: Count = 0
    spare_workers: Count = 0
    worker_qps: Figure = 0.0
    peak_offered_rps: Figure = 0.0
    p99_offered_rps: Figure = 0.0
    mean_offered_rps: Figure = 0.0
    demand_qps: Figure = 0.0
    capacity_qps: Figure = 0.0
    peak_utilisation: Figure = 0.0
    mean_utilisation: Figure = 0.0
    current_quota_sum: Count = 0
    proposed_quota_sum: Count = 0
    current_groups: Count = 0
    proposed_groups: Count = 0
    redis_shards: Count = 0
    redis_ops_per_s: Figure = 0.0
    redis_memory_bytes: Count = 0


class PlanCurrent(PlanPart):
    qps: Count | None = None
    groups: Count | None = None


class PlanRates(PlanPart):
    mean: Figure | None = None
    p99: Figure | None = None
    peak: Figure | None = None


class PlanReplay(PlanPart):
    max_backlog: Figure | None = None
    max_wait_s: Figure | None = None
    qps_for_target_wait: Figure | None = None


class PlanTopic(PlanPart):
    namespace: NamespaceName
    tenant: Name
    topic: Name
    qps: Annotated[int, Field(ge=1, le=MAX_TOPIC_QPS, description="the planned quota")]
    groups: Annotated[int, Field(ge=1, le=MAX_TOPIC_QPS)]
    current: PlanCurrent | None = None
    idle: bool = False
    trend: Annotated[str, Field(max_length=32)] | None = None
    rates: PlanRates | None = None
    dry_run: PlanReplay | None = None


class FleetSeries(PlanPart):
    """The fleet per interval: offered and servable jobs/s, the replay's queued jobs."""

    t: Points = Field(default_factory=list, description="interval starts, epoch seconds")
    offered_rps: Points = Field(default_factory=list)
    served_rps: Points = Field(default_factory=list)
    replayed_backlog: Points = Field(default_factory=list)


class TopicSeries(PlanPart):
    """A charted topic per interval: offered jobs/s, the quota then, the replay's backlog."""

    namespace: NamespaceName
    tenant: Name
    topic: Name
    proposed_qps: Count | None = None
    t: Points = Field(default_factory=list)
    rate: Points = Field(default_factory=list)
    quota: Points = Field(default_factory=list)
    backlog: Points = Field(default_factory=list)


class PlanSeries(PlanPart):
    fleet: FleetSeries | None = None
    topics: Annotated[list[TopicSeries], Field(max_length=MAX_CHARTED_TOPICS)] = Field(
        default_factory=list
    )


class PlanIn(PlanPart):
    """``plan.json`` of ``emq plan run`` (its other fields are dropped)."""

    format: Annotated[int, Field(ge=1, le=1000)] = 1
    generated_at: Annotated[str, Field(max_length=64)] = ""
    history: PlanHistory = Field(default_factory=PlanHistory)
    parameters: PlanParameters = Field(default_factory=PlanParameters)
    fleet: PlanFleet = Field(default_factory=PlanFleet)
    topics: Annotated[list[PlanTopic], Field(max_length=MAX_PLAN_TOPICS)]
    series: PlanSeries | None = None


PlanSource = Literal["publish", "dry-run", "apply"]


class PlanQuery(Query):
    source: PlanSource = Field(
        default="publish",
        description="what the plan was stored for: shown (publish), emq plan apply --dry-run, "
        "or emq plan apply",
    )
