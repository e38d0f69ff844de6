"""The promise checker: EMQ's delivery invariants as pure functions over a sink's delivery log.

A receiving sink records one :class:`Delivery` per request it got (arrival wall time, the
``webhook-id``, the topic from the URL path, what the URL's query carried — ``g`` group,
``p`` priority, ``k`` key — and the status it answered). Given that log, the ids the system
accepted and the ids in the dead-letter queues, each function here measures one promise of
ARCHITECTURE.md:

* :func:`lost` — invariant 1: accepted, neither delivered with a 2xx nor dead-lettered.
* :func:`duplicates` — 2xx deliveries beyond the first per id (at-least-once has a price: this
  says how much).
* :func:`busiest_second` / :func:`busiest_window` — invariant 2: the most requests of one topic
  in a wall-clock second and in any sliding 1000 ms window, against ``qps`` (+1 per group).
* :func:`sustained` — invariant 2's other half: the delivered rate over the complete seconds
  while a backlog lasted, as a share of ``qps``.
* :func:`longest_gap` — how long a topic went without a delivery within a stretch of time (the
  figure of a fault trial: a Redis or ZooKeeper outage, a killed worker).

Quota counts requests (every attempt costs quota, whatever the answer); loss and duplicates count
only 2xx answers. Nothing here does I/O: :func:`parse_log` turns the sink's JSON rows into
records, and :func:`check` bundles every figure into one dict for a trial's report.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs


@dataclass(frozen=True, slots=True)
class Delivery:
    """One request as the sink saw it (``status`` 0: never answered, e.g. a hanging endpoint)."""

    at: float
    job_id: str
    topic: str
    status: int = 200
    group: int | None = None
    priority: str | None = None
    key: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(frozen=True, slots=True)
class Quota:
    """What a topic may deliver: ``qps`` per second, +1 of slack per group."""

    qps: int
    groups: int = 1

    @property
    def limit(self) -> int:
        return self.qps + self.groups


def parse_log(rows: Iterable[Sequence[Any]]) -> list[Delivery]:
    """Records from the sink's ``/_log`` rows: ``[at, topic, webhook_id, status, query]``."""
    out = []
    for at, topic, job_id, status, query in rows:
        q = {k: v[0] for k, v in parse_qs(query or "").items()}
        group = int(q["g"]) if q.get("g", "").isdigit() else None
        out.append(Delivery(float(at), job_id, topic, int(status), group, q.get("p"), q.get("k")))
    return out


# --------------------------------------------------------------------------- loss, duplicates


def delivered_ids(log: Iterable[Delivery]) -> set[str]:
    return {d.job_id for d in log if d.ok}


def lost(accepted: Iterable[str], log: Iterable[Delivery], dead: Iterable[str]) -> set[str]:
    """Accepted ids neither delivered with a 2xx nor in a dead-letter queue."""
    return set(accepted) - delivered_ids(log) - set(dead)


def duplicates(log: Iterable[Delivery]) -> int:
    """2xx deliveries beyond the first of each id."""
    counts = Counter(d.job_id for d in log if d.ok)
    return sum(n - 1 for n in counts.values())


# --------------------------------------------------------------------------- quota


def by_topic(log: Iterable[Delivery]) -> dict[str, list[float]]:
    """Arrival times of every request per topic, sorted."""
    times: defaultdict[str, list[float]] = defaultdict(list)
    for d in log:
        times[d.topic].append(d.at)
    return {topic: sorted(ts) for topic, ts in times.items()}


def busiest_second(times: Sequence[float]) -> int:
    """The most arrivals in one wall-clock second (``int(at)``)."""
    return max(Counter(int(t) for t in times).values(), default=0)


def busiest_window(times: Sequence[float], window_s: float = 1.0) -> int:
    """The most arrivals in any half-open window ``[t, t + window_s)``, sorted ``times``.

    The busiest window can always be slid right until it starts at an arrival, so only windows
    starting at an arrival are counted. Two arrivals exactly ``window_s`` apart are never in one
    window (the window is half-open, as a second ``[s, s+1)`` is).
    """
    return busiest_window_at(times, window_s)[0]


def busiest_window_at(times: Sequence[float], window_s: float = 1.0) -> tuple[int, float | None]:
    """:func:`busiest_window` and where the (first) busiest window starts (None: no arrival)."""
    best, at = 0, None
    for i, t in enumerate(times):
        j = bisect.bisect_left(times, t + window_s, lo=i)
        if j - i > best:
            best, at = j - i, t
    return best, at


def sustained(times: Sequence[float], qps: int) -> float | None:
    """Arrivals per second over the complete wall-clock seconds between the first and the last
    arrival, as a share of ``qps``; None with fewer than three distinct seconds (nothing full)."""
    if not times:
        return None
    first, last = int(times[0]), int(times[-1])
    if last - first < 2:
        return None
    full = sum(1 for t in times if first < int(t) < last)
    return full / (last - first - 1) / qps


def quota_figures(times: Sequence[float], quota: Quota) -> dict[str, Any]:
    """One topic's busiest second, busiest sliding window and sustained rate, against its quota."""
    second = busiest_second(times)
    window, window_at = busiest_window_at(times)
    rate = sustained(times, quota.qps)
    return {
        "qps": quota.qps,
        "limit": quota.limit,
        "requests": len(times),
        "busiest_second": second,
        "busiest_window": window,
        "second_ratio": round(second / quota.qps, 3),
        "window_ratio": round(window / quota.qps, 3),
        "busiest_window_at": window_at,
        "sustained_ratio": None if rate is None else round(rate, 3),
        "within": second <= quota.limit and window <= quota.limit,
    }


# --------------------------------------------------------------------------- gaps


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch within ``[start, end]`` with no arrival (sorted ``times``).

    The edges count: from ``start`` to the first arrival and from the last one to ``end``; a
    stretch with no arrival at all is one gap of ``end - start``.
    """
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max((b - a for a, b in itertools.pairwise(edges)), default=0.0)


def first_after(times: Sequence[float], at: float) -> float | None:
    """Seconds from ``at`` to the first arrival at or after it (sorted ``times``); None if none."""
    i = bisect.bisect_left(times, at)
    return times[i] - at if i < len(times) else None


# --------------------------------------------------------------------------- all at once


def check(
    log: Sequence[Delivery],
    accepted: Iterable[str],
    dead: Iterable[str],
    quotas: Mapping[str, Quota],
    window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """Every figure: loss, duplicates, per-topic quota figures and, given ``window``, gaps."""
    accepted = set(accepted)
    missing = lost(accepted, log, dead)
    times = by_topic(log)
    topics = {topic: quota_figures(times.get(topic, []), quota) for topic, quota in quotas.items()}
    if window is not None:
        for topic, figures in topics.items():
            figures["longest_gap_s"] = round(longest_gap(times.get(topic, []), *window), 3)
    worst = max(topics.values(), key=lambda f: f["window_ratio"], default=None)
    return {
        "accepted": len(accepted),
        "delivered": len(delivered_ids(log) & accepted),
        "lost": len(missing),
        "lost_sample": sorted(missing)[:5],
        "duplicates": duplicates(log),
        "max_second_ratio": max((f["second_ratio"] for f in topics.values()), default=0.0),
        "max_window_ratio": worst["window_ratio"] if worst else 0.0,
        "quota_held": all(f["within"] for f in topics.values()),
        "quota_exceeded": {
            t: [f["busiest_window"], f["limit"], f["busiest_window_at"]]
            for t, f in topics.items()
            if not f["within"]
        },
        "topics": topics,
    }
