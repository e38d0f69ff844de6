"""The order promises of the checker (invariant 5, :mod:`emq.bench.promises`): priority within
a group (with what keys mean for it) and order per key, from a sink's delivery log."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from emq.bench.deliveries import Delivery, Quota


def first_ok(log: Iterable[Delivery]) -> dict[str, Delivery]:
    """The first 2xx delivery of each id."""
    out: dict[str, Delivery] = {}
    for d in sorted((d for d in log if d.ok), key=lambda d: d.at):
        out.setdefault(d.job_id, d)
    return out


RANK = {"high": 0, "medium": 1, "low": 2}
PRIORITY_BASE_GRACE_S = 0.15  # issue 12: high enqueue -> delivery p99 <= 1/qps + 150 ms


def priority_grace_s(quota: Quota) -> float:
    """How long after a high job is ready lower ones may still go out: what was already in
    flight, and the group's next free slot (one interval of the group's rate)."""
    return PRIORITY_BASE_GRACE_S + quota.groups / quota.qps


def priority_inversions(
    log: Sequence[Delivery],
    grace_s: Mapping[str, float],
    answer_s: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Invariant 5, priority: lower jobs of a group delivered while a higher one waited.

    A job J (priority, group, key and enqueue time carried in its URL) waits from ``J.ready``
    (enqueued + delay; from when the API's answer accepting J came back + delay, if that is
    known and later: a job on its way into the store waits behind nothing) to its first 2xx;
    ``grace`` (per topic) allows for what was already in flight or reserved when J arrived. A
    J that failed an attempt waited in the retry schedule, not behind lower jobs, and is left
    out. What counts as an inversion:

    * an unkeyed J: every first 2xx of a lower priority in J's group in
      ``(J.ready + grace, J.delivered)``;
    * a keyed J (key K): order per key says J waits for K's jobs ahead of it, those of its own
      or a higher priority (at most one of a key in flight). Lower jobs of *other* keys (or
      none) that go meanwhile are no inversion: they count only from the last arrival of such
      a job of K before J, plus its endpoint's round trip (``answer_s`` per topic: known slow
      endpoints) and the grace. Lower jobs of K itself count from ``J.ready + grace``: J is
      meant to pass its key's lows (see worker.keys).

    ``in_worker`` tells the counted inversions apart by stage, without changing the count: of
    the overtaken jobs, those the worker had surely read when the first lower job passed them.
    That is shown when a job of J's group *and priority* made after J was accepted (so stored
    behind J in J's queue, which is read in order) had its first 2xx before that lower job.
    The rest were, as far as the log can show, still in the store or on their way to the
    worker (signal, read): a fetch that came later than the grace, not a dispatch that chose a
    lower job over a higher one it held.
    """
    answer_s = answer_s or {}
    failed = {d.job_id for d in log if not d.ok}
    firsts = [d for d in first_ok(log).values() if d.priority in RANK and d.group is not None]
    lanes: defaultdict[tuple[str, int | None], defaultdict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    # Per (topic, key): per rank, arrival times (sorted).
    keyed: defaultdict[tuple[str, str], defaultdict[int, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for d in firsts:
        lanes[(d.topic, d.group)][RANK[d.priority or ""]].append(d.at)
        if d.key is not None:
            keyed[(d.topic, d.key)][RANK[d.priority or ""]].append(d.at)
    for lane in (*lanes.values(), *keyed.values()):
        for times in lane.values():
            times.sort()
    made = _made_after(firsts)
    inversions, overtaken, in_worker, worst = 0, 0, 0, (0, "")
    per_topic: Counter[str] = Counter()
    for d in firsts:
        if d.ready is None or d.job_id in failed:
            continue
        rank = RANK[d.priority or ""]
        grace = grace_s.get(d.topic, PRIORITY_BASE_GRACE_S)
        lane = lanes[(d.topic, d.group)]
        n = _lower_between(lane, rank, d.ready + grace, d.at)
        first = _first_lower_after(lane, rank, d.ready + grace)
        if d.key is not None:
            answer = answer_s.get(d.topic, 0.0)
            own = keyed[(d.topic, d.key)]
            n = _keyed_inversions(lane, own, rank, d, grace, answer)
            since = _keyed_since(own, rank, d, grace, answer)
            first = min(
                _first_lower_after(own, rank, d.ready + grace),
                _first_lower_after(lane, rank, since),
            )
        inversions += n
        overtaken += n > 0
        if n and d.accepted is not None:
            in_worker += _read_before(made[(d.topic, d.group, rank)], d.accepted, first)
        per_topic[d.topic] += n
        worst = max(worst, (n, d.job_id))
    return {
        "inversions": inversions,
        "overtaken_jobs": overtaken,
        "in_worker": in_worker,
        "worst": list(worst),
        "by_topic": {t: n for t, n in per_topic.items() if n},
    }


# Per (topic, group, rank): the made times (sorted) of the jobs that carried one, and from each
# index on the earliest first 2xx among them.
Made = tuple[list[float], list[float]]


def _made_after(firsts: Iterable[Delivery]) -> defaultdict[tuple[str, int | None, int], Made]:
    """For :func:`_read_before`: per group and priority, first 2xx times by made time."""
    jobs: defaultdict[tuple[str, int | None, int], list[tuple[float, float]]] = defaultdict(list)
    for d in firsts:
        if d.enqueued is not None:
            jobs[(d.topic, d.group, RANK[d.priority or ""])].append((d.enqueued, d.at))
    out: defaultdict[tuple[str, int | None, int], Made] = defaultdict(lambda: ([], []))
    for lane, pairs in jobs.items():
        pairs.sort()
        earliest = list(itertools.accumulate(reversed([at for _, at in pairs]), min))[::-1]
        out[lane] = ([m for m, _ in pairs], earliest)
    return out


def _read_before(made: Made, accepted: float, passed_at: float) -> bool:
    """Whether a job made at or after ``accepted`` (stored behind the accepted job in its
    queue) had its first 2xx before ``passed_at``: the queue had been read past that job."""
    times, earliest = made
    i = bisect.bisect_left(times, accepted)
    return i < len(times) and earliest[i] < passed_at


def _first_lower_after(lane: Mapping[int, list[float]], rank: int, start: float) -> float:
    """The first arrival in ``lane`` of a rank below ``rank`` after ``start`` (inf: none)."""
    firsts = (
        times[i]
        for r, times in lane.items()
        if r > rank and (i := bisect.bisect_right(times, start)) < len(times)
    )
    return min(firsts, default=math.inf)


def _keyed_inversions(
    lane: Mapping[int, list[float]],
    own: Mapping[int, list[float]],
    rank: int,
    job: Delivery,
    grace: float,
    answer: float = 0.0,
) -> int:
    """A keyed job's inversions (see :func:`priority_inversions`): its key's lower jobs from
    its ready time + ``grace``; other lower jobs from the arrival of its key's last job ahead of
    it, plus ``answer`` (that job's round trip) and ``grace``. Ahead of it: its
    key's jobs of its own or a higher priority that arrived before it, and its key's job in
    flight (or next) when it became ready: the key's last arrival up to ``ready + grace``."""
    assert job.ready is not None
    known = job.ready + grace  # the worker has it by then (what the grace is for)
    mine = _lower_between(own, rank, known, job.at)
    since = _keyed_since(own, rank, job, grace, answer)
    others = _lower_between(lane, rank, since, job.at) - _lower_between(own, rank, since, job.at)
    return mine + others


def _keyed_since(
    own: Mapping[int, list[float]], rank: int, job: Delivery, grace: float, answer: float
) -> float:
    """From when lower jobs of other keys count against a keyed job (see _keyed_inversions)."""
    assert job.ready is not None
    known = job.ready + grace
    ahead = max(
        (
            _last_before(times, job.at if r <= rank else min(known, job.at))
            for r, times in own.items()
        ),
        default=-math.inf,
    )
    return max(job.ready, ahead + answer) + grace


def _last_before(times: Sequence[float], end: float) -> float:
    """The last of sorted ``times`` before ``end`` (-inf: none)."""
    i = bisect.bisect_left(times, end)
    return times[i - 1] if i else -math.inf


def _lower_between(lane: Mapping[int, list[float]], rank: int, start: float, end: float) -> int:
    """Arrivals in ``lane`` (per rank, sorted) of a rank below ``rank`` in ``(start, end)``."""
    return sum(
        max(0, bisect.bisect_left(times, end) - bisect.bisect_right(times, start))
        for r, times in lane.items()
        if r > rank
    )


def high_waits(log: Sequence[Delivery]) -> list[float]:
    """Seconds from ready to first 2xx of every ``high`` job that carried its enqueue time and
    never failed, sorted."""
    failed = {d.job_id for d in log if not d.ok}
    return sorted(
        d.at - d.ready
        for d in first_ok(log).values()
        if d.priority == "high" and d.ready is not None and d.job_id not in failed
    )


def key_inversions(log: Sequence[Delivery]) -> dict[str, Any]:
    """Invariant 5, order per key: jobs of one key whose first 2xx came after that of a job
    enqueued later (``s``, the key's sequence, carried in the URL) with the same priority (a high
    job of a key is meant to pass its low ones: priority queues are separate). A job that failed
    an attempt (the next of its key may then go first) or had a delay is left out."""
    failed = {d.job_id for d in log if not d.ok}
    keys: defaultdict[tuple[str, str, str | None], list[Delivery]] = defaultdict(list)
    for d in first_ok(log).values():
        if d.key is not None and d.seq is not None:
            keys[(d.topic, d.key, d.priority)].append(d)
    overtaken, worst = 0, ""
    for jobs in keys.values():
        earliest_later = math.inf  # the first delivery of any job later in the key's order
        for d in sorted(jobs, key=lambda d: -(d.seq or 0)):
            if d.at > earliest_later and d.job_id not in failed and not d.delay_s:
                overtaken += 1
                worst = worst or f"{d.topic}/{d.key}#{d.seq}"
            earliest_later = min(earliest_later, d.at)
    return {"inversions": overtaken, "keys": len(keys), "first": worst or None}


def key_overlaps(log: Sequence[Delivery], answer_s: Mapping[str, float]) -> int:
    """Invariant 5's "at most one of a key in flight": requests of a key that arrived while the
    key's previous request was still unanswered. Only topics whose endpoint answers after a
    known delay (``answer_s``, e.g. the sink's ``/slow/<ms>/``) show it; a hang is never answered
    and its topic is left out."""
    arrivals: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    for d in log:
        if d.key is not None and d.topic in answer_s:
            arrivals[(d.topic, d.key)].append(d.at)
    overlaps = 0
    for (topic, _), times in arrivals.items():
        times.sort()
        busy = answer_s[topic] * 0.95  # the sink's timer may fire a little early
        overlaps += sum(1 for a, b in itertools.pairwise(times) if b - a < busy)
    return overlaps
