"""Enqueue-to-delivery latency per topic over the last minute: what the console's p99 shows.

Workers count every delivery's latency (accepted by the API → 2xx) in fixed buckets
(:data:`E2E_BUCKETS_S`, the buckets of ``emq_delivery_latency_seconds``). Every few seconds
each worker adds what its topics gained to a :class:`LatencyBoard`; the API reads the board's
window (the counts of every worker, added up) and turns them into quantiles with
:func:`quantile`.

What is exact and what is an estimate: the *counts* per bucket over the window are exact (every
delivery of every worker counted once, when its worker adds it: a few seconds late, and dropped
if the board cannot be reached); a *quantile* is an estimate, interpolated linearly
within its bucket as Prometheus' ``histogram_quantile`` does, so it is never further from the
truth than the bucket it falls in (e.g. between 0.25 s and 0.5 s). A quantile that falls in the
overflow bucket reads as the last bound (3600 s): at least that.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence

# Upper bounds in seconds; a delivery counts in the first bucket whose bound is >= its latency,
# one past the last bound is the overflow bucket.
E2E_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
BUCKETS = len(E2E_BUCKETS_S) + 1  # counts per histogram, the overflow bucket included


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile in seconds of a histogram over :data:`E2E_BUCKETS_S`, or None if it
    counts nothing. Linear within the bucket (its lower bound is the previous bound, or 0)."""
    total = sum(counts)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(E2E_BUCKETS_S):
                return float(E2E_BUCKETS_S[-1])
            low = E2E_BUCKETS_S[i - 1] if i else 0.0
            high = E2E_BUCKETS_S[i]
            return low + (high - low) * max(0.0, rank - seen) / n
        seen += n
    return float(E2E_BUCKETS_S[-1])


def summary(counts: Sequence[int] | None) -> dict[str, float | int | None]:
    """``{"p50_ms", "p99_ms", "delivered"}`` of a window's histogram (None: no delivery)."""
    counts = counts or ()
    p50, p99 = quantile(counts, 0.5), quantile(counts, 0.99)
    return {
        "p50_ms": None if p50 is None else round(p50 * 1000, 1),
        "p99_ms": None if p99 is None else round(p99 * 1000, 1),
        "delivered": sum(counts),
    }


class LatencyBoard(abc.ABC):
    """Where workers add their topics' latency counts and the API reads the last minute's.

    Topics are named ``str(TopicRef)``; a histogram is :data:`BUCKETS` counts.
    """

    window_s: int = 60

    @abc.abstractmethod
    async def add_latency(self, counts: Mapping[str, Sequence[int]]) -> None:
        """Add deliveries counted since the previous call, per topic (one round trip)."""

    @abc.abstractmethod
    async def latency_window(self, topics: Sequence[str]) -> dict[str, list[int]]:
        """Each topic's counts over the last ``window_s`` (or a little more: see the
        implementation); a topic without deliveries in the window is left out."""
