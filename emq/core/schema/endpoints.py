"""The API's request bodies for per-endpoint flow control (see :mod:`emq.core.endpoints`).

``EndpointsIn`` is a topic's ``endpoints`` field (create and PATCH: on a PATCH only the fields
given change); ``EndpointEnableIn`` re-enables a disabled endpoint. Same rules as every body of
:mod:`emq.core.schema`: unknown fields refused, exact types, finite numbers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from emq.core.endpoints import ENDPOINT_PATTERN, EndpointPolicy

_DEFAULT = EndpointPolicy()
_INTEGERS = ("latency_ms", "disable_after", "disable_after_s")


class EndpointsIn(BaseModel):
    """Per-endpoint (``host:port``) flow control of a topic; the defaults change nothing."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)

    adaptive: Annotated[
        bool,
        Field(description="AIMD rate per endpoint: cut on 429/503 or slow p90, Retry-After held"),
    ] = _DEFAULT.adaptive
    decrease: Annotated[
        float, Field(ge=0.05, lt=1, description="rate multiplier on a 429/503 or a slow p90")
    ] = _DEFAULT.decrease
    increase_qps: Annotated[
        float, Field(gt=0, le=100_000, description="rate added per second while it succeeds")
    ] = _DEFAULT.increase_qps
    min_qps: Annotated[float, Field(gt=0, le=100_000, description="never cut below")] = (
        _DEFAULT.min_qps
    )
    latency_ms: Annotated[
        int, Field(ge=0, le=600_000, description="p90 push latency that cuts the rate (0: off)")
    ] = _DEFAULT.latency_ms
    disable_after: Annotated[
        int,
        Field(ge=0, le=1_000_000, description="consecutive failures that disable it (0: never)"),
    ] = _DEFAULT.disable_after
    disable_after_s: Annotated[
        int, Field(ge=0, le=7 * 86400, description="the failures must span at least this long")
    ] = _DEFAULT.disable_after_s

    @model_validator(mode="before")
    @classmethod
    def _integral(cls, data: object) -> object:
        """``10.0`` is the integer 10 (JSON Schema's ``integer``), as in every EMQ body."""
        if not isinstance(data, dict):
            return data
        return {
            k: int(v) if k in _INTEGERS and isinstance(v, float) and v.is_integer() else v
            for k, v in data.items()
        }

    def applied(self, policy: EndpointPolicy) -> EndpointPolicy:
        """``policy`` with the fields given here changed."""
        changes: dict[str, Any] = {n: getattr(self, n) for n in self.model_fields_set}
        return replace(policy, **changes)


class EndpointEnableIn(BaseModel):
    """Re-enable a disabled endpoint of a topic (``*``: every one)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    endpoint: Annotated[
        str,
        Field(
            min_length=1,
            max_length=300,
            pattern=ENDPOINT_PATTERN,
            description="host:port as topic show lists it, or * for all",
        ),
    ]
