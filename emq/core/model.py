"""The core model: namespaces, tenants, topics, groups, physical queues, priorities and jobs.

Everything here is plain data with validation. Parsing user input goes through the
``parse`` class methods, which validate with the API's schema (:mod:`emq.core.schema`, imported
when first needed) and then run the checks a schema cannot express; both raise
:class:`~emq.core.errors.InvalidInput` naming the offending field (``url``, ``headers.X-Trace``,
``retry.max_attempts``) so the API and the CLI can report it precisely. Nothing here does I/O or
imports another EMQ package.
"""

from __future__ import annotations

import enum
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from emq.core.endpoints import EndpointPolicy
from emq.core.errors import InvalidInput, PayloadTooLarge
from emq.core.outbound import check_text, push_url, utf8

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Namespace(enum.StrEnum):
    """``online`` carries production traffic; ``sandbox`` is for trying changes first."""

    ONLINE = "online"
    SANDBOX = "sandbox"

    @classmethod
    def parse(cls, value: object, field_name: str = "namespace") -> Namespace:
        return _parse_enum(cls, value, field_name)


class Priority(enum.StrEnum):
    """The three physical queues of a group, served high before medium before low."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        """0 for high, 1 for medium, 2 for low: the order of service."""
        return _PRIORITY_RANK[self]

    @classmethod
    def parse(cls, value: object, field_name: str = "priority") -> Priority:
        return _parse_enum(cls, value, field_name)


_PRIORITY_RANK = {Priority.HIGH: 0, Priority.MEDIUM: 1, Priority.LOW: 2}
PRIORITIES: tuple[Priority, ...] = (Priority.HIGH, Priority.MEDIUM, Priority.LOW)


class PriorityMode(enum.StrEnum):
    """How a group's budget is shared: ``strict`` (H>M>L) or ``weighted`` (6:3:1 with aging)."""

    STRICT = "strict"
    WEIGHTED = "weighted"

    @classmethod
    def parse(cls, value: object, field_name: str = "priority_mode") -> PriorityMode:
        return _parse_enum(cls, value, field_name)


_E = TypeVar("_E", bound=enum.Enum)


def _parse_enum(cls: type[_E], value: object, field_name: str) -> _E:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise InvalidInput(field_name, f"must be one of {allowed}, got {value!r}") from None


def validate_name(value: object, field_name: str) -> str:
    """A tenant or topic name: 1-64 characters of ``A-Za-z0-9_.-``, starting alphanumeric."""
    if not isinstance(value, str):
        raise InvalidInput(field_name, f"must be a string, got {type(value).__name__}")
    if not NAME_RE.fullmatch(value):
        raise InvalidInput(
            field_name,
            "must be 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit",
        )
    return value


def _int_in(value: object, field_name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field_name, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InvalidInput(field_name, f"must be between {lo} and {hi}, got {value}")
    return value


# --------------------------------------------------------------------------- references


@dataclass(frozen=True, slots=True)
class TopicRef:
    """Names one topic: the same topic name in two namespaces is two topics."""

    namespace: Namespace
    tenant: str
    topic: str

    def group(self, index: int) -> GroupRef:
        return GroupRef(self, index)

    def __str__(self) -> str:
        return f"{self.namespace.value}/{self.tenant}/{self.topic}"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """One group of a topic: the unit of assignment to a worker and of QPS accounting."""

    topic: TopicRef
    index: int

    def queue(self, priority: Priority) -> QueueRef:
        return QueueRef(self, priority)

    def queues(self) -> tuple[QueueRef, ...]:
        return tuple(QueueRef(self, p) for p in PRIORITIES)

    def __str__(self) -> str:
        return f"{self.topic}/g{self.index}"


@dataclass(frozen=True, slots=True)
class QueueRef:
    """One physical queue: a group's ``high``, ``medium`` or ``low`` log."""

    group: GroupRef
    priority: Priority

    def __str__(self) -> str:
        return f"{self.group}/{self.priority.value}"


# --------------------------------------------------------------------------- tenants, topics


@dataclass(frozen=True, slots=True)
class Tenant:
    """A customer (or a shared resource) owning topics. Its API token is kept only as a hash."""

    name: str
    display_name: str = ""
    token_sha256: str = ""
    created_at: float = 0.0
    # Tenant-level quota per namespace (README "Tenant quota"): namespace value -> the QPS all
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
# Dead-letter retention per group of a topic (README "Data at rest"): a DLQ keeps at most this
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
    # Jobs that may go above the steady pace after idle (README "Burst"; 0: none).
    burst: int = 0

    def __post_init__(self) -> None:
        _int_in(self.qps, "qps", 1, MAX_TOPIC_QPS)
        _int_in(self.weight, "weight", 1, MAX_TOPIC_WEIGHT)
        _int_in(self.burst, "burst", 0, MAX_TOPIC_QPS)
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


# --------------------------------------------------------------------------- jobs


class Method(enum.StrEnum):
    GET = "GET"
    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"
    HEAD = "HEAD"
    OPTIONS = "OPTIONS"


# Headers a job may not set: hop-by-hop ones the client manages, and the signature headers the
# worker adds (a tenant must not be able to forge or pre-empt them).
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-connection",
        "proxy-authorization",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)


@dataclass(frozen=True, slots=True)
class JobLimits:
    """Size limits applied when parsing a job; exceeding one is ``PayloadTooLarge`` (413).

    They are configurable, so they are checked here rather than by the schema (which states the
    defaults); limits that are not sizes (``key`` 1-256 characters, ``delay_s``) are the schema's.
    """

    max_body_bytes: int = 256 * 1024
    max_url_chars: int = 2048
    max_headers: int = 64
    max_header_bytes: int = 16 * 1024


@dataclass(frozen=True, slots=True)
class Job:
    """An HTTP request to deliver. ``key`` pins a group (order kept); ``delay_s`` defers it."""

    url: str
    method: Method = Method.POST
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    priority: Priority = Priority.MEDIUM
    key: str | None = None
    idempotency_key: str | None = None
    delay_s: float = 0.0

    @classmethod
    def parse(cls, value: object, limits: JobLimits | None = None) -> Job:
        """Validate a job as sent by a tenant (decoded JSON) and build it."""
        from emq.core import schema  # here: pydantic loads on first parse

        return schema.validate(schema.JobIn, value).job(limits or _LIMITS)

    @classmethod
    def checked(
        cls,
        url: str,
        method: str,
        headers: Mapping[str, str] | None,
        body: object,
        priority: str,
        key: str | None,
        idempotency_key: str | None,
        delay_s: float,
        lim: JobLimits,
    ) -> Job:
        """A job from fields the schema has validated, after the checks it cannot express:
        sendability, sizes (413), reserved and repeated headers, lone surrogates."""
        checked_headers = _check_headers(headers, lim) if headers else {}
        text, checked_headers = _check_body(body, checked_headers, lim)
        return cls(
            _check_url(url, lim),
            _METHODS[method],
            checked_headers,
            text,
            _PRIORITIES[priority],
            None if key is None else check_text(key, "key"),
            None if idempotency_key is None else check_text(idempotency_key, "idempotency_key"),
            delay_s,
        )

    def to_dict(self) -> dict[str, Any]:
        """The compact form stored in a queue (defaults left out)."""
        d: dict[str, Any] = {"url": self.url}
        if self.method is not Method.POST:
            d["method"] = self.method.value
        if self.headers:
            d["headers"] = dict(self.headers)
        if self.body is not None:
            d["body"] = self.body
        if self.priority is not Priority.MEDIUM:
            d["priority"] = self.priority.value
        for name in ("key", "idempotency_key"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.delay_s:
            d["delay_s"] = self.delay_s
        return d


_LIMITS = JobLimits()


def _check_url(value: str, lim: JobLimits) -> str:
    if len(value) > lim.max_url_chars:
        raise PayloadTooLarge("url", f"is longer than {lim.max_url_chars} characters")
    push_url(value)  # the worker's own parse: what passes here can be sent
    return value


def _check_headers(value: Mapping[str, str], lim: JobLimits) -> dict[str, str]:
    if len(value) > lim.max_headers:
        raise PayloadTooLarge("headers", f"has more than {lim.max_headers} headers")
    seen: set[str] = set()
    total = 0
    for name, val in value.items():
        # The schema has checked each name is a token and each value carries no control
        # character (what emq.core.outbound.check_header checks in the worker); left: what
        # depends on the other headers, and lone surrogates.
        lower = name.lower()
        if lower in RESERVED_HEADERS:
            raise InvalidInput(f"headers.{name}", "is set by EMQ and may not be given")
        if lower in seen:
            raise InvalidInput(
                f"headers.{name}", "is given twice (header names are case-insensitive)"
            )
        seen.add(lower)
        total += len(name) + (len(val) if val.isascii() else len(utf8(val, f"headers.{name}")))
    if total > lim.max_header_bytes:
        raise PayloadTooLarge("headers", f"are larger than {lim.max_header_bytes} bytes")
    return dict(value)


_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _check_body(
    value: object, headers: dict[str, str], lim: JobLimits
) -> tuple[str | None, dict[str, str]]:
    if value is None:
        return None, headers
    if isinstance(value, Mapping | list):
        # A JSON body given as an object is sent as compact JSON, typed unless the tenant typed it.
        try:
            value = _COMPACT_JSON(value)
        except RecursionError:
            raise InvalidInput("body", "is nested too deeply") from None
        if not any(h.lower() == "content-type" for h in headers):
            headers = {**headers, "Content-Type": "application/json"}
    if not isinstance(value, str):
        raise InvalidInput("body", f"must be a string, object or array, got {type(value).__name__}")
    if len(utf8(value, "body")) > lim.max_body_bytes:
        raise PayloadTooLarge("body", f"is larger than {lim.max_body_bytes} bytes")
    return value, headers


_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def new_job_id(now_ms: int | None = None) -> str:
    """``msg_`` + 26 characters: 48 bits of milliseconds then 80 random bits (sortable by time)."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    n = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):  # Crockford base32 keeps the order of the number in the text
        n, r = divmod(n, 32)
        chars.append(_CROCKFORD[r])
    return "msg_" + "".join(reversed(chars))


class Delivery(NamedTuple):
    """What a worker needs to push a stored job, read from the envelope's decoded JSON without
    building its :class:`Job` (the worker's hot path; :meth:`Envelope.from_dict` for the rest)."""

    id: str
    url: str
    method: str
    headers: dict[str, str]
    body: str | None
    attempt: int

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Delivery:
        j = d["job"]
        return cls(
            d["id"],
            j["url"],
            j.get("method", "POST"),
            j.get("headers", {}),
            j.get("body"),
            d.get("a", 0),
        )


_METHODS = {m.value: m for m in Method}  # a dict lookup is 5x cheaper than Method(value)
_PRIORITIES = {p.value: p for p in Priority}


@dataclass(frozen=True, slots=True)
class Envelope:
    """A job as stored in a queue: its id, when it was accepted, and failed attempts so far.

    ``decode`` trusts its input (it was validated before it was stored) and does not re-validate.
    """

    id: str
    job: Job
    enqueued_ms: int
    attempt: int = 0

    def encode(self) -> bytes:
        d = {"id": self.id, "t": self.enqueued_ms, "job": self.job.to_dict()}
        if self.attempt:
            d["a"] = self.attempt
        return json.dumps(d, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, raw: bytes | str) -> Envelope:
        return cls.from_dict(json.loads(raw))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Envelope:
        """From the decoded JSON of :meth:`encode` (the worker decodes with a faster parser)."""
        j = d["job"]
        job = Job(
            j["url"],
            _METHODS[j.get("method", "POST")],
            j.get("headers", {}),
            j.get("body"),
            _PRIORITIES[j.get("priority", "medium")],
            j.get("key"),
            j.get("idempotency_key"),
            j.get("delay_s", 0.0),
        )
        return cls(d["id"], job, d["t"], d.get("a", 0))
