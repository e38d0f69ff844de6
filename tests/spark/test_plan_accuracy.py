"""``emq bench plan-accuracy`` with the plan job's own dry-run (the shared SparkSession):

* against an ideal server (FIFO, exactly the quota, no delivery time), the figures measured
  from its stamps agree with the dry-run's on every topic of the built-in hour: what the bench
  compares is like for like;
* end to end on the real parts (Redis, ZooKeeper, ``emq api``, a worker, the recording sink)
  with a tiny history: the document is complete, and a topic under its quota is measured
  delivering exactly its arrivals (a property of any machine, however slow, once the last
  intervals are quiet).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import SparkSession

from emq.bench import plan_accuracy
from emq.bench.plan_accuracy import FIGURES, Arrivals, arrivals_of, judge, predict, scenario
from emq.bench.plan_accuracy_fleet import measure
from tests.spark.conftest import rows_for, write_history


def _ideal_server(a: Arrivals) -> tuple[dict[str, tuple[str, float]], dict[str, float]]:
    """Each job sent at its arrival and received when a FIFO server at exactly the quota
    reaches it."""
    sent, received, free_at = {}, {}, 0.0
    for k, t in enumerate(a.times()):
        job = f"{a.topic}-{k}"
        free_at = max(t, free_at)
        sent[job], received[job] = (a.topic, t), free_at
        free_at += 1.0 / a.qps
    return sent, received


def test_an_ideal_server_is_measured_as_the_dry_run_predicts(spark: SparkSession) -> None:
    history = pd.DataFrame(
        [{k: getattr(r, k) for k in ("topic", "interval_start", "interval_s", "enqueued", "quota")}
         for r in scenario()]
    )  # fmt: skip
    arrivals = arrivals_of(history, 60, {})
    sent: dict[str, tuple[str, float]] = {}
    received: dict[str, float] = {}
    for a in arrivals:
        s, r = _ideal_server(a)
        sent |= s
        received |= r
    doc = judge(arrivals, predict(spark, arrivals), measure(arrivals, sent, received, 0.0))
    assert doc["summary"]["pass"], doc["topics"]
    over = doc["topics"]["over"]
    assert over["delivered_per_s"]["predicted"] == 30.0  # served at the quota all hour
    assert over["backlog_peak"]["predicted"] == pytest.approx(720, abs=1)  # 12/s for 60 s
    assert doc["topics"]["burst"]["longest_delay_s"]["predicted"] == pytest.approx(5.0)
    assert doc["topics"]["fits"]["backlog_peak"]["predicted"] == 0.0


def test_the_bench_end_to_end_on_the_real_parts(spark: SparkSession, tmp_path: Path) -> None:
    # 5 one-minute intervals compressed 60x: 5 s. "fits" (40 QPS) gets 20 jobs/s in the first
    # three, then none; "over" (10 QPS) gets 15 jobs/s throughout.
    rows = rows_for("fits", [20, 20, 20, 0, 0], quota=40) + rows_for("over", [15] * 5, quota=10)
    history = write_history(tmp_path / "history", rows)
    doc = plan_accuracy.run(str(history), 60.0, span_s=300, workers=1)
    assert doc["fleet"]["jobs_sent"] == doc["fleet"]["jobs_received"] == 60 + 75
    assert doc["replay_s"] == 5.0 and doc["compress"] == 60.0
    assert set(doc["topics"]) == {"fits", "over"}
    for topic in doc["topics"].values():
        for name in FIGURES:
            figure = topic[name]
            assert set(figure) == {"predicted", "measured", "error", "pass"}
            assert None not in figure.values(), (name, figure)
    summary = doc["summary"]
    assert summary["topics"] == 2 and summary["within"] + len(summary["failed"]) == 2
    assert set(summary["worst_error"]) == set(FIGURES)
    fits = doc["topics"]["fits"]
    assert fits["offered_per_s"] == 12.0  # 60 jobs over 5 s
    assert fits["delivered_per_s"]["predicted"] == 12.0
    assert fits["delivered_per_s"]["measured"] == 12.0  # every job, within the replay
    assert doc["topics"]["over"]["delivered_per_s"]["predicted"] == 10.0
    assert "| fits | 40 | delivered_per_s | 12.0 | 12.0 |" in plan_accuracy.summary(doc)
