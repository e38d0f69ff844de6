"""The plan's quota dry-run over compressed traffic, for ``emq bench plan-accuracy``
(:mod:`emq.bench.plan_accuracy` has the why): an hour of history as compressed arrivals per
topic, and :func:`spark.sizing.replay`, the plan job's own dry-run, run over them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from emq.core.errors import EmqError
from spark import sizing

HOUR_S = 3600


@dataclass(frozen=True, slots=True)
class Arrivals:
    """One topic's compressed traffic: ``counts[i]`` jobs arrive evenly within
    ``[i * interval_s, (i + 1) * interval_s)`` seconds of the replay, served at ``qps``."""

    topic: str
    qps: int
    interval_s: float
    counts: tuple[int, ...]

    @property
    def duration_s(self) -> float:
        return self.interval_s * len(self.counts)

    @property
    def jobs(self) -> int:
        return sum(self.counts)

    def times(self) -> list[float]:
        """Each job's arrival (seconds from the replay's start): evenly spread, every job at
        the middle of its share of the interval."""
        out: list[float] = []
        for i, n in enumerate(self.counts):
            out += [(i + (j + 0.5) / n) * self.interval_s for j in range(n)]
        return out


def compress(enqueued: Sequence[int], factor: float) -> tuple[int, ...]:
    """Per interval, ``1/factor`` of its jobs, rounded on the running total (so no interval's
    rounding is lost and the compressed total is the recorded one over ``factor``)."""
    if factor < 1:
        raise EmqError(f"--compress must be at least 1, not {factor:g}")
    out, total, sent = [], 0, 0
    for n in enqueued:
        total += n
        due = round(total / factor)
        out.append(due - sent)
        sent = due
    return tuple(out)


def arrivals_of(
    history: pd.DataFrame,
    factor: float,
    quotas: Mapping[str, int],
    start_s: int | None = None,
    span_s: int = HOUR_S,
) -> list[Arrivals]:
    """The compressed arrivals of every topic in ``span_s`` seconds of ``history`` (folded: one
    row per topic and interval) from ``start_s`` (None: its first interval). A topic's quota is
    ``quotas[topic]`` if given, else its latest recorded one; intervals without a row have no
    arrivals."""
    if history.empty:
        raise EmqError("the history has no rows")
    interval = int(history["interval_s"].max())
    if interval <= 0:
        raise EmqError("the history's intervals must be longer than 0 s")
    first = int(history["interval_start"].min()) if start_s is None else start_s
    window = history[
        (history["interval_start"] >= first) & (history["interval_start"] < first + span_s)
    ]
    if window.empty:
        raise EmqError(f"the history has no rows from {first} to {first + span_s}")
    unknown = sorted(set(quotas) - set(window["topic"]))
    if unknown:
        raise EmqError(f"--quota names topics with no traffic in the hour: {', '.join(unknown)}")
    slots = span_s // interval
    out = []
    for topic, rows in window.groupby("topic", sort=True):
        enqueued = [0] * slots
        for start, n in zip(rows["interval_start"], rows["enqueued"], strict=True):
            enqueued[(int(start) - first) // interval] += int(n)
        latest = rows.sort_values("interval_start")["quota"].iloc[-1]
        qps = int(quotas.get(str(topic), latest))
        if qps <= 0:
            raise EmqError(f"topic {topic} has no quota: give one with --quota {topic}=QPS")
        out.append(Arrivals(str(topic), qps, interval / factor, compress(enqueued, factor)))
    return out


def read_history(path: str) -> pd.DataFrame:
    """A history directory as one row per topic and interval: recorders' rows (one per source)
    folded as the plan job folds them (counters summed, the quota the largest). A topic's name
    is its own if no other tenant or namespace has one like it in the history, else
    ``namespace.tenant.topic``. Read with pyarrow, not Spark: a few thousand rows."""
    if not Path(path).is_dir():
        raise EmqError(f"--history: no such directory: {path}")
    columns = ["namespace", "tenant", "topic", "interval_start", "interval_s", "enqueued", "quota"]
    try:
        rows = pq.read_table(path, columns=columns).to_pandas()
    except (OSError, ValueError) as e:
        raise EmqError(f"--history: {path} is not a history directory: {e}") from None
    keys = ["namespace", "tenant", "topic"]
    folded = rows.groupby([*keys, "interval_start"], as_index=False).agg(
        {"interval_s": "max", "enqueued": "sum", "quota": "max"}
    )
    names = folded[keys].drop_duplicates()
    if names["topic"].duplicated().any():
        folded["topic"] = folded["namespace"] + "." + folded["tenant"] + "." + folded["topic"]
    return folded.drop(columns=["namespace", "tenant"])


def predict(spark: SparkSession, arrivals: Sequence[Arrivals]) -> dict[str, dict[str, float]]:
    """The plan's quota dry-run (:func:`spark.sizing.replay`) over the compressed arrivals: per
    topic the delivered rate over the replay (jobs in, less the backlog left at its end), the
    backlog's peak and the longest wait."""
    records = [
        {
            "tid": tid,
            "interval_start": i * a.interval_s,
            "interval_s": a.interval_s,
            "offered": float(n),
            "proposed_qps": a.qps,
        }
        for tid, a in enumerate(arrivals)
        for i, n in enumerate(a.counts)
    ]
    # A few hundred rows: one partition, already laid out by topic as the replay's window
    # wants (as ``sizing.narrow`` lays out the plan job's), so no shuffle into many tasks.
    frame = spark.createDataFrame(pd.DataFrame(records)).repartition(1, "tid")
    replayed = sizing.replay(frame.sortWithinPartitions("tid", "interval_start"), 0)
    # One Spark action; the per-topic maxima are replay_summary's ``max_backlog`` and
    # ``max_wait_s``, taken here from the same rows (its grouping sets cost a second pass).
    rows = replayed.select("tid", "interval_start", "backlog", "wait_s").toPandas()
    rows = rows.sort_values(["tid", "interval_start"])
    by_tid = rows.groupby("tid").agg(
        max_backlog=("backlog", "max"), max_wait_s=("wait_s", "max"), end=("backlog", "last")
    )
    out = {}
    for tid, a in enumerate(arrivals):
        out[a.topic] = {
            "delivered_per_s": (a.jobs - float(by_tid.loc[tid, "end"])) / a.duration_s,
            "backlog_peak": float(by_tid.loc[tid, "max_backlog"]),
            "longest_delay_s": float(by_tid.loc[tid, "max_wait_s"]),
        }
    return out


def active_session() -> SparkSession | None:
    """The SparkSession running in this thread, if any (a test's)."""
    return SparkSession.getActiveSession()
