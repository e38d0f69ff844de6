"""The API's request bodies and query parameters for schedules (issue 28, section 2).

Part of :mod:`emq.core.schema` (whose rules and messages they share). What JSON Schema cannot
say (a cron expression cronsim accepts, an IANA zone that exists, the job template's domain
checks) is checked by :func:`checked`, which names the field as the others do: ``cron``,
``timezone``, ``job.url``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from emq.core.errors import InvalidInput
from emq.core.job import Job
from emq.core.model import JobLimits
from emq.core.schedules import (
    DEFAULT_CATCH_UP,
    DEFAULT_CATCH_UP_MAX,
    MAX_CATCH_UP,
    MAX_CRON_CHARS,
    MAX_NEXT,
    parse_cron,
    parse_zone,
)
from emq.core.schema.common import Body, IntegralBody, Name
from emq.core.schema.jobs import JobIn
from emq.core.schema.queries import NamespaceQuery

Epoch = Annotated[float, Field(ge=0, le=4_102_444_800, description="epoch seconds")]
CatchUp = Literal["skip", "latest", "all"]
Cron = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_CRON_CHARS,
        description="5 fields (minute hour day-of-month month day-of-week) or 6 with a leading "
        "seconds field; Debian cron's syntax (ranges, steps, names, L, W, #)",
    ),
]
Zone = Annotated[
    str,
    Field(min_length=1, max_length=64, description="IANA time zone, e.g. Europe/Paris"),
]
CatchUpMax = Annotated[
    int,
    Field(ge=1, le=MAX_CATCH_UP, description="with catch_up=all: the most late ticks fired"),
]

_TEMPLATE_FIELDS = ("url", "method", "headers", "body", "priority", "key")

# The job template: a job's fields less idempotency_key (each tick's is the schedule id and the
# tick's instant) and delay_s (the tick is the time). The fields are JobIn's own.
ScheduleJobIn: type[Body] = create_model(  # type: ignore[call-overload]
    "ScheduleJobIn",
    __base__=Body,
    __doc__="The job each tick enqueues: url, method, headers, body, priority, key.",
    **{name: (JobIn.model_fields[name].annotation, JobIn.model_fields[name])
       for name in _TEMPLATE_FIELDS},
)  # fmt: skip


class ScheduleIn(IntegralBody):
    """A new schedule. ``id`` (default: generated) is unique within the topic."""

    id: Name | None = None
    cron: Cron
    timezone: Zone = "UTC"
    job: ScheduleJobIn  # type: ignore[valid-type]
    start_at: Epoch | None = None
    end_at: Epoch | None = None
    catch_up: CatchUp = DEFAULT_CATCH_UP  # type: ignore[assignment]
    catch_up_max: CatchUpMax = DEFAULT_CATCH_UP_MAX
    paused: bool = False


def _patch_schema(schema: dict[str, Any]) -> None:
    schema["minProperties"] = 1


class SchedulePatch(IntegralBody):
    """Changes to a schedule; at least one field. ``start_at``/``end_at`` may be ``null``
    (removed). The next tick is computed again from now."""

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

    cron: Cron = Field(default=None)  # type: ignore[assignment]
    timezone: Zone = Field(default=None)  # type: ignore[assignment]
    job: ScheduleJobIn = Field(default=None)  # type: ignore[valid-type]
    start_at: Epoch | None = None
    end_at: Epoch | None = None
    catch_up: CatchUp = Field(default=None)  # type: ignore[arg-type]
    catch_up_max: CatchUpMax = Field(default=None)  # type: ignore[assignment]
    paused: bool = Field(default=None)  # type: ignore[assignment]


class ScheduleQuery(NamespaceQuery):
    next: Annotated[int, Field(ge=1, le=MAX_NEXT, description="how many next ticks to list")] = 5


def template(job: Body, limits: JobLimits) -> dict[str, Any]:
    """A validated template as stored: the fields given, after the job's domain checks (their
    errors name ``job.<field>``)."""
    fields = job.model_dump(exclude_unset=True)
    job_of(fields, None, limits, field="job")
    return fields


def job_of(
    fields: dict[str, Any], idempotency_key: str | None, limits: JobLimits, field: str = "job"
) -> Job:
    """The job a tick enqueues from a stored template."""
    model = JobIn.model_validate({**fields, "idempotency_key": idempotency_key})
    try:
        return model.job(limits)
    except InvalidInput as e:
        raise e.prefixed(field) from None


def checked(cron: str | None, timezone: str | None) -> str | None:
    """The cron expression normalised (and the zone checked): ``InvalidInput`` naming ``cron``
    or ``timezone``."""
    if timezone is not None:
        parse_zone(timezone)
    return None if cron is None else parse_cron(cron)
