"""The administration bodies: tenants, topics (create, patch, their retry policy) and the
replay of a group's dead letters."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from emq.core.model import (
    DLQ_LIMITS,
    DLQ_MAX_AGE_S,
    DLQ_MAX_ENTRIES,
    MAX_TOPIC_QPS,
    MAX_TOPIC_WEIGHT,
    RetryPolicy,
    Topic,
)
from emq.core.schema.attempts import ExcerptBytes, KeepDeliveredS, TopicCallbackUrl
from emq.core.schema.common import (
    DEAD_LETTER_ID_PATTERN,
    MAX_REPLAY,
    MAX_TENANT_DISPLAY_CHARS,
    Body,
    IntegralBody,
    Name,
    NamespaceName,
    PriorityModeName,
)
from emq.core.schema.endpoints import EndpointsIn

_DEFAULT_RETRY = RetryPolicy()


def _patch_schema(schema: dict[str, Any]) -> None:
    """A PATCH field's absence means "unchanged", not a default value; one field at least."""
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)
    schema["minProperties"] = 1


def _topic_default(name: str) -> Any:
    value = Topic.__dataclass_fields__[name].default
    return value.value if isinstance(value, enum.Enum) else value


class TenantIn(Body):
    tenant: Name
    name: Annotated[str, Field(max_length=MAX_TENANT_DISPLAY_CHARS)] = ""


class RetryIn(IntegralBody):
    """Jittered exponential backoff; ``max_delay_s`` must not be below ``base_delay_s``."""

    max_attempts: Annotated[int, Field(ge=1, le=100)] = _DEFAULT_RETRY.max_attempts
    base_delay_s: Annotated[float, Field(ge=0.01, le=86400)] = _DEFAULT_RETRY.base_delay_s
    multiplier: Annotated[float, Field(ge=1.0, le=10.0)] = _DEFAULT_RETRY.multiplier
    max_delay_s: Annotated[float, Field(ge=0.01, le=7 * 86400)] = _DEFAULT_RETRY.max_delay_s
    jitter: Annotated[float, Field(ge=0.0, le=1.0)] = _DEFAULT_RETRY.jitter

    def policy(self, field_name: str = "retry") -> RetryPolicy:
        return RetryPolicy(
            self.max_attempts, self.base_delay_s, self.multiplier, self.max_delay_s, self.jitter
        ).check(field_name)


Qps = Annotated[int, Field(ge=1, le=MAX_TOPIC_QPS, description="deliveries per second")]
EndpointConcurrency = Annotated[int, Field(ge=1, le=10_000)]
MaxBacklog = Annotated[int, Field(ge=1, le=1_000_000_000)]
DlqMaxEntries = Annotated[
    int,
    Field(
        ge=DLQ_LIMITS["dlq_max_entries"][0],
        le=DLQ_LIMITS["dlq_max_entries"][1],
        description=f"dead letters kept per group (default {DLQ_MAX_ENTRIES})",
    ),
]
DlqMaxAge = Annotated[
    int,
    Field(
        ge=DLQ_LIMITS["dlq_max_age_s"][0],
        le=DLQ_LIMITS["dlq_max_age_s"][1],
        description=f"oldest dead letter kept, seconds (default {DLQ_MAX_AGE_S})",
    ),
]


Weight = Annotated[
    int, Field(ge=1, le=MAX_TOPIC_WEIGHT, description="share of its tenant's cap (default 1)")
]
TransactionDefault = Annotated[
    Literal["rollback", "commit"],
    Field(description="what a transaction's check-back applies when nothing answers it"),
]
Burst = Annotated[
    int,
    Field(
        ge=0,
        le=MAX_TOPIC_QPS,
        description="jobs above the steady pace after idle; any 1 s window: qps + burst + groups",
    ),
]


class TenantPatch(IntegralBody):
    """A tenant's cap over all its topics in one namespace (the request's namespace unless
    given); ``null`` removes it."""

    qps_cap: Annotated[int | None, Field(ge=1, le=MAX_TOPIC_QPS)]
    namespace: NamespaceName | None = None


class TopicIn(IntegralBody):
    """A new topic; its groups follow the split rule, its signing secret is made for it."""

    topic: Name
    qps: Qps
    namespace: NamespaceName | None = None
    retry: RetryIn = Field(default_factory=RetryIn)
    endpoint_concurrency: EndpointConcurrency = _topic_default("endpoint_concurrency")
    max_backlog: MaxBacklog = _topic_default("max_backlog")
    priority_mode: PriorityModeName = _topic_default("priority_mode")
    dlq_max_entries: DlqMaxEntries = DLQ_MAX_ENTRIES
    dlq_max_age_s: DlqMaxAge = DLQ_MAX_AGE_S
    endpoints: EndpointsIn = Field(default_factory=EndpointsIn)  # emq.core.schema.endpoints
    weight: Weight = 1
    burst: Burst = 0
    transaction_default: TransactionDefault = "rollback"
    response_excerpt_bytes: ExcerptBytes = 0
    callback_url: TopicCallbackUrl = ""
    failure_callback_url: TopicCallbackUrl = ""
    keep_delivered_s: KeepDeliveredS = 0


class TopicPatch(IntegralBody):
    """Changes to a topic, applied live; at least one field. Groups never shrink, so ``qps``
    may not go below the topic's group count."""

    model_config = ConfigDict(json_schema_extra=_patch_schema)

    @model_validator(mode="before")
    @classmethod
    def _one_field_at_least(cls, data: object) -> object:
        if isinstance(data, dict) and not data:
            raise PydanticCustomError(
                "nothing_to_change",
                "nothing to change; give one of {fields}",
                {"fields": ", ".join(sorted(cls.model_fields))},
            )
        return data

    # Left out = unchanged (the handler reads only the fields given); ``null`` is refused, so
    # the types are not optional and mypy is told that the ``None`` default is never read.
    qps: Qps = Field(default=None)  # type: ignore[assignment]
    paused: bool = Field(default=None)  # type: ignore[assignment]
    retry: RetryIn = Field(default=None)  # type: ignore[assignment]
    endpoint_concurrency: EndpointConcurrency = Field(default=None)  # type: ignore[assignment]
    max_backlog: MaxBacklog = Field(default=None)  # type: ignore[assignment]
    priority_mode: PriorityModeName = Field(default=None)  # type: ignore[assignment]
    dlq_max_entries: DlqMaxEntries = Field(default=None)  # type: ignore[assignment]
    dlq_max_age_s: DlqMaxAge = Field(default=None)  # type: ignore[assignment]
    endpoints: EndpointsIn = Field(default=None)  # type: ignore[assignment]
    weight: Weight = Field(default=None)  # type: ignore[assignment]
    burst: Burst = Field(default=None)  # type: ignore[assignment]
    transaction_default: TransactionDefault = Field(default=None)  # type: ignore[arg-type]
    response_excerpt_bytes: ExcerptBytes = Field(default=None)  # type: ignore[assignment]
    callback_url: TopicCallbackUrl = Field(default=None)  # type: ignore[assignment]
    failure_callback_url: TopicCallbackUrl = Field(default=None)  # type: ignore[assignment]
    keep_delivered_s: KeepDeliveredS = Field(default=None)  # type: ignore[assignment]


DeadLetterId = Annotated[
    str, Field(pattern=DEAD_LETTER_ID_PATTERN, description="<group>:<entry>, as the DLQ lists it")
]


class ReplayIn(IntegralBody):
    """Which dead letters to put back: ``ids`` as listed by the DLQ, or the oldest ``limit``."""

    ids: Annotated[list[DeadLetterId], Field(min_length=1)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_REPLAY)] = 1000
