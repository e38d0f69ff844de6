"""The API's request bodies for subscriptions and events (:mod:`emq.core.subscriptions`).

Part of :mod:`emq.core.schema` (its rules and messages) so the feature's fields live in one
place; the OpenAPI document takes them from its route table like the others. What a schema
cannot say (a URL's sendability, reserved headers, sizes that are 413) is checked after, on the
same path, by :func:`emq.api.subscriptions.checked_target` and the event publisher.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from emq.core.job import RESERVED_HEADERS
from emq.core.schema.common import (
    HEADER_NAME_PATTERN,
    HEADER_VALUE_PATTERN,
    MAX_DELAY_S,
    URL_PATTERN,
    Body,
    PriorityName,
)
from emq.core.subscriptions import (
    EVENT_HEADERS,
    EVENT_TYPES_PATTERN,
    MAX_PATTERNS,
    MAX_TYPE_CHARS,
    TYPE_PATTERN,
)

MAX_EVENTS = 1000  # events per request
MAX_EVENT_KEY_CHARS = 200  # the delivery's key is "<subscription id>:<key>" (256 at most)

Pattern = Annotated[
    str,
    Field(
        pattern=EVENT_TYPES_PATTERN,
        description=f"an event type, or one with * wildcards (any run of characters, dots "
        f"included): invoice.* matches invoice.paid; * matches every type. At most "
        f"{MAX_TYPE_CHARS} characters",
    ),
]
Patterns = Annotated[list[Pattern], Field(min_length=1, max_length=MAX_PATTERNS)]
Headers = Annotated[
    dict[
        Annotated[str, Field(pattern=HEADER_NAME_PATTERN)],
        Annotated[str, Field(pattern=HEADER_VALUE_PATTERN)],
    ],
    Field(
        description="sent with every delivery; "
        + ", ".join(sorted(RESERVED_HEADERS | EVENT_HEADERS))
        + " are set by EMQ",
        json_schema_extra={"maxProperties": 64},
    ),
]
Url = Annotated[
    str,
    Field(
        pattern=URL_PATTERN,
        description="http or https, with a host; checked as the worker will send it",
        json_schema_extra={"format": "uri", "maxLength": 2048},
    ),
]


class SubscriptionIn(Body):
    """A new subscription; the answer holds its signing secret, shown once."""

    url: Url
    event_types: Patterns
    headers: Headers | None = None
    enabled: bool = True


def _patch_schema(schema: dict[str, Any]) -> None:
    """A PATCH field's absence means "unchanged", not a default value; one field at least."""
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)
    schema["minProperties"] = 1


class SubscriptionPatch(Body):
    """Change a subscription (at least one field); it applies to events accepted after."""

    model_config = ConfigDict(json_schema_extra=_patch_schema)

    url: Url | None = None
    event_types: Patterns | None = None
    headers: Headers | None = None
    enabled: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_field_at_least(cls, data: object) -> object:
        if isinstance(data, dict) and not data:
            raise PydanticCustomError(
                "nothing_to_change", "nothing to change; give one of url, event_types, "
                "headers, enabled"
            )  # fmt: skip
        return data


class EventIn(Body):
    """One event: delivered to every enabled subscription whose patterns match its type."""

    type: Annotated[
        str, Field(pattern=TYPE_PATTERN, description=f"at most {MAX_TYPE_CHARS} characters")
    ]
    payload: Annotated[
        Any,
        Field(
            description="any JSON value: each delivery's body is the Standard Webhooks payload "
            '{"type", "timestamp", "data": payload}'
        ),
    ] = None
    key: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=MAX_EVENT_KEY_CHARS,
            description="orders the deliveries of the same key per subscription",
        ),
    ] = None
    idempotency_key: Annotated[
        str | None,
        Field(min_length=1, max_length=200, description="a repeat is answered, not stored again"),
    ] = None
    priority: PriorityName = "medium"
    delay_s: Annotated[float, Field(ge=0, le=MAX_DELAY_S)] = 0.0


class EventBatchIn(Body):
    """Up to 1000 events, accepted or refused together."""

    events: Annotated[
        list[EventIn],
        Field(min_length=1, description=f"at most {MAX_EVENTS} (413 beyond)",
              json_schema_extra={"maxItems": MAX_EVENTS}),
    ]  # fmt: skip
