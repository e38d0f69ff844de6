"""The sizing job on small histories whose answers are known, on real PySpark (local)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from capacity import split_quota
from emq.core import schema
from emq.core.interfaces import HistoryRow
from emq.core.plan_schema import PlanIn
from tests.spark.conftest import DAY, MONDAY, plan, rows_for, write_history

WEEK = 7 * DAY // 60  # one week of 1-minute intervals
BURST_AT = MONDAY + 3 * DAY + 12 * 3600  # Thursday 12:00


def _peaky() -> list[float]:
    """100 jobs/s, and 1000 from 13:00 to 14:00 every day (4% of the time: the p99)."""
    return [1000.0 if 13 * 60 <= i % 1440 < 14 * 60 else 100.0 for i in range(WEEK)]


def _bursty() -> list[float]:
    """80 jobs/s; 100 for 100 minutes on Tuesday (3.5% of the time: p99 = 100); 200 for ten
    minutes on Thursday at noon (0.1%: above the p99, so the replay queues it)."""
    rates = [80.0] * WEEK
    for i in range(1440 + 360, 1440 + 460):
        rates[i] = 100.0
    burst = (BURST_AT - MONDAY) // 60
    for i in range(burst, burst + 10):
        rates[i] = 200.0
    return rates


@pytest.fixture(scope="module")
def known(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("known")
    rows = (
        rows_for("steady", [100.0] * WEEK, quota=200)
        + rows_for("peaky", _peaky(), quota=700)
        + rows_for("idle", [0.0] * WEEK, quota=50)
        + rows_for("growing", [100.0 + 100.0 * i / WEEK for i in range(WEEK)], quota=300)
        + rows_for("bursty", _bursty(), quota=1000)
    )
    history = write_history(base / "history", rows)
    return plan(spark, history, base / "plan", headroom=1.0, top=3, worker_qps=500.0)


def test_constant_100_qps_is_one_group(known: dict[str, Any]) -> None:
    t = known["by_topic"]["steady"]
    assert t["rates"]["p99"] == t["rates"]["peak"] == t["rates"]["p50"] == 100
    assert (t["qps"], t["groups"], t["group_qps"]) == (100, 1, [100])
    assert t["current"] == {"qps": 200, "groups": 2}
    assert t["change_pct"] == -50.0
    assert t["trend"] == "steady" and abs(t["growth_per_week"]) < 0.001
    assert t["dry_run"]["max_backlog"] == 0


def test_a_topic_peaking_at_1000_qps_is_seven_groups_at_headroom_one(known: dict[str, Any]) -> None:
    t = known["by_topic"]["peaky"]
    assert t["rates"]["peak"] == t["rates"]["p99"] == 1000
    assert t["rates"]["p50"] == 100
    assert (t["qps"], t["groups"]) == (1000, 7)
    assert t["group_qps"] == list(split_quota(1000))


def test_an_idle_topic_keeps_its_quota(known: dict[str, Any]) -> None:
    t = known["by_topic"]["idle"]
    assert t["idle"] is True
    assert (t["qps"], t["groups"]) == (50, 1)
    assert t["rates"]["peak"] == 0 and t["trend"] == "unknown"
    assert known["summary"]["changes"]["idle"] == 1


def test_growth_is_detected(known: dict[str, Any]) -> None:
    t = known["by_topic"]["growing"]
    # 100 -> 200 jobs/s over the week: +14.3/day on a mean of 150, i.e. +67% a week.
    assert t["growth_per_week"] == pytest.approx(0.667, abs=0.01)
    assert t["trend"] == "growing"
    assert t["rates"]["p99_in_4w"] > t["rates"]["p99"]


def test_the_dry_run_replays_a_burst_exactly(known: dict[str, Any]) -> None:
    t = known["by_topic"]["bursty"]
    assert (t["rates"]["p99"], t["qps"]) == (100, 100)
    run = t["dry_run"]
    # Ten minutes at 200 jobs/s against a quota of 100: 100 x 600 = 60 000 jobs queued.
    assert run["max_backlog"] == 60_000
    assert run["max_wait_s"] == 600  # the last job queued waits 60 000 / 100 s
    assert run["worst_at"] == BURST_AT + 600
    # Back at 80 jobs/s the queue drains 1 200 jobs a minute: empty 50 minutes after the burst.
    # Longest behind = from the burst's start to the last interval with a backlog (49 minutes
    # after it) plus that backlog at the full quota: 600 + 49 x 60 + 1 200 / 100.
    assert run["longest_behind_s"] == 3552
    assert run["behind_pct"] == pytest.approx(100 * 59 / WEEK, abs=0.01)


def test_fleet_sizing_is_n_plus_one(known: dict[str, Any]) -> None:
    fleet = known["fleet"]
    assert fleet["spare_workers"] == 1
    assert fleet["workers"] == fleet["active_workers"] + 1
    assert (
        fleet["active_workers"] * 500 >= fleet["demand_qps"] > (fleet["active_workers"] - 1) * 500
    )
    assert fleet["demand_qps"] <= fleet["proposed_quota_sum"]
    assert fleet["redis_shards"] >= 1
    assert fleet["proposed_quota_sum"] == 100 + 1000 + 50 + 200 + 100
    # Memory is sized on the most jobs queued at once in the replay: the burst's 60 000.
    assert fleet["replayed_backlog_peak"] == 60_000


def test_parquet_detail_and_report(known: dict[str, Any]) -> None:
    out = Path(known["summary"]["plan"]).parent
    topics = pq.read_table(out / "topics.parquet").to_pylist()
    assert {t["topic"] for t in topics} == {"steady", "peaky", "idle", "growing", "bursty"}
    fleet = pq.read_table(out / "fleet.parquet")
    assert fleet.num_rows == WEEK
    page = (out / "report.html").read_text()
    images = re.findall(r"<img[^>]*src='([^']+)'", page)
    assert {"fleet.png", "diurnal.png", "quotas.png"} <= set(images)
    assert sum(name.startswith("topic_") for name in images) == 3  # --top 3
    for name in images:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert "Quota dry-run" in page and "acme" in page


def test_plan_json_has_what_apply_needs(known: dict[str, Any]) -> None:
    out = Path(known["summary"]["plan"])
    document = json.loads(out.read_text())
    assert document["format"] == 1
    for t in document["topics"]:
        assert {"namespace", "tenant", "topic", "qps", "groups"} <= set(t)


def test_plan_json_carries_the_report_series_thinned_and_the_api_takes_it(
    known: dict[str, Any],
) -> None:
    document = json.loads(Path(known["summary"]["plan"]).read_text())
    fleet = document["series"]["fleet"]
    # a week of minutes folded to at most 500 points, each the peak of its run
    assert 0 < len(fleet["t"]) <= 500
    assert len(fleet["offered_rps"]) == len(fleet["t"]) == len(fleet["replayed_backlog"])
    assert max(fleet["offered_rps"]) == pytest.approx(document["fleet"]["peak_offered_rps"])
    charted = document["series"]["topics"]
    assert len(charted) == 3  # --top 3
    assert all(len(s["rate"]) == len(s["t"]) == len(s["quota"]) for s in charted)
    # the plan as the API validates it (POST /v1/plans): nothing refused, the series kept
    kept = schema.validate(PlanIn, document)
    assert kept.series is not None and len(kept.series.topics) == 3


def _several_sources(topic: str) -> list[HistoryRow]:
    """The API's enqueued rows and two workers' delivered rows of one day."""
    rows = []
    for i in range(1440):
        common = {"interval_start": MONDAY + i * 60, "interval_s": 60, "namespace": "online"}
        common |= {"tenant": "acme", "topic": topic, "quota": 150, "groups": 1}
        rows.append(HistoryRow(source="api", enqueued=6000, **common))
        rows.append(HistoryRow(source="w1", delivered=4000, p50_ms=10, p99_ms=50, **common))
        rows.append(
            HistoryRow(
                source="w2", delivered=2000, p50_ms=40, p99_ms=80, throttled_backlog=3, **common
            )
        )
    return rows


@pytest.fixture(scope="module")
def edge_cases(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One day of three unusual topics in one unmarked history, planned once (each topic is
    sized on its own rows): rows of several sources, deliveries only, and a sparse recorder."""
    old = [
        HistoryRow(MONDAY + i * 60, 60, "online", "acme", "old", "w1", delivered=3000, quota=50)
        for i in range(1440)
    ]
    # Recorders write only active topics: "sparse" is active 1 minute in 10.
    sparse = [r for r in rows_for("sparse", [60.0] * 1440) if (r.interval_start // 60) % 10 == 0]
    rows = _several_sources("mixed") + old + sparse + rows_for("steady", [10.0] * 1440)
    base = tmp_path_factory.mktemp("edge-cases")
    history = write_history(base / "history", rows, aggregated=False)
    by_topic: dict[str, Any] = plan(spark, history, base / "plan", headroom=1.0)["by_topic"]
    return by_topic


def test_rows_of_several_sources_are_folded(edge_cases: dict[str, Any]) -> None:
    """Unmarked rows of the API and two workers: the job folds them per interval."""
    t = edge_cases["mixed"]
    assert t["rates"]["p99"] == 100  # from enqueued, not delivered + enqueued
    assert t["rate_source"] == "enqueued"
    assert t["observed"]["delivered"] == 6000 * 1440
    assert t["observed"]["p50_ms"] == 20  # delivered-weighted: (10 x 4000 + 40 x 2000) / 6000
    assert t["observed"]["p99_ms"] == 80  # the largest
    assert t["observed"]["max_throttled_backlog"] == 3


def test_history_without_enqueue_counts_sizes_on_deliveries(edge_cases: dict[str, Any]) -> None:
    t = edge_cases["old"]
    assert (t["rate_source"], t["rates"]["p99"], t["qps"]) == ("delivered", 50, 50)


def test_intervals_without_rows_count_as_zero(edge_cases: dict[str, Any]) -> None:
    """A topic active 1 minute in 10 has a p50 of 0."""
    t = edge_cases["sparse"]
    assert t["rates"]["p50"] == 0
    assert t["rates"]["p99"] == 60  # 10% of the intervals are at 60: above the top 1%
    assert t["rates"]["mean"] == pytest.approx(6.0, abs=0.05)
    assert edge_cases["steady"]["rates"]["p50"] == 10


def test_an_empty_or_missing_history_is_one_clear_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    from emq.core.errors import InvalidInput

    with pytest.raises(InvalidInput, match="does not exist"):
        plan(spark, tmp_path / "nowhere", tmp_path / "plan")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidInput, match="no history rows"):
        plan(spark, tmp_path / "empty", tmp_path / "plan")
