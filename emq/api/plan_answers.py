"""The answers of the capacity-plan routes (:mod:`emq.api.plans`), defined once like
:mod:`emq.api.answers` (the handlers build them; ``/openapi.json`` describes them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

Action = Literal["raise", "lower", "needs-force", "unchanged", "unknown"]


class PlanStored(TypedDict):
    id: str
    stored_at: float
    source: str
    topics: int
    kept: Annotated[int, Field(description="plans the API keeps, this one included")]


class PlanChange(TypedDict):
    """One planned topic against the live configuration: what ``emq plan apply`` would do."""

    namespace: str
    tenant: str
    topic: str
    current_qps: int | None
    current_groups: int | None
    qps: int
    groups: int
    change_pct: float | None
    action: Action
    p99_rps: float | None
    max_wait_s: Annotated[float | None, Field(description="the replay's longest wait")]


class PlanDiff(TypedDict):
    """The dry-run diff, computed when asked; ``changes`` lists the topics that would change
    (and unknown ones), largest change first, at most ``limit``."""

    counts: dict[Action, int]
    changes: list[PlanChange]
    limit: int
    truncated: bool


class PlanView(TypedDict):
    """``GET /v1/plans/latest``: the report's figures and series, and the dry-run diff."""

    id: str
    stored_at: float
    source: Annotated[str, Field(description="publish, dry-run (emq plan apply --dry-run), apply")]
    kept: int
    generated_at: str
    history: dict[str, Any]
    parameters: dict[str, Any]
    fleet: dict[str, Any]
    series: dict[str, Any] | None
    topics: int
    diff: PlanDiff
