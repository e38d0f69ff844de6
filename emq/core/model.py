"""The core model: tenants, topics and their retry and dead-letter policies.

The other concepts of the model live in modules of their own and are re-exported here, so
``from emq.core.model import ...`` finds every name: namespaces, priorities, the name rule and
the topic/group/queue references in :mod:`emq.core.refs`; the job, its limits, its id and its
stored envelope in :mod:`emq.core.job`.

Parsing user input goes through the ``parse`` class methods, which validate with the API's schema
(:mod:`emq.core.schema`, imported when first needed) and then run the checks a schema cannot
express; both raise :class:`~emq.core.errors.InvalidInput` naming the offending field (``url``,
``headers.X-Trace``, ``retry.max_attempts``) so the API and the CLI can report it precisely.
Nothing here does I/O or imports another EMQ package.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from emq.core.endpoints import EndpointPolicy
from emq.core.errors import InvalidInput
from emq.core.job import (
    RESERVED_HEADERS,
    Delivery,
    Envelope,
    Job,
    JobLimits,
    Method,
    new_job_id,
)
from emq.core.refs import (
    NAME_RE,
    PRIORITIES,
    GroupRef,
    Namespace,
    Priority,
    PriorityMode,
    QueueRef,
    TopicRef,
    validate_name,
)

__all__ = [
    "DLQ_DEFAULTS",
    "DLQ_LIMITS",
    "DLQ_MAX_AGE_S",
    "DLQ_MAX_ENTRIES",
    "MAX_TOPIC_QPS",
    "MAX_TOPIC_WEIGHT",
    "NAME_RE",
    "PRIORITIES",
    "RESERVED_HEADERS",
    "Delivery",
    "DlqRetention",
    "Envelope",
    "GroupRef",
    "Job",
    "JobLimits",
    "Method",
    "Namespace",
    "Priority",
    "PriorityMode",
    "QueueRef",
    "RetryPolicy",
    "Tenant",
    "Topic",
    "TopicRef",
    "new_job_id",
    "validate_name",
]


def _int_in(value: object, field_name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field_name, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidInput(field_name, f"must be between {lo} and {hi}, got {value}")
    return value


# --------------------------------------------------------------------------- tenants, topics


@dataclass(frozen=True, slots=True)
class Tenant:
    """A customer (or a shared resource) owning topics. Its API token is kept only as a hash."""

    name: str
    display_name: str = ""
    token_sha256: str = ""
    created_at: float = 0.0
    # Tenant-level quota per namespace (docs/concepts/quotas.md): namespace value -> the QPS all
    # of the tenant's topics in that namespace share. Absent: no cap (each topic its own quota).
    qps_caps: Mapping[str, int] = field(default_factory=dict, compare=True)

    def qps_cap(self, namespace: Namespace) -> int | None:
        """The tenant's cap over its topics in ``namespace`` (None: none)."""
        return self.qps_caps.get(namespace.value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Jittered exponential backoff: attempt ``n`` waits ``base * multiplier**(n-1)``, capped.

    ``jitter`` is the fraction of the delay that is randomised (0 = none, 1 = "full jitter").
    """

    max_attempts: int = 8
    base_delay_s: float = 1.0
    multiplier: float = 2.0
    max_delay_s: float = 600.0
    jitter: float = 0.2

    _FIELDS = frozenset({"max_attempts", "base_delay_s", "multiplier", "max_delay_s", "jitter"})

    def backoff_s(self, attempt: int, rand: float) -> float:
        """The wait after failed attempt ``attempt`` (1-based); ``rand`` is uniform in [0, 1)."""
        raw = self.base_delay_s * self.multiplier ** max(0, attempt - 1)
        capped = min(self.max_delay_s, raw)
        return capped * (1.0 - self.jitter * rand)

    @classmethod
    def parse(cls, value: object, field_name: str = "retry") -> RetryPolicy:
        from emq.core import schema  # here: pydantic loads on first parse

        return schema.validate(schema.RetryIn, value, field_name).policy(field_name)

    def check(self, field_name: str = "retry") -> RetryPolicy:
        """The rule between two fields that the schema cannot state."""
        if self.max_delay_s < self.base_delay_s:
            raise InvalidInput(f"{field_name}.max_delay_s", "must not be below base_delay_s")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in sorted(self._FIELDS)}


MAX_TOPIC_QPS = 1_000_000
MAX_TOPIC_WEIGHT = 1000
MAX_EXCERPT_BYTES = 4096  # of a response body kept per attempt (docs/concepts/attempts.md)
MAX_KEEP_DELIVERED_S = 7 * 86400  # delivered jobs kept for a redelivery
# Dead-letter retention per group of a topic (docs/guides/data-at-rest.md): a DLQ keeps at most this
# many letters, none older than this; older ones are trimmed when letters are added and by the
# owning worker's slow timer. Trims are approximate (whole stream nodes): a little over either.
DLQ_MAX_ENTRIES = 100_000
DLQ_MAX_AGE_S = 14 * 86400
DLQ_LIMITS = {"dlq_max_entries": (1, 100_000_000), "dlq_max_age_s": (60, 365 * 86400)}


@dataclass(frozen=True, slots=True)
class DlqRetention:
    """How much of a group's dead-letter log a queue backend keeps: the newest ``max_entries``
    letters, none older than ``max_age_s`` (by the store's clock). A topic's is validated by
    :class:`Topic`; a backend takes any positive values (tests use short ages)."""

    max_entries: int = DLQ_MAX_ENTRIES
    max_age_s: float = DLQ_MAX_AGE_S


DLQ_DEFAULTS = DlqRetention()


@dataclass(frozen=True, slots=True)
class Topic:
    """A tenant's logical queue with a QPS quota, split into ``groups`` groups.

    ``groups`` is computed by the split rule in ``capacity`` when the topic is created or its
    quota changes; the model only checks it is consistent (at least one group, and no more groups
    than requests per second).
    """

    ref: TopicRef
    qps: int
    groups: int = 1
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    endpoint_concurrency: int = 32
    max_backlog: int = 1_000_000
    paused: bool = False
    priority_mode: PriorityMode = PriorityMode.STRICT
    secret: str = field(default="", repr=False)  # Standard Webhooks signing secret (whsec_...)
    dlq_max_entries: int = DLQ_MAX_ENTRIES  # per group
    dlq_max_age_s: int = DLQ_MAX_AGE_S
    endpoints: EndpointPolicy = field(default_factory=EndpointPolicy)  # emq.core.endpoints
    # Its share of its tenant's cap, relative to the tenant's other backlogged topics.
    weight: int = 1
    # Jobs that may go above the steady pace after idle (docs/concepts/quotas.md; 0: none).
    burst: int = 0
    # What an open transaction's check-back applies when its bound is reached without an
    # answer (emq.core.transactions): "rollback" or "commit".
    transaction_default: str = "rollback"
    # The attempt log, callbacks and redelivery (docs/concepts/attempts.md): the response
    # body's first bytes kept per attempt, the callback URLs of jobs that name none, and how
    # long delivered jobs are kept for a redelivery (0: not kept).
    response_excerpt_bytes: int = 0
    callback_url: str = ""
    failure_callback_url: str = ""
    keep_delivered_s: int = 0

    def __post_init__(self) -> None:
        _int_in(self.qps, "qps", 1, MAX_TOPIC_QPS)
        _int_in(self.weight, "weight", 1, MAX_TOPIC_WEIGHT)
        _int_in(self.burst, "burst", 0, MAX_TOPIC_QPS)
        if self.transaction_default not in ("rollback", "commit"):
            raise InvalidInput("transaction_default", "must be rollback or commit")
        _int_in(self.response_excerpt_bytes, "response_excerpt_bytes", 0, MAX_EXCERPT_BYTES)
        _int_in(self.keep_delivered_s, "keep_delivered_s", 0, MAX_KEEP_DELIVERED_S)
        _int_in(self.groups, "groups", 1, self.qps)
        _int_in(self.endpoint_concurrency, "endpoint_concurrency", 1, 10_000)
        _int_in(self.max_backlog, "max_backlog", 1, 1_000_000_000)
        for name, (lo, hi) in DLQ_LIMITS.items():
            _int_in(getattr(self, name), name, lo, hi)

    def group_refs(self) -> tuple[GroupRef, ...]:
        return tuple(GroupRef(self.ref, i) for i in range(self.groups))

    @property
    def dlq_retention(self) -> DlqRetention:
        return DlqRetention(self.dlq_max_entries, self.dlq_max_age_s)
