"""The history seam: traffic per topic and interval, recorded until ``emq history export`` takes
it (the capacity planner's input), and the current delivery rates (``adapters``: Redis)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from emq.core.interfaces.resource import AsyncResource


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One source's traffic of one topic over one interval (the capacity planner's input).

    Several rows may share a topic and an interval (the API and every worker owning one of its
    groups write their own); readers add the counters up and weight the latencies.
    """

    interval_start: int  # epoch seconds, a multiple of interval_s
    interval_s: int
    namespace: str
    tenant: str
    topic: str
    source: str  # "api" or a worker id
    enqueued: int = 0
    delivered: int = 0
    throttled_backlog: int = 0  # jobs buffered and waiting for quota at the interval's end
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    quota: int = 0
    groups: int = 0


class HistoryStore(AsyncResource):
    """Where traffic history is recorded until ``emq history export`` takes it."""

    @abc.abstractmethod
    async def record(self, rows: Sequence[HistoryRow]) -> None:
        """Append rows (one round trip)."""

    @abc.abstractmethod
    def read(
        self, since_s: int | None = None, batch: int = 10_000
    ) -> AsyncIterator[list[HistoryRow]]:
        """Yield the recorded rows, oldest first, in batches."""

    @abc.abstractmethod
    async def publish_rates(self, source: str, rates: Mapping[str, float]) -> None:
        """Publish ``source``'s current delivered/s per topic (``str(TopicRef)``)."""

    @abc.abstractmethod
    async def rate(self, topic: str, max_age_s: float = 5.0) -> float:
        """Delivered/s of a topic: the sum over sources that published within ``max_age_s``."""

    async def recent(self, since_s: int) -> list[HistoryRow]:
        """The rows of intervals that start at ``since_s`` or later (a rollout's watch reads
        them). This default reads everything; a store that can seek does better."""
        out: list[HistoryRow] = []
        async for rows in self.read(since_s):
            out.extend(rows)
        return out

    async def source_rates(self, max_age_s: float = 5.0) -> dict[str, dict[str, float]]:
        """Delivered/s per source (a worker id) and topic, from sources fresh within ``max_age_s``.

        A store that cannot tell answers ``{}``.
        """
        return {}
