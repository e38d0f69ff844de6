"""The driver side of the sizing job: per-topic results in, quotas, growth and fleet sizes out.

Inputs are the small pandas frames that :mod:`spark.sizing` collects (one row per topic, per
topic-day, per interval); the formulas are :mod:`capacity.plan`'s, so the worker, the API and
the planner share one split rule and one rounding.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from capacity.plan import (
    DEFAULT_HEADROOM,
    DEFAULT_JOB_BYTES,
    DEFAULT_SHARD_MEMORY_BYTES,
    DEFAULT_SHARD_OPS,
    DEFAULT_WORKER_QPS,
    change_pct,
    growth_per_week,
    redis_memory_bytes,
    redis_ops_per_s,
    redis_shards,
    round_quota,
    size_topic,
    workers_needed,
)
from capacity.split import DEFAULT_MAX_GROUP_QPS

DAY_S = 86_400
# Quotas the dry-run also tries, as multiples of the proposed one, to say what quota would have
# kept a topic's longest wait within the target (one extra running minimum each).
LADDER = (1.5, 2.0, 3.0, 5.0, 8.0)
DEFAULT_TARGET_WAIT_S = 60.0
GROWING = 0.05  # a trend of 5% a week or more (either way) is reported as growth / shrinkage
MIN_GROWTH_DAYS = 3
PROJECTION_WEEKS = 4


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """The knobs of one plan (defaults in :mod:`capacity.plan`)."""

    headroom: float = DEFAULT_HEADROOM
    max_group_qps: int = DEFAULT_MAX_GROUP_QPS
    worker_qps: float = DEFAULT_WORKER_QPS
    worker_qps_source: str = "default"
    spare_workers: int = 1
    job_bytes: int = DEFAULT_JOB_BYTES
    shard_ops: float = DEFAULT_SHARD_OPS
    shard_memory_bytes: int = DEFAULT_SHARD_MEMORY_BYTES
    top: int = 8
    target_wait_s: float = DEFAULT_TARGET_WAIT_S

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def intervals(summary: pd.DataFrame, end_s: int) -> pd.Series:
    """Per topic, its intervals from its first recorded one to the end of the history."""
    return (end_s - summary["first_s"]) // summary["interval_s"]


def use_delivered(summary: pd.DataFrame) -> pd.Series:
    """Per topic: True when its history has no ``enqueued`` counts, so ``delivered`` is the
    offered load."""
    return summary["enqueued"].fillna(0) <= 0


def size_topics(summary: pd.DataFrame, rates: pd.DataFrame, o: PlanOptions) -> pd.DataFrame:
    """Join the summary with the rate quantiles and propose a quota and groups per topic."""
    topics = summary.merge(rates, on="tid", how="left")
    rate_cols = ["peak_rps", "p50_rps", "p99_rps", "p999_rps", "mean_rps"]
    topics[rate_cols] = topics[rate_cols].fillna(0.0)
    topics["rate_source"] = np.where(topics["enqueued"] > 0, "enqueued", "delivered")
    offered = np.where(topics["enqueued"] > 0, topics["enqueued"], topics["delivered"])
    topics["offered"] = offered
    topics["idle"] = offered <= 0
    sized = [
        size_topic(
            float(p99),
            int(current),
            headroom=o.headroom,
            max_group_qps=o.max_group_qps,
            idle=bool(idle),
        )
        for p99, current, idle in zip(
            topics["p99_rps"], topics["current_qps"].fillna(0), topics["idle"], strict=True
        )
    ]
    topics["proposed_qps"] = [s.qps for s in sized]
    topics["proposed_groups"] = [s.groups for s in sized]
    topics["group_qps"] = [list(s.group_qps) for s in sized]
    topics["change_pct"] = [
        change_pct(int(c), int(p))
        for c, p in zip(topics["current_qps"].fillna(0), topics["proposed_qps"], strict=True)
    ]
    return topics.sort_values("tid").reset_index(drop=True)


def growth(daily: pd.DataFrame, summary: pd.DataFrame, end_s: int) -> pd.DataFrame:
    """Per topic, the linear trend of its daily offered volume, as a fraction per week.

    ``daily`` has each interval clipped at the topic's p99 (see ``sizing.daily_offered``).
    Only whole days are used: from the topic's first whole day to the last whole day of the
    history. With both weekdays and weekend days present the fit has a weekend term, so a
    quiet weekend at the end of a week is not mistaken for decline. ``None`` with fewer than
    three whole days.
    """
    first_day = np.ceil(summary["first_s"].to_numpy(dtype=float) / DAY_S).astype("int64")
    last_day = end_s // DAY_S - 1  # the last day that ends by end_s
    days = np.arange(int(first_day.min()) if len(first_day) else 0, last_day + 1)
    table = daily.pivot_table(index="tid", columns="day", values="offered", aggfunc="sum")
    table = table.reindex(index=summary["tid"], columns=days).fillna(0.0) / DAY_S
    valid = days[None, :] >= first_day[:, None]
    values = table.to_numpy(dtype=float)
    result = np.full(len(table), np.nan)
    patterns: dict[bytes, list[int]] = {}
    for i, row in enumerate(valid):
        patterns.setdefault(row.tobytes(), []).append(i)
    for rows in patterns.values():
        mask = valid[rows[0]]
        if mask.sum() < MIN_GROWTH_DAYS:
            continue
        result[rows] = _weekly_trend(days[mask], values[np.ix_(rows, mask)])
    out = summary[["tid"]].copy()
    out["growth_per_week"] = result
    return out


def _weekly_trend(days: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of ``y`` (topics x days) over days, relative to the mean, x7."""
    x = (days - days.mean()).astype(float)
    weekend = (((days + 3) % 7) >= 5).astype(float)  # 1970-01-01 was a Thursday
    columns = [np.ones_like(x), x]
    if 0 < weekend.sum() < len(days) and len(days) >= MIN_GROWTH_DAYS + 1:
        columns.append(weekend)
    beta, *_ = np.linalg.lstsq(np.column_stack(columns), y.T, rcond=None)
    means = y.mean(axis=1)
    return np.array(
        [
            g if g is not None else np.nan
            for g in (
                growth_per_week(float(b), float(m)) for b, m in zip(beta[1], means, strict=True)
            )
        ]
    )


def ladder(topics: pd.DataFrame) -> list[str]:
    """Add the candidate quotas (``try_0``...) to ``topics``; returns their column names."""
    names = []
    for i, factor in enumerate(LADDER):
        name = f"try_{i}"
        topics[name] = [round_quota(q * factor) for q in topics["proposed_qps"]]
        names.append(name)
    return names


def advise(
    topics: pd.DataFrame, slow: pd.DataFrame, names: list[str], target_wait_s: float
) -> pd.DataFrame:
    """Per topic, the smallest quota tried whose replay keeps the longest wait within the target:
    the proposed one if it does; for the ``slow`` topics (replayed again at each ``names``
    quota) the first that does, or ``None`` if even the largest does not."""
    found: dict[int, int | None] = {}
    for row in slow.itertuples():
        found[row.tid] = None
        for name in names:
            quota = getattr(row, name)
            if getattr(row, f"max_backlog_{name}") / quota <= target_wait_s:
                found[row.tid] = int(quota)
                break
    best = [
        found.get(tid) if tid in found else int(qps)
        for tid, qps in zip(topics["tid"], topics["proposed_qps"], strict=True)
    ]
    out = topics.copy()
    out["qps_for_target_wait"] = pd.array(best, dtype="Int64")
    return out


def add_growth(topics: pd.DataFrame, trend: pd.DataFrame) -> pd.DataFrame:
    out = topics.merge(trend, on="tid", how="left")
    g = out["growth_per_week"]
    out["trend"] = np.select([g >= GROWING, g <= -GROWING], ["growing", "shrinking"], "steady")
    out.loc[g.isna(), "trend"] = "unknown"
    projected = out["p99_rps"] * (1 + PROJECTION_WEEKS * g.fillna(0.0))
    out[f"p99_rps_in_{PROJECTION_WEEKS}w"] = projected.clip(lower=0.0)
    return out


def nearest_rank(values: np.ndarray, p: float, n: int) -> float:
    """The nearest-rank ``p`` quantile of ``values`` padded with zeros to ``n`` values."""
    if n <= 0 or len(values) == 0:
        return 0.0
    rank = math.ceil(round(p * n, 9))  # 1-based, ascending
    from_top = n - rank + 1
    ordered = np.sort(values)[::-1]
    return float(ordered[from_top - 1]) if from_top <= len(ordered) else 0.0


def size_fleet(
    fleet: pd.DataFrame,
    topics: pd.DataFrame,
    o: PlanOptions,
    intervals: int,
) -> dict[str, Any]:
    """Workers (N+1) and Redis shards for the history's busiest interval, with headroom.

    Demand is the busiest interval's total offered rate x headroom, but never more than the sum
    of the proposed quotas (the fleet is never asked for more than every quota at once).
    """
    offered = fleet["offered_rps"].to_numpy(dtype=float)
    peak = float(offered.max()) if len(offered) else 0.0
    sum_proposed = int(topics["proposed_qps"].sum())
    demand = min(peak * o.headroom, float(sum_proposed))
    workers = workers_needed(demand, o.worker_qps, o.spare_workers)
    active = workers - o.spare_workers
    capacity = active * o.worker_qps
    served = fleet["served_rps"].to_numpy(dtype=float)
    utilisation = served / capacity if capacity else served * 0
    # The most jobs queued at once across the fleet in the replay (not the sum of each topic's
    # worst, which never happen together).
    backlog = float(fleet["replayed_backlog"].max()) if "replayed_backlog" in fleet else 0.0
    ops = redis_ops_per_s(demand)
    memory = redis_memory_bytes(backlog, demand, o.job_bytes)
    return {
        "workers": workers,
        "active_workers": active,
        "spare_workers": o.spare_workers,
        "worker_qps": o.worker_qps,
        "worker_qps_source": o.worker_qps_source,
        "peak_offered_rps": round(peak, 3),
        "p99_offered_rps": round(nearest_rank(offered, 0.99, intervals), 3),
        "mean_offered_rps": round(float(offered.sum()) / intervals, 3) if intervals else 0.0,
        "demand_qps": round(demand, 3),
        "capacity_qps": round(capacity, 3),
        "peak_utilisation": round(float(utilisation.max()), 4) if len(utilisation) else 0.0,
        "mean_utilisation": round(float(utilisation.sum()) / intervals, 4) if intervals else 0.0,
        "current_quota_sum": int(topics["current_qps"].fillna(0).sum()),
        "proposed_quota_sum": sum_proposed,
        "current_groups": int(topics["current_groups"].fillna(0).sum()),
        "proposed_groups": int(topics["proposed_groups"].sum()),
        "redis_shards": redis_shards(ops, memory, o.shard_ops, o.shard_memory_bytes),
        "redis_ops_per_s": round(ops, 1),
        "redis_memory_bytes": int(memory),
        "replayed_backlog_peak": round(backlog, 1),
    }


def _number(value: Any, digits: int = 3) -> float | int | None:
    """A JSON-safe number: NaN and missing become ``None``."""
    if value is None or value is pd.NA:
        return None
    f = float(value)
    if math.isnan(f) or math.isinf(f):
        return None
    return int(f) if f.is_integer() and abs(f) < 2**53 else round(f, digits)


def topic_entry(t: Any) -> dict[str, Any]:
    """One topic of plan.json (``t`` is a row of the topics frame)."""
    rows = max(1, int(t.intervals))
    return {
        "namespace": t.namespace,
        "tenant": t.tenant,
        "topic": t.topic,
        "qps": int(t.proposed_qps),
        "groups": int(t.proposed_groups),
        "group_qps": [int(q) for q in t.group_qps],
        "current": {"qps": _number(t.current_qps), "groups": _number(t.current_groups)},
        "change_pct": _number(t.change_pct, 1),
        "idle": bool(t.idle),
        "rate_source": t.rate_source,
        "rates": {
            "mean": _number(t.mean_rps),
            "p50": _number(t.p50_rps),
            "p99": _number(t.p99_rps),
            "p999": _number(t.p999_rps),
            "peak": _number(t.peak_rps),
            f"p99_in_{PROJECTION_WEEKS}w": _number(getattr(t, f"p99_rps_in_{PROJECTION_WEEKS}w")),
        },
        "growth_per_week": _number(t.growth_per_week, 4),
        "trend": t.trend,
        "dry_run": {
            "max_backlog": _number(t.max_backlog, 1),
            "max_wait_s": _number(t.max_wait_s, 1),
            "longest_behind_s": _number(t.longest_behind_s, 1),
            "worst_at": _number(t.worst_at),
            "behind_pct": _number(100.0 * t.behind_rows / rows, 2),
            "qps_for_target_wait": _number(t.qps_for_target_wait),
        },
        "observed": {
            "max_throttled_backlog": _number(t.observed_max_backlog),
            "enqueued": _number(t.enqueued),
            "delivered": _number(t.delivered),
            "failed": _number(t.failed),
            "retried": _number(t.retried),
            "dead_lettered": _number(t.dead_lettered),
            "p50_ms": _number(t.p50_ms, 2),
            "p99_ms": _number(t.p99_ms, 2),
        },
    }
