"""The HTTP API's request bodies, defined once (pydantic v2 models).

Both sides of the contract come from these models: the API (and the CLI's local check of a job)
validates with them, and ``/openapi.json`` is built from their JSON Schemas
(:mod:`emq.api.openapi`). A validation error becomes :class:`~emq.core.errors.InvalidInput`
naming the field as a client writes it: ``url``, ``headers.X-Trace``, ``retry.max_attempts``,
``jobs[3].url``.

What JSON Schema cannot say stays a domain check, run after the schema on the same path:
whether a URL can be sent (:mod:`emq.core.outbound`), headers EMQ sets itself or that repeat
in another case, sizes that are ``413`` and configurable (:class:`~emq.core.model.JobLimits`),
lone surrogates, ``max_delay_s >= base_delay_s``. Those are described in the schema's text.

Why pydantic: its errors carry the location as data (dict keys included, so a bad header is
``headers.X-A``), its JSON Schema output is OpenAPI 3.1's dialect, and its Rust core validates a
1000-job batch faster than the hand-written checks it replaces (figures in the README).

Importing this module builds the validators (pydantic is imported here only); the core model
imports it lazily, when something is parsed, so ``emq --help`` does not pay for it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from emq.core import outbound
from emq.core.errors import InvalidInput
from emq.core.model import (
    DLQ_LIMITS,
    DLQ_MAX_AGE_S,
    DLQ_MAX_ENTRIES,
    MAX_TOPIC_QPS,
    MAX_TOPIC_WEIGHT,
    NAME_RE,
    RESERVED_HEADERS,
    Job,
    JobLimits,
    Method,
    Namespace,
    Priority,
    PriorityMode,
    RetryPolicy,
    Topic,
)

# The rules the core checks by hand elsewhere (names in paths, headers in the worker), as the
# anchored patterns JSON Schema and pydantic take.
NAME_PATTERN = f"^{NAME_RE.pattern}$"
HEADER_NAME_PATTERN = f"^{outbound.TOKEN}$"  # RFC 9110 field names are tokens
HEADER_VALUE_PATTERN = f"^[^{outbound.FIELD_VALUE_FORBIDDEN}]*$"  # no control but HTAB, no DEL
URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://"
# <group>:<ms>-<seq>, the group first (a cursor is one too); bounded so the numbers fit Redis.
DEAD_LETTER_ID_PATTERN = r"^[0-9]{1,9}:[0-9]{1,19}-[0-9]{1,19}$"
MAX_KEY_CHARS = 256
MAX_DELAY_S = 30 * 86400  # 2 592 000
MAX_TENANT_DISPLAY_CHARS = 200
MAX_REPLAY = 100_000
_DEFAULT_LIMITS = JobLimits()
_DEFAULT_RETRY = RetryPolicy()


class Body(BaseModel):
    """A request body: unknown fields are refused, types are exact (``"100"`` is not a number,
    ``true`` is not 1), numbers are finite."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


_INTEGRAL = (int, int | None)


class IntegralBody(Body):
    """A body with integer fields: ``10.0`` is the integer 10, as JSON Schema's ``integer``
    says (``10.5`` stays a float and is refused). Only the bodies that have integers pay for
    this Python step; jobs have none."""

    @model_validator(mode="before")
    @classmethod
    def _integral(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {
            k: int(v)
            if isinstance(v, float)
            and v.is_integer()
            and k in fields
            and fields[k].annotation in _INTEGRAL
            else v
            for k, v in data.items()
        }


_M = TypeVar("_M", bound=Body)
_Q = TypeVar("_Q", bound="Query")


def _enum(cls: type[Any]) -> Any:
    """A string enum as the literal of its values (validated as JSON text, not as instances)."""
    return Literal[tuple(m.value for m in cls)]


# The enums of the core model, as their values: what a client writes. (For mypy, plain text.)
if TYPE_CHECKING:
    MethodName: TypeAlias = str
    PriorityName: TypeAlias = str
    PriorityModeName: TypeAlias = str
    NamespaceValue: TypeAlias = str
else:
    MethodName = _enum(Method)
    PriorityName = _enum(Priority)
    PriorityModeName = _enum(PriorityMode)
    NamespaceValue = _enum(Namespace)


Name = Annotated[str, Field(pattern=NAME_PATTERN, description="1-64 of A-Z a-z 0-9 _ . -")]
NamespaceName = Annotated[
    NamespaceValue, Field(description="online (default: the API's) or sandbox")
]


# --------------------------------------------------------------------------- jobs


def _job_body(value: object) -> str | dict[str, Any] | list[Any] | None:
    if value is None or isinstance(value, str | dict | list):
        return value
    raise PydanticCustomError(
        "body_type", "must be a string, object or array, got {kind}", {"kind": _kind(value)}
    )


JobBodyValue = Annotated[
    str | dict[str, Any] | list[Any] | None,
    PlainValidator(_job_body),
    WithJsonSchema(
        {
            "type": ["string", "object", "array", "null"],
            "description": (
                "sent as is if a string; an object or array is sent as compact JSON (typed "
                "application/json unless a Content-Type is given); at most "
                f"{_DEFAULT_LIMITS.max_body_bytes} bytes (413 beyond)"
            ),
        }
    ),
]


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def _patch_schema(schema: dict[str, Any]) -> None:
    """A PATCH field's absence means "unchanged", not a default value; one field at least."""
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)
    schema["minProperties"] = 1


def _topic_default(name: str) -> Any:
    value = Topic.__dataclass_fields__[name].default
    return value.value if isinstance(value, enum.Enum) else value


class JobIn(Body):
    """One job as a tenant sends it: an HTTP request to deliver later."""

    url: Annotated[
        str,
        Field(
            pattern=URL_PATTERN,
            description=(
                "http or https, with a host; no credentials. Checked as the worker will send "
                f"it (IDNA, port). At most {_DEFAULT_LIMITS.max_url_chars} characters (413 "
                "beyond)"
            ),
            json_schema_extra={"format": "uri", "maxLength": _DEFAULT_LIMITS.max_url_chars},
        ),
    ]
    method: Annotated[
        MethodName,
        BeforeValidator(_upper),
        Field(description="case-insensitive"),
    ] = Method.POST.value
    headers: Annotated[
        dict[
            Annotated[str, Field(pattern=HEADER_NAME_PATTERN)],
            Annotated[str, Field(pattern=HEADER_VALUE_PATTERN)],
        ]
        | None,
        Field(
            description=(
                "names are case-insensitive and given once; "
                + ", ".join(sorted(RESERVED_HEADERS))
                + f" are set by EMQ. At most {_DEFAULT_LIMITS.max_headers} headers, "
                f"{_DEFAULT_LIMITS.max_header_bytes} bytes (413 beyond)"
            ),
            json_schema_extra={"maxProperties": _DEFAULT_LIMITS.max_headers},
        ),
    ] = None
    body: JobBodyValue = None
    priority: PriorityName = Priority.MEDIUM.value
    key: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_KEY_CHARS,
            description="same key, same group: delivered in order",
        ),
    ] = None
    idempotency_key: Annotated[
        str | None,
        Field(
            min_length=1, max_length=MAX_KEY_CHARS, description="a repeat is answered, not stored"
        ),
    ] = None
    delay_s: Annotated[float, Field(ge=0, le=MAX_DELAY_S)] = 0.0

    def job(self, limits: JobLimits) -> Job:
        """The core's job, after the checks the schema cannot express."""
        return Job.checked(
            self.url,
            self.method,
            self.headers,
            self.body,
            self.priority,
            self.key,
            self.idempotency_key,
            self.delay_s,
            limits,
        )


class JobBatchIn(Body):
    """Up to ``EMQ_API_MAX_BATCH_JOBS`` (1000) jobs, accepted or refused together."""

    jobs: Annotated[
        list[JobIn],
        Field(
            min_length=1,
            description="at most EMQ_API_MAX_BATCH_JOBS (1000; 413 beyond)",
            json_schema_extra={"maxItems": 1000},
        ),
    ]

    def parsed(self, limits: JobLimits) -> list[Job]:
        """Every job checked; an error names the job's index (``jobs[3].url``)."""
        out = []
        for i, job in enumerate(self.jobs):
            try:
                out.append(job.job(limits))
            except InvalidInput as e:
                raise e.prefixed(f"jobs[{i}]") from None
        return out


# --------------------------------------------------------------------------- tenants, topics


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
    weight: Weight = 1
    burst: Burst = 0


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
    weight: Weight = Field(default=None)  # type: ignore[assignment]
    burst: Burst = Field(default=None)  # type: ignore[assignment]


DeadLetterId = Annotated[
    str, Field(pattern=DEAD_LETTER_ID_PATTERN, description="<group>:<entry>, as the DLQ lists it")
]


class ReplayIn(IntegralBody):
    """Which dead letters to put back: ``ids`` as listed by the DLQ, or the oldest ``limit``."""

    ids: Annotated[list[DeadLetterId], Field(min_length=1)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_REPLAY)] = 1000


class Query(BaseModel):
    """Query parameters: text, read as the type given (``?limit=5``); an unknown one is
    refused, as an unknown field of a body is (the document says which exist)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NamespaceQuery(Query):
    namespace: NamespaceName | None = None


class DlqQuery(NamespaceQuery):
    limit: Annotated[int, Field(ge=1, le=1000)] = 100
    cursor: Annotated[
        str,
        Field(
            pattern=f"^$|{DEAD_LETTER_ID_PATTERN}",
            description="next_cursor of the previous page",
        ),
    ] = ""


REQUEST_MODELS: tuple[type[Body], ...] = (
    JobIn,
    JobBatchIn,
    TenantIn,
    TenantPatch,
    RetryIn,
    TopicIn,
    TopicPatch,
    ReplayIn,
)
QUERY_MODELS: tuple[type[Query], ...] = (NamespaceQuery, DlqQuery)


# --------------------------------------------------------------------------- validation


def query(model: type[_Q], params: Mapping[str, str]) -> _Q:
    """Query parameters as ``model``, or ``InvalidInput`` naming the parameter."""
    try:
        return model.model_validate(params)
    except ValidationError as e:
        raise as_invalid(e, None, model) from None


def validate(model: type[_M], value: object, prefix: str | None = None) -> _M:
    """``value`` (decoded JSON) as ``model``, or ``InvalidInput`` naming the first bad field."""
    if not isinstance(value, Mapping):
        raise InvalidInput(prefix, f"must be a JSON object, got {_kind(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as e:
        raise as_invalid(e, prefix, model) from None


def given(body: Body) -> dict[str, Any]:
    """The fields a client set (``None`` where it gave none): what a PATCH changes."""
    return {name: getattr(body, name) for name in body.model_fields_set}


def as_invalid(
    error: ValidationError, prefix: str | None = None, model: type[BaseModel] | None = None
) -> InvalidInput:
    """The first error of ``error`` as EMQ's ``InvalidInput``; an unknown field is named first
    (it usually explains the others: a misspelt optional field)."""
    errors = error.errors(include_url=False)
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field = field_name(first["loc"], prefix)
    bounds = _bounds(model, first["loc"]) if model is not None else None
    if bounds is not None and first["type"] in _RANGE_ERRORS:
        return InvalidInput(field, _range_message(first.get("input"), *bounds))
    return InvalidInput(field, _message(first))


_RANGE_ERRORS = frozenset(
    {"greater_than_equal", "less_than_equal", "int_type", "float_type", "finite_number"}
)


def _bounds(model: type[BaseModel], loc: tuple[int | str, ...]) -> tuple[type, float, float] | None:
    """The type and the range of the number field at ``loc``, if it has both bounds."""
    info = None
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        info = current.model_fields.get(part) if _is_model(current) else None
        if info is None:
            return None
        current = next(
            (t for t in (info.annotation, *get_args(info.annotation)) if _is_model(t)), None
        )
    lo = next((m.ge for m in info.metadata if hasattr(m, "ge")), None) if info else None
    hi = next((m.le for m in info.metadata if hasattr(m, "le")), None) if info else None
    if info is None or lo is None or hi is None or info.annotation not in (int, float):
        return None
    return info.annotation, lo, hi


def _is_model(t: object) -> bool:
    return isinstance(t, type) and issubclass(t, BaseModel)


def _range_message(value: object, kind: type, lo: float, hi: float) -> str:
    """The messages of the checks the schema replaced (the CLI and scripts show them)."""
    if kind is int:
        return f"must be an integer between {lo} and {hi}, got {value!r}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"must be between {lo:g} and {hi:g}, got {value}"
    return f"must be a number, got {_kind(value)}"


def field_name(loc: tuple[int | str, ...], prefix: str | None = None) -> str | None:
    """``("jobs", 3, "headers", "X-A")`` -> ``jobs[3].headers.X-A``."""
    out = prefix or ""
    for part in loc:
        if part == "[key]":  # pydantic marks a bad dict key after the key itself
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or None


def _kind(value: object) -> str:
    return {dict: "object", list: "array", type(None): "null", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


_SURROGATE = "contains an unpaired surrogate (\\ud800-\\udfff), which is not valid text"
_PATTERN_MESSAGES = {
    NAME_PATTERN: "must be 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit",
    URL_PATTERN: "scheme must be http or https",
    HEADER_NAME_PATTERN: "is not a valid header name",
    HEADER_VALUE_PATTERN: "must not contain control characters (other than tab) or DEL",
}


def _message(error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx", {}), error.get("input")
    messages = {
        "missing": "is required",
        "extra_forbidden": "unknown field",
        "string_type": f"must be a string, got {_kind(value)}",
        "string_unicode": _SURROGATE,
        "int_type": f"must be an integer, got {_kind(value)}",
        "int_parsing": f"must be an integer, got {value!r}",
        "float_type": f"must be a number, got {_kind(value)}",
        "bool_type": f"must be true or false, got {value!r}",
        "finite_number": "must be a finite number",
        "model_type": f"must be a JSON object, got {_kind(value)}",
        "dict_type": f"must be a JSON object, got {_kind(value)}",
        "list_type": f"must be an array, got {_kind(value)}",
        "too_short": "must not be empty",
        "literal_error": f"must be one of {ctx.get('expected')}, got {value!r}",
        "greater_than_equal": f"must be at least {ctx.get('ge')}, got {value!r}",
        "less_than_equal": f"must be at most {ctx.get('le')}, got {value!r}",
        "string_too_short": f"must be at least {ctx.get('min_length')} characters",
        "string_too_long": f"must be at most {ctx.get('max_length')} characters",
        "string_pattern_mismatch": _PATTERN_MESSAGES.get(str(ctx.get("pattern")), error["msg"]),
    }
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == URL_PATTERN:
        scheme = str(value).partition(":")[0].lower() if ":" in str(value) else ""
        return f"scheme must be http or https, got {scheme!r}"
    return messages.get(kind, error["msg"])
