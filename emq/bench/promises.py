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
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# The log's records (emq.bench.deliveries) and the order promises (emq.bench.order) live in
# modules of their own; the checker's callers find every name here.
from emq.bench.deliveries import Delivery as Delivery
from emq.bench.deliveries import Quota as Quota
from emq.bench.deliveries import parse_log as parse_log
from emq.bench.deliveries import with_accepted as with_accepted
from emq.bench.order import PRIORITY_BASE_GRACE_S as PRIORITY_BASE_GRACE_S
from emq.bench.order import RANK as RANK
from emq.bench.order import first_ok as first_ok
from emq.bench.order import high_waits as high_waits
from emq.bench.order import key_inversions as key_inversions
from emq.bench.order import key_overlaps as key_overlaps
from emq.bench.order import priority_grace_s as priority_grace_s
from emq.bench.order import priority_inversions as priority_inversions

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


def quota_figures(
    times: Sequence[float], quota: Quota, changes: Sequence[tuple[float, Quota]] = ()
) -> dict[str, Any]:
    """One topic's busiest second, busiest sliding window and sustained rate, against its quota.

    ``changes``: ``(at, new quota)`` in time order (a quota changed live). A window may then
    hold up to the larger limit of any quota in force from :data:`APPLY_S` before it starts to
    its end (workers take up a change within that); the sustained rate is the least over the
    stretches between changes, each counted from :data:`APPLY_S` after its change.
    """
    schedule = [(-math.inf, quota), *changes]
    second, second_over, _ = _busiest(times, schedule, lambda t: float(int(t)))
    window, window_over, worst = _busiest(times, schedule, lambda t: t)
    rate = _sustained(times, schedule)
    top = max(q.qps for _, q in schedule)
    return {
        "qps": quota.qps if not changes else [q.qps for _, q in schedule],
        "limit": max(q.limit for _, q in schedule),
        "requests": len(times),
        "busiest_second": second,
        "busiest_window": window,
        # With changes, the ratio is to the limit in force (qps + groups), not to a single qps.
        "second_ratio": round(second / top if not changes else second_over, 3),
        "window_ratio": round(window / top if not changes else window_over, 3),
        "busiest_window_at": busiest_window_at(times)[1],
        "worst_window": worst,  # [count, limit in force, start] of the window most over its limit
        "sustained_ratio": None if rate is None else round(rate, 3),
        "second_within": second_over <= 1.0,
        "within": second_over <= 1.0 and window_over <= 1.0,
    }


APPLY_S = 2.0  # ARCHITECTURE.md: "every worker uses the new quota within 2 s"


def _in_force(schedule: Sequence[tuple[float, Quota]], start: float, end: float) -> Quota:
    """The most generous quota in force at any time in ``[start - APPLY_S, end)``."""
    quotas = [
        q
        for i, (at, q) in enumerate(schedule)
        if at < end and (i + 1 == len(schedule) or schedule[i + 1][0] > start - APPLY_S)
    ]
    return max(quotas, key=lambda q: q.limit)


def _busiest(
    times: Sequence[float], schedule: Sequence[tuple[float, Quota]], start_of: Any
) -> tuple[int, float, list[Any]]:
    """The most arrivals in one window starting at ``start_of(arrival)`` (1 s long), the highest
    count / limit-in-force of any window (above 1.0: over quota) and that window's
    ``[count, limit, start]``."""
    best, over, worst = 0, 0.0, [0, 0, None]
    for i, t in enumerate(times):
        start = start_of(t)
        if i and start_of(times[i - 1]) == start:
            continue  # the same window as the previous arrival's
        j = bisect.bisect_left(times, start + 1.0, lo=i)
        limit = _in_force(schedule, start, start + 1.0).limit
        best = max(best, j - i)
        if (j - i) / limit > over:
            over, worst = (j - i) / limit, [j - i, limit, start]
    return best, over, worst


def _sustained(times: Sequence[float], schedule: Sequence[tuple[float, Quota]]) -> float | None:
    """The least :func:`sustained` rate over the stretches of ``schedule`` (see quota_figures)."""
    if len(schedule) == 1:
        return sustained(times, schedule[0][1].qps)
    rates = []
    for i, (at, quota) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else math.inf
        start = at + APPLY_S if i else -math.inf
        stretch = [t for t in times if start <= t < end]
        rate = sustained(stretch, quota.qps)
        if rate is not None:
            rates.append(rate)
    return min(rates, default=None)


def backlogged_rate(
    log: Sequence[Delivery],
    topic: str,
    quota: Quota,
    changes: Sequence[tuple[float, Quota]] = (),
    backlog_s: float = 2.0,
) -> float | None:
    """Invariant 2's floor: requests of ``topic`` over what its quota owed, counted only in the
    complete wall-clock seconds (after its first request) that ended with at least ``backlog_s``
    seconds of its quota ready and undelivered (a backlog: jobs whose enqueue time + delay, from
    their URL, had passed and whose first 2xx had not come). Seconds less than :data:`APPLY_S`
    after a quota change, or straddling one, are left out. None: no such second."""
    firsts = [d for d in first_ok(log).values() if d.topic == topic and d.ready is not None]
    arrivals = sorted(d.at for d in log if d.topic == topic)
    if not firsts or not arrivals:
        return None
    readies = sorted(d.ready for d in firsts if d.ready is not None)
    dones = sorted(d.at for d in firsts)
    schedule = [(-math.inf, quota), *changes]
    owed = got = 0
    for second in range(int(arrivals[0]) + 1, int(arrivals[-1]) + 1):
        qps = _owed(schedule, second)
        end = second + 1
        backlog = bisect.bisect_right(readies, end) - bisect.bisect_right(dones, end)
        if qps is None or backlog < backlog_s * qps:
            continue
        owed += qps
        got += bisect.bisect_left(arrivals, end) - bisect.bisect_left(arrivals, second)
    return got / owed if owed else None


def _owed(schedule: Sequence[tuple[float, Quota]], second: int) -> int | None:
    """The qps owed over ``[second, second + 1)``; None near or across a change."""
    for i, (at, quota) in enumerate(schedule):
        end = schedule[i + 1][0] if i + 1 < len(schedule) else math.inf
        if (at + APPLY_S if i else at) <= second and second + 1 <= end:
            return quota.qps
    return None


# ------------------------------------------------------------------------- duplicates after faults


def unexplained_duplicates(log: Iterable[Delivery], faults: Sequence[float]) -> int:
    """2xx deliveries beyond an id's first that came before any fault (a crash, a kill, a
    restart at the times ``faults``): at-least-once may repeat a job only after one."""
    first_fault = min(faults, default=math.inf)
    seen: set[str] = set()
    count = 0
    for d in sorted((d for d in log if d.ok), key=lambda d: d.at):
        if d.job_id in seen and d.at < first_fault:
            count += 1
        seen.add(d.job_id)
    return count


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
    *,
    faults: Sequence[float] = (),
    changes: Mapping[str, Sequence[tuple[float, Quota]]] | None = None,
    steady: Sequence[str] = (),
    misbehaving: Sequence[str] = (),
    answer_s: Mapping[str, float] | None = None,
    stored: Iterable[str] = (),
    accepted_at: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Every figure: loss (``stored``: ids still stored and waiting when the run ended, not
    lost; counted apart as ``still_stored``), duplicates (and those before any of the
    ``faults``), per-topic quota figures (``quotas`` as first set, ``changes`` per topic),
    priority and key order, and:

    * ``steady``: topics whose jobs carry their enqueue time and whose endpoints answer 2xx:
      their least :func:`backlogged_rate` (``sustained_min_ratio``);
    * ``misbehaving``: topics flooded or with failing/hanging endpoints; if any, the steady
      topics' least sustained rate is also ``isolation_min_ratio`` (what they got meanwhile);
    * ``answer_s``: topics whose endpoint answers after that many seconds: keyed requests sent
      while the key's previous one was unanswered (:func:`key_overlaps`);
    * given ``window``, each topic's longest gap within it;
    * ``accepted_at``: per job id, when the API's answer accepting it came back (see
      :attr:`Delivery.ready`: a job is judged ready no sooner than it was surely stored).
    """
    if accepted_at:
        log = with_accepted(log, accepted_at)
    accepted = set(accepted)
    missing = lost(accepted, log, dead)
    waiting = missing & set(stored)
    missing -= waiting
    times = by_topic(log)
    changes = changes or {}
    topics = {
        topic: quota_figures(times.get(topic, []), quota, changes.get(topic, ()))
        for topic, quota in quotas.items()
    }
    if window is not None:
        for topic, figures in topics.items():
            figures["longest_gap_s"] = round(longest_gap(times.get(topic, []), *window), 3)
    worst = max(topics.values(), key=lambda f: f["window_ratio"], default=None)
    for topic in steady:
        if topic in topics:
            rate = backlogged_rate(log, topic, quotas[topic], changes.get(topic, ()))
            topics[topic]["backlogged_ratio"] = None if rate is None else round(rate, 3)
    rates = [topics[t]["backlogged_ratio"] for t in steady if t in topics]
    sustained_min = min((r for r in rates if r is not None), default=None)
    waits = high_waits(log)
    grace = {  # the longest a quota in force lets a high job wait for the group's next slot
        t: max(priority_grace_s(x) for x in (q, *(c for _, c in changes.get(t, ()))))
        for t, q in quotas.items()
    }
    return {
        "accepted": len(accepted),
        "delivered": len(delivered_ids(log) & accepted),
        "lost": len(missing),
        "lost_sample": sorted(missing)[:5],
        "still_stored": len(waiting),
        "duplicates": duplicates(log),
        "duplicates_before_fault": unexplained_duplicates(log, faults),
        "faults": len(faults),
        "max_second_ratio": max((f["second_ratio"] for f in topics.values()), default=0.0),
        "max_window_ratio": worst["window_ratio"] if worst else 0.0,
        "quota_held": all(f["within"] for f in topics.values()),
        "quota_exceeded": {t: f["worst_window"] for t, f in topics.items() if not f["within"]},
        "sustained_min_ratio": sustained_min,
        "isolation_min_ratio": sustained_min if misbehaving else None,
        "priority": priority_inversions(log, grace, answer_s),
        "high_wait_p99_s": round(waits[int(0.99 * (len(waits) - 1))], 3) if waits else None,
        "keys": key_inversions(log) | {"overlaps": key_overlaps(log, answer_s or {})},
        "topics": topics,
    }


# What each promise's figure must be (figure -> "<=" or ">=", bound). A figure that is None was
# not measured (no steady topic, no misbehaving one) and neither passes nor fails.
BOUNDS: dict[str, tuple[str, float]] = {
    "lost": ("<=", 0),
    "duplicates_before_fault": ("<=", 0),
    "second_over_quota_topics": ("<=", 0),
    "window_over_quota_topics": ("<=", 0),
    "sustained_min_ratio": (">=", 0.95),
    "isolation_min_ratio": (">=", 0.95),
    "priority_inversions": ("<=", 0),
    "key_inversions": ("<=", 0),
    "key_overlaps": ("<=", 0),
}


def figures(result: Mapping[str, Any]) -> dict[str, Any]:
    """The one figure per promise that :data:`BOUNDS` judges, from a :func:`check` result."""
    return {
        "lost": result["lost"],
        "duplicates_before_fault": result["duplicates_before_fault"],
        "second_over_quota_topics": sum(not f["second_within"] for f in result["topics"].values()),
        "window_over_quota_topics": len(result["quota_exceeded"]),
        "sustained_min_ratio": result["sustained_min_ratio"],
        "isolation_min_ratio": result["isolation_min_ratio"],
        "priority_inversions": result["priority"]["inversions"],
        "key_inversions": result["keys"]["inversions"],
        "key_overlaps": result["keys"]["overlaps"],
    }


def verdict_of(name: str, value: float) -> bool:
    """Whether ``value`` of promise ``name`` is within its bound."""
    op, bound = BOUNDS[name]
    return value <= bound if op == "<=" else value >= bound


def verdict(result: Mapping[str, Any]) -> dict[str, bool | None]:
    """Per promise: met (True), broken (False) or not measured (None)."""
    return {
        name: None if value is None else verdict_of(name, value)
        for name, value in figures(result).items()
    }
