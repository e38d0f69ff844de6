"""Synthetic history: its size, its shape, its realism, and that it plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from emq.core.errors import InvalidInput
from spark.history import read_history, read_marker
from spark.synth import SynthOptions, history_frame, synthesize
from tests.spark.conftest import MONDAY, plan

OPTIONS = SynthOptions(topics=200, days=14, interval_s=1800, seed=3, start_s=MONDAY)


@pytest.fixture(scope="module")
def synth(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("synth") / "history"
    result = synthesize(spark, OPTIONS, str(out))
    frame = read_history(spark, str(out)).toPandas()
    return {"out": out, "result": result, "frame": frame}


def test_every_topic_has_every_interval(synth: dict[str, Any]) -> None:
    frame: pd.DataFrame = synth["frame"]
    assert synth["result"]["rows"] == len(frame) == 200 * 14 * 48
    per_topic = frame.groupby(["namespace", "tenant", "topic"]).size()
    assert len(per_topic) == 200 and set(per_topic) == {14 * 48}
    dates = sorted(p.name for p in Path(synth["out"]).glob("date=*"))
    assert dates[0] == "date=2025-01-06" and len(dates) == 14
    assert read_marker(synth["out"])["aggregated"] is True


def test_the_columns_are_consistent(synth: dict[str, Any]) -> None:
    f: pd.DataFrame = synth["frame"]
    assert (f["delivered"] <= f["enqueued"]).all()
    assert (f["delivered"] <= f["quota"] * f["interval_s"]).all()
    assert (f["throttled_backlog"] == f["enqueued"] - f["delivered"]).all()
    assert (f["failed"] <= f["delivered"]).all()
    assert (f["retried"] + f["dead_lettered"] == f["failed"]).all()
    assert (f["groups"] == -(-f["quota"] // 150)).all()
    assert ((f["p99_ms"] >= f["p50_ms"]) & (f["p50_ms"] >= 0)).all()
    assert set(f["namespace"]) == {"online", "sandbox"}


def test_traffic_has_daily_and_weekly_cycles(synth: dict[str, Any]) -> None:
    f: pd.DataFrame = synth["frame"]
    t = pd.to_datetime(f["interval_start"], unit="s", utc=True)
    rate = f["enqueued"] / f["interval_s"]
    weekdays = rate[t.dt.dayofweek < 5].groupby(t.dt.hour[t.dt.dayofweek < 5]).sum()
    assert weekdays.max() / weekdays.min() > 1.5  # busy afternoons (UTC), quiet nights
    by_day = rate.groupby(t.dt.dayofweek).sum()
    assert by_day[[5, 6]].mean() < 0.9 * by_day[[0, 1, 2, 3, 4]].mean()  # quieter weekends


def test_a_few_hot_tenants_and_a_few_idle_topics(synth: dict[str, Any]) -> None:
    f: pd.DataFrame = synth["frame"]
    per_topic = f.groupby("topic")["enqueued"].sum()
    idle = (per_topic == 0).sum()
    assert 1 <= idle <= 0.1 * len(per_topic)
    per_tenant = f.groupby("tenant")["enqueued"].sum().sort_values(ascending=False)
    top = per_tenant.head(max(1, len(per_tenant) // 20)).sum()
    assert top > 0.2 * per_tenant.sum()  # the hottest 5% of tenants carry over a fifth


def test_the_same_seed_gives_the_same_history(spark: SparkSession) -> None:
    small = SynthOptions(topics=20, days=1, interval_s=3600, seed=9, start_s=MONDAY)
    columns = ["interval_start", "topic", "enqueued", "p50_ms"]

    def collect(o: SynthOptions) -> list[tuple[Any, ...]]:
        rows = history_frame(spark, o).select(*columns).orderBy(*columns[:2]).collect()
        return [tuple(r) for r in rows]

    assert collect(small) == collect(small)
    other = SynthOptions(topics=20, days=1, interval_s=3600, seed=10, start_s=MONDAY)
    assert collect(other) != collect(small)


def test_planning_synthetic_history_finds_growth_and_idle_topics(
    spark: SparkSession, synth: dict[str, Any], tmp_path: Path
) -> None:
    document = plan(spark, synth["out"], tmp_path / "plan")
    changes = document["summary"]["changes"]
    assert changes["idle"] >= 1
    assert changes["raised"] > 0 and changes["lowered"] > 0
    trends = [t["trend"] for t in document["topics"]]
    assert trends.count("growing") >= 10 and trends.count("shrinking") >= 1
    assert document["fleet"]["workers"] >= 2


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (SynthOptions(topics=0, days=1), "--topics"),
        (SynthOptions(topics=1, days=0), "--days"),
        (SynthOptions(topics=1, days=1, interval_s=7), "--interval-s"),
    ],
)
def test_bad_options_are_refused(options: SynthOptions, flag: str) -> None:
    with pytest.raises(InvalidInput) as e:
        options.check()
    assert e.value.field == flag


def test_an_existing_directory_is_kept_unless_overwritten(
    spark: SparkSession, tmp_path: Path
) -> None:
    small = SynthOptions(topics=2, days=1, interval_s=3600, start_s=MONDAY)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidInput, match="not empty"):
        synthesize(spark, small, str(tmp_path / "mine"))
    with pytest.raises(InvalidInput, match="refusing to delete"):
        synthesize(spark, small, str(tmp_path / "mine"), overwrite=True)
    synthesize(spark, small, str(tmp_path / "h"))
    synthesize(spark, small, str(tmp_path / "h"), overwrite=True)
    count = read_history(spark, str(tmp_path / "h")).agg(F.count("*")).first()
    assert count is not None and count[0] == 48
