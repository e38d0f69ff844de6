"""The Spark side of the sizing job: per-topic rates, daily volumes, the fleet series, the replay.

Everything here is column logic (no Python UDF), so it runs unchanged on a cluster whose
executors have nothing of EMQ installed. Per-topic results are small (one row per topic) and
are collected to the driver, where :mod:`capacity.plan` turns them into quotas and fleet sizes.

How the work is laid out (the shape that makes 10M rows fit in well under a minute on 2 cores):

1. :func:`topic_summary` scans the history once with a plain aggregation (partial aggregates,
   no shuffle of rows). Each topic's id ``tid`` is the 64-bit hash of its key, so any pass can
   compute it from a row without a join (the driver checks that no two topics share one).
2. :func:`narrow` keeps only what the per-topic passes need (``tid``, the interval, the jobs
   enqueued and delivered, backlog and quota), hash-partitioned by ``tid``, sorted by time and
   cached: the one shuffle of rows.
3. :func:`rate_quantiles` gathers each topic's rates in one sorted array; :func:`replay` runs
   its windows over the cache in the order it is stored (no sort).

Definitions (``spark/README.md`` has the long form):

* **offered** jobs of an interval: ``enqueued`` (what the API accepted); for a topic whose history
  has no ``enqueued`` at all (recorded without the API's counts), ``delivered`` instead.
* **rate** of an interval: offered / interval_s, the interval's *mean*. A burst shorter than the
  interval is averaged away; record with a shorter interval to see it.
* **percentiles** are nearest-rank over every interval from the topic's first recorded interval
  to the end of the history, counting intervals without a row as 0 (recorders only write active
  topics): the p99 is exactly the rate that 1% of the intervals exceed.
* **replay** (the quota dry-run): jobs arrive evenly within each interval and are served FIFO at
  the proposed quota ``c``; the backlog follows Lindley's recursion
  ``B = max(0, B_prev + offered - c*dt)``, evaluated exactly through the net-input process
  ``X(t) = A(t) - c*t`` as ``B(t) = X(t) - min(X(u), u <= t)`` (``A`` = cumulative arrivals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from emq.core.errors import EmqError
from spark.history import KEYS, aggregate, read_history, read_marker_any

DAY_S = 86_400
QUANTILES = {"p50": (1, 2), "p99": (99, 100), "p999": (999, 1000)}
BEHIND_JOBS = 0.5  # a replayed backlog below half a job is an empty queue (rounding)


@dataclass(frozen=True, slots=True)
class Span:
    """What the history covers: row count and the first and last interval (epoch seconds)."""

    rows: int
    first_s: int
    end_s: int  # end of the last interval
    interval_s: int  # the largest interval length seen

    @property
    def days(self) -> float:
        return (self.end_s - self.first_s) / DAY_S

    @property
    def intervals(self) -> int:
        return max(1, (self.end_s - self.first_s) // max(1, self.interval_s))


def source(spark: SparkSession, path: str, partitions: int) -> tuple[DataFrame, bool]:
    """The history as one row per topic and interval, and whether it had to be folded.

    Directories written by ``emq history export`` and ``emq history synth`` say so in their
    marker and are read as they are; anything else is folded (and cached, as folding costs a
    shuffle of every column).
    """
    history = read_history(spark, path)
    if read_marker_any(spark, path).get("aggregated"):
        return history, False
    return aggregate(history, partitions).persist(), True


def _latest(column: str) -> Column:
    """The value of ``column`` in the latest interval, as one packed ``max`` (interval start in
    the high 32 bits): far cheaper than ``max_by``, which makes Spark keep objects per group."""
    packed = F.shiftleft(F.col("interval_start").cast("long"), 32) + F.col(column).cast("long")
    return F.max(packed).bitwiseAND(F.lit(0xFFFFFFFF)).alias(column)


def topic_summary(history: DataFrame) -> pd.DataFrame:
    """Per topic: span, totals, observed backlog and latency, the latest quota and groups.

    Only plain sums, minima and maxima run in Spark (partial aggregation, no shuffle of rows);
    ratios are taken on the driver.
    """
    summary = (
        history.groupBy(*KEYS)
        .agg(
            F.first(topic_id()).alias("tid"),
            F.min("interval_start").alias("first_s"),
            F.max("interval_start").alias("last_s"),
            F.max(F.col("interval_start") + F.col("interval_s")).alias("end_s"),
            F.max("interval_s").alias("interval_s"),
            F.count(F.lit(1)).alias("rows"),
            F.sum("enqueued").alias("enqueued"),
            F.sum("delivered").alias("delivered"),
            F.sum("failed").alias("failed"),
            F.sum("retried").alias("retried"),
            F.sum("dead_lettered").alias("dead_lettered"),
            F.max("throttled_backlog").alias("observed_max_backlog"),
            F.sum(F.col("p50_ms") * F.col("delivered")).alias("_p50_weighted"),
            F.max("p99_ms").alias("p99_ms"),
            _latest("quota"),
            _latest("groups"),
        )
        .toPandas()
    )
    delivered = summary["delivered"].astype(float)
    summary["p50_ms"] = (summary.pop("_p50_weighted") / delivered.where(delivered > 0)).round(3)
    summary = summary.rename(columns={"quota": "current_qps", "groups": "current_groups"})
    if not summary["tid"].is_unique:  # two keys with one 64-bit hash: never seen, but say so
        raise EmqError("two topics share a topic id (a hash collision): cannot plan")
    return summary.sort_values(list(KEYS)).reset_index(drop=True)


def span_of(summary: pd.DataFrame) -> Span:
    if summary.empty:
        return Span(0, 0, 0, 0)
    return Span(
        rows=int(summary["rows"].sum()),
        first_s=int(summary["first_s"].min()),
        end_s=int(summary["end_s"].max()),
        interval_s=int(summary["interval_s"].max()),
    )


def topic_id() -> Column:
    """A topic's id: the 64-bit hash of its key (computed the same way in every pass)."""
    return F.xxhash64(*KEYS)


def narrow(history: DataFrame, partitions: int) -> DataFrame:
    """``tid``, the interval, enqueued and delivered jobs, backlog and quota, by topic, cached.

    Hash-partitioned by ``tid`` and sorted by time within it, so every per-topic pass reads it
    without a shuffle and every time-ordered window without a sort.
    """
    rows = history.select(
        topic_id().alias("tid"),
        "interval_start",
        "interval_s",
        F.col("enqueued").cast("double").alias("enqueued"),
        F.col("delivered").cast("double").alias("delivered"),
        F.col("throttled_backlog").cast("double").alias("throttled_backlog"),
        F.col("quota").alias("current_qps"),
    )
    by_topic = rows.repartition(partitions, "tid").sortWithinPartitions("tid", "interval_start")
    return by_topic.persist()


def with_topic(
    spark: SparkSession, rows: DataFrame, topics: pd.DataFrame, columns: list[str]
) -> DataFrame:
    """``rows`` with per-topic ``columns`` (by ``tid``, broadcast), the interval's ``offered``
    jobs (``delivered`` for topics without enqueue counts: ``use_delivered``) and ``rate``."""
    small = spark.createDataFrame(topics[["tid", "use_delivered", *columns]])
    joined = rows.join(F.broadcast(small), "tid")
    offered = F.when(F.col("use_delivered"), F.col("delivered")).otherwise(F.col("enqueued"))
    return joined.withColumn("offered", offered).withColumn(
        "rate", F.col("offered") / F.col("interval_s")
    )


def _nth_largest(p: tuple[int, int], intervals: Column) -> Column:
    """The rank from the top (1 = largest) of the nearest-rank ``p`` quantile of ``intervals``
    values: ``N - ceil(p*N) + 1``, in integers so 0.99 * 100 is exactly 99."""
    num, den = p
    return intervals - F.floor((intervals * num + den - 1) / den) + 1


def rate_quantiles(rows: DataFrame) -> pd.DataFrame:
    """Per topic: peak, p50, p99, p999 and mean rate (jobs/s), zero-filled as documented.

    ``rows`` carries ``intervals`` per topic (from its first record to the end of the
    history). Each topic's rates are gathered and sorted (largest first) in one array; a
    quantile is the element at its rank, or 0 when the rank falls beyond the recorded rows.
    A topic has one value per interval (10 080 for a week of minutes), so the arrays are small.
    """
    stats = rows.groupBy("tid").agg(
        F.sort_array(F.collect_list("rate"), asc=False).alias("rates"),
        F.max("intervals").alias("intervals"),
        F.sum("offered").alias("offered"),
        F.max(F.col("intervals") * F.col("interval_s")).alias("span_s"),
    )
    size = F.size("rates")
    picks = [
        F.when(
            _nth_largest(p, F.col("intervals")) <= size,
            F.element_at("rates", _nth_largest(p, F.col("intervals")).cast("int")),
        )
        .otherwise(0.0)
        .alias(f"{name}_rps")
        for name, p in QUANTILES.items()
    ]
    return stats.select(
        "tid",
        F.element_at("rates", 1).alias("peak_rps"),
        *picks,
        (F.col("offered") / F.col("span_s")).alias("mean_rps"),
    ).toPandas()


def daily_offered(rows: DataFrame) -> pd.DataFrame:
    """Per topic and UTC day (days since the epoch): jobs offered, each interval clipped at the
    topic's ``p99_rps`` so that a burst does not read as a trend."""
    day = F.floor(F.col("interval_start") / DAY_S).cast("long")
    clipped = F.least(F.col("offered"), F.col("p99_rps") * F.col("interval_s"))
    return rows.groupBy("tid", day.alias("day")).agg(F.sum(clipped).alias("offered")).toPandas()


def fleet_series(rows: DataFrame) -> pd.DataFrame:
    """Per interval start: the fleet's offered rate, and the rate its topics could be served at
    under the proposed quotas (``min(rate, quota)`` summed; backlog drain not counted)."""
    capped = F.least(F.col("rate"), F.col("proposed_qps").cast("double"))
    return (
        rows.groupBy("interval_start")
        .agg(
            F.sum("rate").alias("offered_rps"),
            F.sum(capped).alias("served_rps"),
            F.sum(F.col("delivered") / F.col("interval_s")).alias("delivered_rps"),
            F.count(F.lit(1)).alias("active_topics"),
        )
        .orderBy("interval_start")
        .toPandas()
    )


def replay(rows: DataFrame, origin_s: int, candidates: Sequence[str] = ()) -> DataFrame:
    """Per row, the backlog the ``proposed_qps`` would have left at the interval's end.

    Adds ``backlog`` (jobs), ``wait_s`` (how long a job arriving then waits, FIFO, = backlog /
    quota) and ``behind_s`` (how long the queue has not been empty, counting until that backlog
    would drain). ``origin_s`` only keeps the numbers small (any time at or before the first
    interval works). Each column named in ``candidates`` holds another quota to try: its backlog
    comes as ``backlog_<name>``, from the same sort and running sum (one more running minimum).

    The backlog at time t is ``X(t) - min(X(u), u <= t)`` with ``X(t) = A(t) - c*t``. X is
    piecewise linear (arrivals are even within an interval, none between recorded intervals),
    so its running minimum is reached at an interval's start or end: the running minimum of
    ``min(X(start), X(end))`` over the rows so far is exact, gaps included. The minimum is kept
    as a (value, -time) pair so its latest time, when the queue was last empty, comes along.
    """
    by_time = (
        Window.partitionBy("tid")
        .orderBy("interval_start")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    c = F.col("proposed_qps").cast("double")
    start = (F.col("interval_start") - origin_s).cast("double")
    end = start + F.col("interval_s")
    # Each window function goes into a column of its own: Spark evaluates a windowed expression
    # once per use, so referring to the column keeps it one running sum and one running min.
    steps = rows.withColumn("_arrived", F.sum("offered").over(by_time))  # A at the end
    x_start = F.col("_arrived") - F.col("offered") - c * start
    x_end = F.col("_arrived") - c * end
    low = F.when(x_start < x_end, F.struct(x_start.alias("x"), (-start).alias("t"))).otherwise(
        F.struct(x_end.alias("x"), (-end).alias("t"))
    )
    steps = steps.withColumn("_end", end).withColumn("_xe", x_end).withColumn("_low", low)
    steps = steps.withColumn("_lowest", F.min("_low").over(by_time))
    for name in candidates:
        k = F.col(name).cast("double")
        k_end = F.col("_arrived") - k * end
        k_low = F.least(F.col("_arrived") - F.col("offered") - k * start, k_end)
        lowest = F.min(k_low).over(by_time)
        steps = steps.withColumn(f"backlog_{name}", F.greatest(F.lit(0.0), k_end - lowest))
    return (
        steps.withColumn("backlog", F.greatest(F.lit(0.0), F.col("_xe") - F.col("_lowest.x")))
        .withColumn("wait_s", F.col("backlog") / c)
        .withColumn(
            "behind_s",
            F.when(
                F.col("backlog") >= BEHIND_JOBS,
                F.col("_end") + F.col("_lowest.t") + F.col("wait_s"),  # _lowest.t = -empty-at
            ).otherwise(0.0),
        )
        .drop("_arrived", "_end", "_xe", "_low", "_lowest")
    )


def candidate_summary(replayed: DataFrame, candidates: Sequence[str]) -> pd.DataFrame:
    """Per topic, the largest backlog at each candidate quota (``max_backlog_<name>``)."""
    maxima = [F.max(f"backlog_{name}").alias(f"max_backlog_{name}") for name in candidates]
    return replayed.groupBy("tid").agg(*maxima).toPandas()


def replay_summary(replayed: DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per topic: the largest backlog, its time, the longest wait and the longest time behind;
    per interval start: the fleet's replayed backlog (all topics at once).

    One aggregation with two grouping sets, so the replay's windows run once for both.
    """
    both = replayed.groupingSets([["tid"], ["interval_start"]], "tid", "interval_start").agg(
        F.grouping("tid").alias("_by_time"),
        F.max("backlog").alias("max_backlog"),
        F.max_by(F.col("interval_start") + F.col("interval_s"), "backlog").alias("worst_at"),
        F.max("wait_s").alias("max_wait_s"),
        F.max("behind_s").alias("longest_behind_s"),
        F.sum(F.when(F.col("backlog") >= BEHIND_JOBS, 1).otherwise(0)).alias("behind_rows"),
        F.sum("backlog").alias("replayed_backlog"),
    )
    # Each set leaves the other's key null; 0 instead keeps the 64-bit ids exact in pandas
    # (a null would make the column float).
    keys = [F.coalesce(F.col(k), F.lit(0)).alias(k) for k in ("tid", "interval_start")]
    frame = both.select(*keys, *[c for c in both.columns if c not in ("tid", "interval_start")])
    frame = frame.toPandas()
    by_time = frame["_by_time"] == 1
    topics = frame.loc[~by_time].drop(columns=["_by_time", "interval_start", "replayed_backlog"])
    fleet = frame.loc[by_time, ["interval_start", "replayed_backlog"]]
    return topics.reset_index(drop=True), fleet.reset_index(drop=True)


def series(rows: DataFrame, top: pd.DataFrame, origin_s: int) -> pd.DataFrame:
    """The per-interval rows of a few topics, with their replay, for the report's charts.

    Only these topics are replayed again (the cache is in time order: no sort).
    """
    if top.empty:
        return pd.DataFrame()
    picked = replay(rows.where(F.col("tid").isin([int(t) for t in top["tid"]])), origin_s)
    cols = ["tid", "interval_start", "interval_s", "rate", "delivered", "throttled_backlog"]
    cols += ["current_qps", "proposed_qps", "backlog"]
    return picked.select(*cols).orderBy("tid", "interval_start").toPandas()
