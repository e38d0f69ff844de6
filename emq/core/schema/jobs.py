"""The job bodies: one job (:class:`JobIn`) and a batch of them (:class:`JobBatchIn`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, GetPydanticSchema, WithJsonSchema
from pydantic_core import core_schema

from emq.core.errors import InvalidInput
from emq.core.model import RESERVED_HEADERS, Job, JobLimits, Method, Priority
from emq.core.schema.common import (
    HEADER_NAME_PATTERN,
    HEADER_VALUE_PATTERN,
    MAX_DELAY_S,
    MAX_KEY_CHARS,
    URL_PATTERN,
    Body,
    MethodName,
    PriorityName,
)

_DEFAULT_LIMITS = JobLimits()


# A string, object, array or null, told apart in pydantic's core (a Python validator here cost
# a call per job); the objects and arrays are taken as they are (checked by Job.checked). A
# wrong type is the error ``body_type``, worded by emq.core.schema.validation.
_BODY_SCHEMA = core_schema.union_schema(
    [
        core_schema.str_schema(strict=True),
        core_schema.dict_schema(strict=True),
        core_schema.list_schema(strict=True),
        core_schema.none_schema(),
    ],
    mode="left_to_right",
    custom_error_type="body_type",
    custom_error_message="must be a string, object or array",
)

JobBodyValue = Annotated[
    str | dict[str, Any] | list[Any] | None,
    GetPydanticSchema(lambda _type, _handler: _BODY_SCHEMA),
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


CallbackUrl = Annotated[
    str | None,
    Field(
        pattern=URL_PATTERN,
        description=(
            "told the job's final outcome (a signed callback job, docs/concepts/attempts.md); "
            "checked as the job's url"
        ),
        json_schema_extra={"format": "uri", "maxLength": _DEFAULT_LIMITS.max_url_chars},
    ),
]


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
    callback_url: CallbackUrl = None
    failure_callback_url: CallbackUrl = None

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
            self.callback_url,
            self.failure_callback_url,
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
