"""The bodies and queries of the rollout routes (``/v1/rollouts``, :mod:`emq.api.rollouts`).

Part of :mod:`emq.core.schema`; the OpenAPI document takes them from the route table.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator

from emq.core.model import NAME_RE
from emq.core.rollouts import STATES, TOPIC_STATUSES
from emq.core.schema.common import Body, IntegralBody, Name, NamespaceValue, Query

MAX_TOPICS = 10_000
# Topics per signals request: the longest query stays under aiohttp's 8 KiB request line.
MAX_SIGNAL_TOPICS = 40
_REF = f"(online|sandbox)/{NAME_RE.pattern}/{NAME_RE.pattern}"
TOPICS_PATTERN = f"^{_REF}(,{_REF}){{0,{MAX_SIGNAL_TOPICS - 1}}}$"
_TEXT = Annotated[str, Field(max_length=2000)]
_SECONDS = Annotated[float, Field(ge=0, le=4_102_444_800)]
TopicName = Annotated[str, Field(max_length=200, description="namespace/tenant/topic")]
State = Literal["running", "done", "rolled-back", "failed", "abandoned"]
TopicStatus = Literal[
    "pending", "applied", "watching", "healthy", "breached", "rolled-back", "rollback-failed"
]
assert set(get_args(State)) == set(STATES)
assert set(get_args(TopicStatus)) == set(TOPIC_STATUSES)


class Breach(Body):
    signal: Annotated[str, Field(max_length=40)]
    figure: float
    limit: float
    op: Literal[">", "<"] = ">"
    text: _TEXT = ""


class RolloutTopic(IntegralBody):
    name: TopicName
    namespace: NamespaceValue
    tenant: Name
    topic: Name
    step: Annotated[int, Field(ge=0, le=100, description="0: the canary")]
    before: dict[str, int | None] = Field(description="qps, groups, weight, burst before")
    after: dict[str, int | None] = Field(description="the plan's values")
    status: TopicStatus = "pending"
    breaches: list[Breach] = Field(default_factory=list, max_length=10)
    signals: dict[str, float] | None = None

    @field_validator("before", "after", mode="before")
    @classmethod
    def _integral_values(cls, value: object) -> object:
        """``10.0`` is the integer 10 in these maps too (JSON Schema's ``integer``)."""
        if not isinstance(value, dict):
            return value
        return {
            k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in value.items()
        }


class RolloutIn(IntegralBody):
    plan: _TEXT = Field(description="the plan file applied")
    plan_id: Annotated[str, Field(max_length=100)] | None = None
    canary_pct: Annotated[float, Field(gt=0, le=100)]
    watch_s: Annotated[float, Field(gt=0, le=86_400)]
    steps: Annotated[int, Field(ge=1, le=100, description="steps after the canary")]
    heartbeat_s: Annotated[float, Field(gt=0, le=3600)] = 5.0
    thresholds: dict[str, float] = Field(default_factory=dict)
    topics: list[RolloutTopic] = Field(max_length=MAX_TOPICS)


class RolloutTopicPatch(Body):
    name: TopicName
    status: TopicStatus | None = None
    breaches: list[Breach] | None = Field(default=None, max_length=10)
    signals: dict[str, float] | None = None


class RolloutPatch(IntegralBody):
    state: State | None = None
    phase: Annotated[str, Field(max_length=200)] | None = None
    step: Annotated[int, Field(ge=0, le=100)] | None = None
    reason: _TEXT | None = None
    topics: list[RolloutTopicPatch] | None = Field(default=None, max_length=MAX_TOPICS)


class SignalsQuery(Query):
    topics: Annotated[
        str,
        Field(
            pattern=TOPICS_PATTERN,
            description=f"namespace/tenant/topic, comma-separated (at most {MAX_SIGNAL_TOPICS})",
        ),
    ]
    since: _SECONDS = Field(description="epoch seconds: count history intervals from then on")
    until: _SECONDS | None = Field(default=None, description="... ending by then (default now)")
