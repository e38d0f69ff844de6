"""Per-endpoint flow control of a topic: its policy, an endpoint's name, and the status board.

An *endpoint* is a job URL's destination, ``host:port`` (scheme default ports filled in), within
one topic. A topic's :class:`EndpointPolicy` says whether each endpoint gets an adaptive rate
(AIMD: cut multiplicatively on 429/503 or a p90 latency past ``latency_ms``, raised additively
while it succeeds, up to the topic's quota; ``Retry-After`` holds the whole endpoint) and when
an endpoint is disabled (``disable_after`` consecutive failures over at least
``disable_after_s``: its jobs are held, not dead-lettered, until an operator re-enables it).
The worker does the work (``worker/endpoints.py``); :class:`EndpointBoard` carries what each
worker sees to the API. Nothing here does I/O.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from emq.core.errors import InvalidInput

ALL_ENDPOINTS = "*"  # a re-enable of every disabled endpoint of the topic
MAX_ENABLES = 64  # re-enable marks kept in a topic's policy (the newest)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    """How a topic treats each of its endpoints (the defaults change nothing).

    ``enables`` are operators' re-enables: ``(endpoint or "*", epoch ms)``; an endpoint
    disabled before that time is enabled again by every worker that sees the mark."""

    adaptive: bool = False
    decrease: float = 0.7  # the rate is multiplied by this on a 429/503 or a slow p90
    increase_qps: float = 5.0  # and raised by this much per second while it succeeds
    min_qps: float = 1.0  # never cut below this
    latency_ms: int = 0  # p90 push latency over this cuts the rate (0: latency ignored)
    disable_after: int = 0  # consecutive failures that disable an endpoint (0: never)
    disable_after_s: int = 300  # ... and the failures must span at least this long
    enables: tuple[tuple[str, int], ...] = field(default=())

    def __post_init__(self) -> None:
        if not 0.05 <= self.decrease < 1:
            raise InvalidInput("endpoints.decrease", "must be at least 0.05 and below 1")
        if not 0 < self.increase_qps <= 100_000:
            raise InvalidInput("endpoints.increase_qps", "must be above 0 and at most 100000")
        if not 0 < self.min_qps <= 100_000:
            raise InvalidInput("endpoints.min_qps", "must be above 0 and at most 100000")

    @property
    def active(self) -> bool:
        """Whether a worker needs to follow this topic's endpoints at all."""
        return self.adaptive or self.disable_after > 0

    def enabled(self, endpoint: str, at_ms: int) -> EndpointPolicy:
        """This policy with a re-enable of ``endpoint`` (or every one: ``*``) at ``at_ms``."""
        kept = [(e, t) for e, t in self.enables if e != endpoint]
        kept.append((endpoint, at_ms))
        return _replace(self, enables=tuple(kept[-MAX_ENABLES:]))

    def enabled_since(self, endpoint: str) -> int:
        """The latest re-enable (epoch ms) that covers ``endpoint``; 0 if none."""
        return max((t for e, t in self.enables if e in (endpoint, ALL_ENDPOINTS)), default=0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {n: getattr(self, n) for n in _SCALARS}
        out["enables"] = [list(pair) for pair in self.enables]
        return out

    def view(self) -> dict[str, Any]:
        """What the API shows (re-enable marks are an operator's actions, not settings)."""
        return {n: getattr(self, n) for n in _SCALARS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EndpointPolicy:
        """From stored JSON: unknown keys ignored, missing ones default."""
        values = {n: d[n] for n in _SCALARS if n in d}
        enables = tuple((str(e), int(t)) for e, t in d.get("enables", ()))
        return cls(**values, enables=enables)


_SCALARS = (
    "adaptive",
    "decrease",
    "increase_qps",
    "min_qps",
    "latency_ms",
    "disable_after",
    "disable_after_s",
)


def _replace(policy: EndpointPolicy, **changes: Any) -> EndpointPolicy:
    values = {n: getattr(policy, n) for n in (*_SCALARS, "enables")}
    return EndpointPolicy(**(values | changes))


def endpoint_of(url: str) -> str:
    """``host:port`` of a job URL (lower-cased, the scheme's port when none is given).

    String splitting, not a URL parser: the worker calls it per job of a watched topic, and the
    API has already checked every URL it accepted (a malformed one yields some name; its push
    fails and dead-letters it as before)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url[:100]
    netloc = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0].rpartition("@")[2].lower()
    if netloc.endswith("]") or ":" not in netloc:  # no port (an IPv6 literal is bracketed)
        return f"{netloc}:{_DEFAULT_PORTS.get(scheme.lower(), 80)}"
    return netloc


# host:port as endpoint_of() names it (an IPv6 literal in brackets), or "*"; the API's schema
# states the same pattern.
ENDPOINT_PATTERN = r"^(\*|(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+):[0-9]{1,5})$"


def check_endpoint(value: str, field_name: str = "endpoint") -> str:
    """An endpoint named by an operator: ``host:port`` or ``*``."""
    if len(value) > 300 or not re.fullmatch(ENDPOINT_PATTERN, value):
        raise InvalidInput(field_name, f"must be host:port or {ALL_ENDPOINTS!r}, got {value!r}")
    return value.lower()


class EndpointBoard(abc.ABC):
    """Where workers post what they see of each endpoint, and the API reads it back."""

    @abc.abstractmethod
    async def publish(self, source: str, topics: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """Post ``source``'s (a worker's) endpoint statuses, by topic (``str(TopicRef)``);
        a topic with an empty list has nothing to show any more."""

    @abc.abstractmethod
    async def read(self, topic: str, max_age_s: float = 5.0) -> list[dict[str, Any]]:
        """Every fresh status of ``topic``'s endpoints, each with the ``worker`` it came from."""

    async def aclose(self) -> None:
        """Release what the board holds (nothing by default)."""
        return None
