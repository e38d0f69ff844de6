"""What every request model shares: the patterns and limits, the strict base classes, the enum
values a client writes, names."""

from __future__ import annotations

import functools
from types import UnionType
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator

from emq.core import outbound
from emq.core.model import NAME_RE, Method, Namespace, Priority, PriorityMode

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


class Body(BaseModel):
    """A request body: unknown fields are refused, types are exact (``"100"`` is not a number,
    ``true`` is not 1), numbers are finite."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def _is_integer(annotation: Any) -> bool:
    """``int``, ``int | None``, and either with ``Annotated`` constraints."""
    if get_origin(annotation) is Annotated:
        return _is_integer(get_args(annotation)[0])
    if get_origin(annotation) in (Union, UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_integer(args[0])
    return annotation is int


class IntegralBody(Body):
    """A body with integer fields: ``10.0`` is the integer 10, as JSON Schema's ``integer``
    says (``10.5`` stays a float and is refused). Only the bodies that have integers pay for
    this Python step; jobs have none."""

    @classmethod
    @functools.cache
    def _integer_fields(cls) -> frozenset[str]:
        return frozenset(k for k, f in cls.model_fields.items() if _is_integer(f.annotation))

    @model_validator(mode="before")
    @classmethod
    def _integral(cls, data: object) -> object:
        if not isinstance(data, dict):
            return data
        integers = cls._integer_fields()
        return {
            k: int(v) if isinstance(v, float) and v.is_integer() and k in integers else v
            for k, v in data.items()
        }


class Query(BaseModel):
    """Query parameters: text, read as the type given (``?limit=5``); an unknown one is
    refused, as an unknown field of a body is (the document says which exist)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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


def json_kind(value: object) -> str:
    return {dict: "object", list: "array", type(None): "null", bool: "boolean"}.get(
        type(value), type(value).__name__
    )
