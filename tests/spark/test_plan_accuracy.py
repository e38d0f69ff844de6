"""``emq bench plan-accuracy`` end to end with the plan job's own dry-run (the shared
SparkSession) and the real parts (Redis, ZooKeeper, ``emq api``, a worker, the recording sink)
on a tiny history: the document is complete; a topic under its quota is measured delivering
exactly its arrivals (a property of any machine, however slow, once the last intervals are
quiet); and an ideal server (FIFO, exactly the quota, no delivery time) is measured from its
stamps as the dry-run predicts on every topic, so what the bench compares is like for like.
One test: the Spark dry-run and the fleet are the costly parts, each done once."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from pyspark.sql import SparkSession

from emq.bench import plan_accuracy
from emq.bench.plan_accuracy import FIGURES, judge
from emq.bench.plan_accuracy_fleet import measure
from spark.accuracy import Arrivals, arrivals_of
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

    # An ideal server (FIFO, exactly the quota, no delivery time) is measured as predicted on
    # every topic: what the bench compares is like for like.
    arrivals = arrivals_of(pd.DataFrame([_fields(r) for r in rows]), 60.0, {}, span_s=300)
    predicted = {
        t: {name: f[name]["predicted"] for name in FIGURES} for t, f in doc["topics"].items()
    }
    sent: dict[str, tuple[str, float]] = {}
    received: dict[str, float] = {}
    for a in arrivals:
        s, r = _ideal_server(a)
        sent |= s
        received |= r
    ideal = judge(arrivals, predicted, measure(arrivals, sent, received, 0.0))
    assert ideal["summary"]["pass"], ideal["topics"]
    assert ideal["topics"]["over"]["backlog_peak"]["predicted"] == 25.0  # 5 jobs/s over, 5 s


def _fields(row: object) -> dict[str, object]:
    return {
        k: getattr(row, k) for k in ("topic", "interval_start", "interval_s", "enqueued", "quota")
    }
