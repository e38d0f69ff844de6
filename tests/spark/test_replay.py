"""The window-based replay against a plain step-by-step simulation (gaps included)."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from spark.sizing import replay


def simulate(rows: list[tuple[int, int, float]], quota: float) -> list[float]:
    """Backlog at each row's end: drain over the gap, then add the interval's net input.

    Within an interval arrivals are even, so the backlog moves linearly and stops at zero:
    ``max(0, B + offered - quota * interval)`` is exact there too.
    """
    backlog, end, out = 0.0, None, []
    for start, interval_s, offered in rows:
        if end is not None:
            backlog = max(0.0, backlog - quota * (start - end))
        backlog = max(0.0, backlog + offered - quota * interval_s)
        end = start + interval_s
        out.append(backlog)
    return out


def _frame(
    spark: SparkSession, topics: dict[int, list[tuple[int, int, float]]], quota: dict[int, int]
):
    records = [
        {
            "tid": tid,
            "interval_start": s,
            "interval_s": iv,
            "offered": o,
            "proposed_qps": quota[tid],
        }
        for tid, rows in topics.items()
        for s, iv, o in rows
    ]
    return spark.createDataFrame(pd.DataFrame(records))


def _random_topic(rng: random.Random, start: int, n: int) -> list[tuple[int, int, float]]:
    rows, t = [], start
    for _ in range(n):
        t += 60 * rng.choice([1, 1, 1, 1, 2, 5, 30])  # mostly contiguous, some gaps
        rows.append((t, 60, float(rng.choice([0, 10, 50, 100, 300, 3000, 9000]))))
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_prefix_form_equals_the_recursion(spark: SparkSession, seed: int) -> None:
    rng = random.Random(seed)
    topics = {tid: _random_topic(rng, 1_700_000_000, 300) for tid in range(4)}
    quota = {tid: rng.choice([1, 2, 5, 40]) for tid in topics}
    got = replay(_frame(spark, topics, quota), 1_699_000_000).toPandas()
    for tid, rows in topics.items():
        mine = got[got["tid"] == tid].sort_values("interval_start")["backlog"].tolist()
        assert mine == pytest.approx(simulate(rows, quota[tid]), abs=1e-6)


def test_a_gap_drains_the_queue(spark: SparkSession) -> None:
    # 5 minutes at 200 jobs/s with a quota of 100: 30 000 queued; then nothing recorded for
    # 10 minutes (the queue drains at 100/s in 5 of them); then 1 job.
    rows = [(i * 60, 60, 12_000.0) for i in range(5)] + [(15 * 60, 60, 60.0)]
    got = replay(_frame(spark, {0: rows}, {0: 100}), 0).toPandas().sort_values("interval_start")
    assert got["backlog"].tolist() == [6000.0, 12000.0, 18000.0, 24000.0, 30000.0, 0.0]
    assert got["wait_s"].max() == 300
    # Behind since 0; at the last burst minute (ends at 300 s) 300 s more to drain.
    assert got["behind_s"].max() == 600
