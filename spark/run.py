"""One run of the sizing job on a SparkSession: the steps of ``spark/plan_job.py``."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from emq.core.errors import InvalidInput
from spark import planning, sizing
from spark.history import KEYS
from spark.planning import PlanOptions
from spark.report import duration, write_report
from spark.series import plan_series
from spark.session import Progress, cpu_seconds

FORMAT_VERSION = 1
TOPIC_COLUMNS = [
    *KEYS,
    "current_qps",
    "current_groups",
    "proposed_qps",
    "proposed_groups",
    "group_qps",
    "change_pct",
    "idle",
    "rate_source",
    "mean_rps",
    "p50_rps",
    "p99_rps",
    "p999_rps",
    "peak_rps",
    f"p99_rps_in_{planning.PROJECTION_WEEKS}w",
    "growth_per_week",
    "trend",
    "max_backlog",
    "max_wait_s",
    "longest_behind_s",
    "worst_at",
    "behind_rows",
    "qps_for_target_wait",
    "intervals",
    "observed_max_backlog",
    "enqueued",
    "delivered",
    "failed",
    "retried",
    "dead_lettered",
    "p50_ms",
    "p99_ms",
    "first_s",
    "last_s",
    "interval_s",
]


def check_paths(history: str, out: str) -> None:
    """One clear line for a history that is not there or an output that cannot be a folder."""
    if "://" not in history and not Path(history).is_dir():
        raise InvalidInput("--history", f"{history} does not exist (or is not a directory)")
    if Path(out).exists() and not Path(out).is_dir():
        raise InvalidInput("--out", f"{out} exists and is not a directory")


def _out_dir(out: str) -> Path:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(
    spark: SparkSession, history: str, out: str, o: PlanOptions, progress: Progress
) -> dict[str, Any]:
    """Run steps 2-6 and return the summary (the plan itself is written to ``out``)."""
    check_paths(history, out)
    out_dir = _out_dir(out)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    cached: list[DataFrame] = []
    try:
        with progress.step("reading history"):
            source, folded = _read(spark, history, partitions)
            if folded:
                cached.append(source)
            summary = sizing.topic_summary(source)
            span = sizing.span_of(summary)
            if not span.rows:
                raise InvalidInput("--history", f"{history} holds no history rows")
            summary["intervals"] = planning.intervals(summary, span.end_s)
            summary["use_delivered"] = planning.use_delivered(summary)
            rows = sizing.narrow(source, partitions)
            cached.append(rows)
        topics, fleet, top, top_rows = _compute(spark, rows, summary, span, o, progress)
    finally:
        for frame in cached:
            frame.unpersist()
    with progress.step("writing plan.json, Parquet detail and report.html"):
        fleet_sizing = planning.size_fleet(fleet, topics, o, span.intervals)
        plan = _document(history, span, topics, fleet_sizing, o)
        plan["series"] = plan_series(fleet, top, top_rows)  # for the console's charts
        paths = _write(out_dir, plan, topics, fleet, top, top_rows)
    result = _summary(plan, topics, paths, span, progress)
    jvm_cpu = cpu_seconds(spark)
    result["cpu_s"] = {
        "jvm": round(jvm_cpu, 1) if jvm_cpu is not None else None,
        "python": round(time.process_time(), 1),
    }
    result["shuffle_partitions"] = partitions
    context = spark.sparkContext  # where it ran: a cluster's UI lists the application by its id
    result["spark"] = {"master": context.master, "application_id": context.applicationId}
    return result


def _read(spark: SparkSession, history: str, partitions: int) -> tuple[DataFrame, bool]:
    try:
        return sizing.source(spark, history, partitions)
    except AnalysisException as e:
        raise InvalidInput("--history", f"cannot read {history}: {e.getMessage()}") from None


def _compute(
    spark: SparkSession,
    rows: DataFrame,
    summary: pd.DataFrame,
    span: sizing.Span,
    o: PlanOptions,
    progress: Progress,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    with progress.step("per-topic rate percentiles"):
        ranked = sizing.with_topic(spark, rows, summary, ["intervals"])
        topics = planning.size_topics(summary, sizing.rate_quantiles(ranked), o)
    with progress.step("growth trends and the fleet series"):
        sized = sizing.with_topic(spark, rows, topics, ["proposed_qps", "p99_rps"])
        trend = planning.growth(sizing.daily_offered(sized), summary, span.end_s)
        topics = planning.add_growth(topics, trend)
        fleet = sizing.fleet_series(sized)
    with progress.step("quota dry-run: replaying the history at the proposed quotas"):
        replayed, backlog = sizing.replay_summary(sizing.replay(sized, span.first_s))
        fleet = fleet.merge(backlog, on="interval_start", how="left").fillna(0.0)
        topics = topics.merge(replayed, on="tid", how="left")
        for column in replayed.columns:
            topics[column] = topics[column].fillna(0.0)
        # Topics that wait too long are replayed again at higher quotas (only their rows).
        slow = topics[~topics["idle"] & (topics["max_wait_s"] > o.target_wait_s)].copy()
        names = planning.ladder(slow)
        if len(slow):
            tried = sizing.with_topic(spark, rows, slow, ["proposed_qps", *names])
            higher = sizing.candidate_summary(sizing.replay(tried, span.first_s, names), names)
            slow = slow.merge(higher, on="tid", how="left")
        topics = planning.advise(topics, slow, names, o.target_wait_s)
        active = topics[~topics["idle"]]
        top = active.sort_values(["mean_rps", "p99_rps"], ascending=False).head(o.top)
        top_rows = sizing.series(sized, top, span.first_s)
    return topics, fleet, top, top_rows


def _document(
    history: str, span: sizing.Span, topics: pd.DataFrame, fleet: dict[str, Any], o: PlanOptions
) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "generated_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "history": {
            "path": history,
            "rows": span.rows,
            "topics": len(topics),
            "first_s": span.first_s,
            "end_s": span.end_s,
            "days": round(span.days, 3),
        },
        "parameters": o.to_dict(),
        "fleet": fleet,
        "topics": [planning.topic_entry(t) for t in topics.itertuples()],
    }


def _write(
    out: Path,
    plan: dict[str, Any],
    topics: pd.DataFrame,
    fleet: pd.DataFrame,
    top: pd.DataFrame,
    top_rows: pd.DataFrame,
) -> dict[str, str]:
    plan_path = out / "plan.json"
    tmp = out / ".plan.json.tmp"
    tmp.write_text(json.dumps(plan, indent=1) + "\n")
    os.replace(tmp, plan_path)
    topics[TOPIC_COLUMNS].to_parquet(out / "topics.parquet", index=False)
    fleet.to_parquet(out / "fleet.parquet", index=False)
    report = write_report(out, plan, topics, fleet, top, top_rows)
    return {
        "plan": str(plan_path),
        "report": str(report),
        "topics_parquet": str(out / "topics.parquet"),
        "fleet_parquet": str(out / "fleet.parquet"),
    }


def _summary(
    plan: dict[str, Any],
    topics: pd.DataFrame,
    paths: dict[str, str],
    span: sizing.Span,
    progress: Progress,
) -> dict[str, Any]:
    active = topics[~topics["idle"]]
    current = active["current_qps"].fillna(0)
    proposed = active["proposed_qps"]
    target = plan["parameters"]["target_wait_s"]
    slow = active[active["max_wait_s"] > target]
    fixable = slow["qps_for_target_wait"].notna().sum()
    worst = active.sort_values("max_wait_s", ascending=False).head(1)
    worst_entry = None
    if len(worst) and worst["max_wait_s"].iloc[0] > 0:
        w = worst.iloc[0]
        worst_entry = {
            "topic": f"{w['namespace']}/{w['tenant']}/{w['topic']}",
            "max_wait_s": round(float(w["max_wait_s"]), 1),
            "max_backlog": round(float(w["max_backlog"]), 1),
        }
    return {
        **paths,
        "rows": span.rows,
        "days": round(span.days, 3),
        "topics": len(topics),
        "changes": {
            "raised": int((proposed > current).sum()),
            "lowered": int((proposed < current).sum()),
            "lowered_by_more_than_half": int((proposed < current * 0.5).sum()),
            "unchanged": int((proposed == current).sum()),
            "idle": int(topics["idle"].sum()),
        },
        "growing": int((topics["trend"] == "growing").sum()),
        "dry_run": {
            "target_wait_s": target,
            "topics_over_target": len(slow),
            "of_which_fit_at_up_to_8x": int(fixable),
            "worst": worst_entry,
        },
        "fleet": plan["fleet"],
        "timings_s": progress.timings,
        "step_cpu_s": progress.cpu,
    }


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The human summary ``emq plan run`` prints."""
    f, c, d = result["fleet"], result["changes"], result["dry_run"]
    worst = d["worst"]
    lines = [
        f"history: {result['rows']:,} topic-intervals, {result['topics']} topics, "
        f"{result['days']:.1f} days",
        f"fleet: {f['workers']} workers ({f['active_workers']} + {f['spare_workers']} spare at "
        f"{f['worker_qps']:g} jobs/s each), {f['redis_shards']} Redis shard(s); peak offered "
        f"{f['peak_offered_rps']:,.0f} jobs/s, demand {f['demand_qps']:,.0f} jobs/s",
        f"quotas: {c['raised']} raised, {c['lowered']} lowered "
        f"({c['lowered_by_more_than_half']} by more than half), {c['unchanged']} unchanged, "
        f"{c['idle']} idle (kept); {result['growing']} topics growing",
        f"dry-run: {d['topics_over_target']} topics would have waited over "
        f"{duration(d['target_wait_s'])} ({d['of_which_fit_at_up_to_8x']} of them would stay "
        "within it at a quota up to 8x the proposal: see report.html)"
        + (
            f"; worst {worst['topic']} (backlog {worst['max_backlog']:,.0f}, wait "
            f"{duration(worst['max_wait_s'])})"
            if worst
            else ""
        ),
        f"wrote {result['plan']}, {result['report']}, {result['topics_parquet']}",
        f"took {result.get('seconds', 0):.1f} s",
    ]
    return lines
