"""Validation: a body or query parsed by its model, and pydantic's errors as EMQ's
:class:`~emq.core.errors.InvalidInput`, naming the field as a client writes it (``url``,
``headers.X-Trace``, ``retry.max_attempts``, ``jobs[3].url``) with the messages the hand-written
checks had (the CLI and scripts show them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from emq.core.errors import InvalidInput
from emq.core.schema.common import (
    HEADER_NAME_PATTERN,
    HEADER_VALUE_PATTERN,
    NAME_PATTERN,
    URL_PATTERN,
    Body,
    Query,
    json_kind,
)

_M = TypeVar("_M", bound=BaseModel)
_Q = TypeVar("_Q", bound=Query)

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
        raise InvalidInput(prefix, f"must be a JSON object, got {json_kind(value)}")
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
    return f"must be a number, got {json_kind(value)}"


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
        "string_type": f"must be a string, got {json_kind(value)}",
        "string_unicode": _SURROGATE,
        "int_type": f"must be an integer, got {json_kind(value)}",
        "int_parsing": f"must be an integer, got {value!r}",
        "float_type": f"must be a number, got {json_kind(value)}",
        "bool_type": f"must be true or false, got {value!r}",
        "finite_number": "must be a finite number",
        "body_type": f"must be a string, object or array, got {json_kind(value)}",
        "model_type": f"must be a JSON object, got {json_kind(value)}",
        "dict_type": f"must be a JSON object, got {json_kind(value)}",
        "list_type": f"must be an array, got {json_kind(value)}",
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
