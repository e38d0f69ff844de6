"""Capacity-plan formulas: from measured rates to quotas, groups, workers and Redis shards.

Pure and synchronous, shared by the Spark sizing job (``spark/plan_job.py``, which applies them
on the driver to per-topic aggregates) and ``emq plan apply``. Every number is a rate in jobs per
second unless its name says otherwise.

* **Recommended quota**: ``p99 x headroom`` rounded *up* to a 1-2-5 step no coarser than 5% of
  the value (137 → 140, 1003 → 1050, 12.2 → 13), at least 1. An idle topic keeps its quota.
* **Groups**: the split rule of :mod:`capacity.split` (``ceil(qps / max_group_qps)``).
* **Workers**: ``ceil(demand / worker_qps)`` active workers plus ``spare`` (N+1).
* **Redis shards**: enough for both the operations per second and the memory of the queued jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from capacity.split import DEFAULT_MAX_GROUP_QPS, group_count, split_quota
from emq.core.errors import InvalidInput

DEFAULT_HEADROOM = 1.2
# A conservative figure for one worker on 2 cores pushing to fast endpoints; measure yours with
# a benchmark and pass it to the planner (``--worker-qps`` / ``--worker-bench``).
DEFAULT_WORKER_QPS = 1_000.0
# Redis commands per delivered job, amortised: the API's XADD, the fetcher's share of a batched
# XREAD, the checkpoint write and the trim (both batched per group, so less than one each).
REDIS_OPS_PER_JOB = 4.0
# One Redis primary: a single-threaded server with pipelining does several 100k simple commands
# a second; plan for 80k so latency stays low.
DEFAULT_SHARD_OPS = 80_000.0
DEFAULT_SHARD_MEMORY_BYTES = 8 * 1024**3
DEFAULT_JOB_BYTES = 1_024  # an average job envelope (URL, headers, body)
STREAM_OVERHEAD = 1.5  # a stream entry costs about 1.5x its payload (ids, listpack framing)
RETAINED_S = 60.0  # delivered entries wait about this long for their checkpoint and trim
BIG_DECREASE = 0.5  # lowering a quota below half of what it was needs --force


def _positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidInput(name, f"must be a positive number, got {value!r}")


def quota_step(rate: float) -> int:
    """The rounding step for a quota near ``rate``: the largest 1-2-5 step ≤ 5% of it (≥ 1)."""
    limit = rate / 20
    if limit < 1:
        return 1
    exponent = math.floor(math.log10(limit))
    for mantissa in (5, 2, 1):
        step = mantissa * 10**exponent
        if step <= limit:
            return int(step)
    return int(10**exponent)  # pragma: no cover: mantissa 1 always fits


def round_quota(rate: float) -> int:
    """``rate`` rounded up to a sensible quota (at least 1).

    Sub-1e-6 noise is ignored so that ``100 x 1.2 = 120.00000000000001`` stays 120.
    """
    if math.isnan(rate) or rate <= 0:
        return 1
    step = quota_step(rate)
    return max(1, math.ceil(round(rate / step, 6)) * step)


def recommended_quota(p99_rps: float, headroom: float = DEFAULT_HEADROOM) -> int:
    """The quota to propose for a topic whose p99 per-second rate is ``p99_rps``."""
    _positive("headroom", headroom)
    return round_quota(p99_rps * headroom)


@dataclass(frozen=True, slots=True)
class TopicSizing:
    """What the plan proposes for one topic."""

    qps: int
    groups: int
    group_qps: tuple[int, ...]
    idle: bool


def size_topic(
    p99_rps: float,
    current_qps: int,
    *,
    headroom: float = DEFAULT_HEADROOM,
    max_group_qps: int = DEFAULT_MAX_GROUP_QPS,
    idle: bool = False,
) -> TopicSizing:
    """Quota and group split for one topic.

    An ``idle`` topic (nothing offered in the whole history) keeps its current quota: there is
    no evidence to size it on, and its queues cost next to nothing while idle.
    """
    kept = max(1, current_qps)
    qps = kept if idle else recommended_quota(p99_rps, headroom)
    groups = split_quota(qps, max_group_qps)
    return TopicSizing(qps=qps, groups=group_count(qps, max_group_qps), group_qps=groups, idle=idle)


def workers_needed(demand_qps: float, worker_qps: float, spare: int = 1) -> int:
    """Workers for ``demand_qps`` deliveries a second, plus ``spare`` (N+1); at least 1 + spare."""
    _positive("worker_qps", worker_qps)
    if spare < 0:
        raise InvalidInput("spare", f"must be 0 or more, got {spare!r}")
    active = max(1, math.ceil(round(max(0.0, demand_qps) / worker_qps, 6)))
    return active + spare


def redis_ops_per_s(jobs_per_s: float, ops_per_job: float = REDIS_OPS_PER_JOB) -> float:
    """Redis commands a second for ``jobs_per_s`` jobs flowing through (enqueue to trim)."""
    return max(0.0, jobs_per_s) * ops_per_job


def redis_memory_bytes(
    backlog_jobs: float,
    jobs_per_s: float,
    job_bytes: float = DEFAULT_JOB_BYTES,
    retained_s: float = RETAINED_S,
) -> float:
    """Memory for the queued jobs plus the delivered ones not yet trimmed."""
    jobs = max(0.0, backlog_jobs) + max(0.0, jobs_per_s) * retained_s
    return jobs * job_bytes * STREAM_OVERHEAD


def redis_shards(
    ops_per_s: float,
    memory_bytes: float,
    shard_ops: float = DEFAULT_SHARD_OPS,
    shard_memory_bytes: float = DEFAULT_SHARD_MEMORY_BYTES,
) -> int:
    """Redis primaries needed for both the load and the memory (at least 1)."""
    _positive("shard_ops", shard_ops)
    _positive("shard_memory_bytes", shard_memory_bytes)
    by_ops = math.ceil(round(max(0.0, ops_per_s) / shard_ops, 6))
    by_memory = math.ceil(round(max(0.0, memory_bytes) / shard_memory_bytes, 6))
    return max(1, by_ops, by_memory)


def change_pct(current: int, proposed: int) -> float | None:
    """The change from ``current`` to ``proposed`` in percent (``None`` when current is 0)."""
    if current <= 0:
        return None
    return round((proposed - current) * 100.0 / current, 1)


def is_big_decrease(current: int, proposed: int) -> bool:
    """True when ``proposed`` lowers ``current`` by more than half (apply needs --force)."""
    return current > 0 and proposed < current * BIG_DECREASE


def growth_per_week(slope_per_day: float, mean: float) -> float | None:
    """A linear trend of ``slope_per_day`` as a fraction of ``mean`` per week (None if idle)."""
    if mean <= 0 or math.isnan(slope_per_day):
        return None
    return slope_per_day * 7.0 / mean


__all__ = [
    "BIG_DECREASE",
    "DEFAULT_HEADROOM",
    "DEFAULT_JOB_BYTES",
    "DEFAULT_SHARD_MEMORY_BYTES",
    "DEFAULT_SHARD_OPS",
    "DEFAULT_WORKER_QPS",
    "REDIS_OPS_PER_JOB",
    "TopicSizing",
    "change_pct",
    "growth_per_week",
    "is_big_decrease",
    "quota_step",
    "recommended_quota",
    "redis_memory_bytes",
    "redis_ops_per_s",
    "redis_shards",
    "round_quota",
    "size_topic",
    "workers_needed",
]
