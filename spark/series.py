"""The report's series as numbers, for ``plan.json`` (the console draws them; the PNGs of
``report.html`` are the same data).

``series.fleet``: per interval the fleet's offered jobs/s, the jobs/s servable at the proposed
quotas and the replay's queued jobs; ``series.topics``: for the charted topics, offered jobs/s,
the quota of the time and the replay's backlog. A long history is thinned to at most
``POINTS`` points per series, each point the largest value of its run of intervals (a peak is
what a capacity chart must not lose) at the run's first interval start.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

POINTS = 500


def thin(frame: pd.DataFrame, columns: dict[str, str], points: int = POINTS) -> dict[str, Any]:
    """``{"t": [...], name: [...]}`` for each ``columns`` (name -> column of ``frame``), in time
    order, at most ``points`` long (runs of intervals folded to their maximum)."""
    if frame.empty:
        return {"t": [], **{name: [] for name in columns}}
    frame = frame.sort_values("interval_start")
    run = max(1, math.ceil(len(frame) / points))
    bins = np.arange(len(frame)) // run
    grouped = frame.groupby(bins)
    out: dict[str, Any] = {"t": [int(t) for t in grouped["interval_start"].first()]}
    for name, column in columns.items():
        values = grouped[column].max().to_numpy(dtype=float) if column in frame else []
        out[name] = [round(float(v), 3) if math.isfinite(v) else 0.0 for v in values]
    return out


def plan_series(
    fleet: pd.DataFrame, top: pd.DataFrame, top_rows: pd.DataFrame, points: int = POINTS
) -> dict[str, Any]:
    """The ``series`` section of ``plan.json``."""
    fleet_columns = {
        "offered_rps": "offered_rps",
        "served_rps": "served_rps",
        "replayed_backlog": "replayed_backlog",
    }
    topics = []
    grouped = dict(tuple(top_rows.groupby("tid"))) if len(top_rows) else {}
    for t in top.itertuples():
        rows = grouped.get(t.tid)
        if rows is None or not len(rows):
            continue
        numbers = thin(rows, {"rate": "rate", "quota": "current_qps", "backlog": "backlog"}, points)
        names = {"namespace": t.namespace, "tenant": t.tenant, "topic": t.topic}
        topics.append(names | {"proposed_qps": int(t.proposed_qps)} | numbers)
    return {"points": points, "fleet": thin(fleet, fleet_columns, points), "topics": topics}
