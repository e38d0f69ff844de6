"""One real local SparkSession for the whole test session, and small crafted histories.

Spark costs seconds to start, so every test here shares the session (``local[2]``, quiet logs,
as ``emq plan run`` builds it); the jobs' own ``spark_session`` reuses it instead of starting
another, and leaves it running.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from emq.core.interfaces import HistoryRow
from emq.rigs.spark_cluster import SparkCluster
from spark.history import write_marker, write_rows
from spark.planning import PlanOptions
from spark.run import run
from spark.session import Progress, spark_session

MONDAY = 1_736_121_600  # 2025-01-06 00:00 UTC
DAY = 86_400


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    with spark_session("emq-tests", "local[2]", "2g") as session:
        yield session


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and two workers (1 core, 640 MiB each); stopped even on failure."""
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster


def rows_for(
    topic: str,
    rates: Sequence[float],
    *,
    start: int = MONDAY,
    interval_s: int = 60,
    quota: int = 1000,
    tenant: str = "acme",
    namespace: str = "online",
) -> list[HistoryRow]:
    """One aggregated row per interval at the given offered rates (jobs/s)."""
    rows = []
    for i, rate in enumerate(rates):
        enqueued = round(rate * interval_s)
        delivered = min(enqueued, quota * interval_s)
        rows.append(
            HistoryRow(
                interval_start=start + i * interval_s,
                interval_s=interval_s,
                namespace=namespace,
                tenant=tenant,
                topic=topic,
                source="",
                enqueued=enqueued,
                delivered=delivered,
                throttled_backlog=enqueued - delivered,
                p50_ms=20.0 if delivered else 0.0,
                p99_ms=90.0 if delivered else 0.0,
                quota=quota,
                groups=-(-quota // 150),
            )
        )
    return rows


def write_history(path: Path, rows: list[HistoryRow], *, aggregated: bool = True) -> Path:
    rows = sorted(rows, key=lambda r: (r.interval_start, r.namespace, r.tenant, r.topic))
    write_rows(rows, path)
    if aggregated:
        write_marker(path, source="test", aggregated=True)
    return path


def plan(spark: SparkSession, history: Path, out: Path, **options: Any) -> dict[str, Any]:
    """Run the sizing job on the shared session; plan.json with topics keyed by name."""
    summary = run(
        spark, str(history), str(out), PlanOptions(**options), Progress(None, 6, quiet=True)
    )
    document = json.loads((out / "plan.json").read_text())
    document["by_topic"] = {t["topic"]: t for t in document["topics"]}
    document["summary"] = summary
    return document
