"""The traffic-history Parquet format: one schema for recorded and synthetic history.

A history directory holds Parquet files partitioned by UTC date (``DIR/date=2025-01-31/*.parquet``)
with one row per topic and interval (see ``spark/README.md`` for the column meanings)::

    interval_start     int64    epoch seconds (UTC), a multiple of interval_s
    interval_s         int32    the interval's length in seconds
    namespace          string   online | sandbox
    tenant             string
    topic              string
    enqueued           int64    jobs accepted by the API in the interval (offered load)
    delivered          int64    jobs delivered (2xx) in the interval
    throttled_backlog  int64    jobs waiting for quota at the interval's end (see below)
    failed             int64    failed delivery attempts
    retried            int64    attempts re-scheduled with backoff
    dead_lettered      int64    jobs moved to the dead-letter queue
    p50_ms             float64  push latency median (delivered-weighted across sources)
    p99_ms             float64  push latency p99 (max across sources)
    quota              int32    the topic's QPS quota then
    groups             int32    the topic's group count then
    date               string   partition column: the UTC date of interval_start (YYYY-MM-DD)

Recorders write one row per *source* (the API writes ``enqueued``; each worker writes the rest for
the groups it owns). :func:`aggregate_rows` (export) and :func:`aggregate` (the Spark job) fold
them into one row per ``(namespace, tenant, topic, interval_start)``: counters are summed, p50 is
the delivered-weighted mean of the sources' p50s, p99 is the largest, quota and groups the largest.
When an export coarsens intervals, ``throttled_backlog`` is the largest of the sub-intervals'.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from emq.core.errors import InvalidInput
from emq.core.interfaces import HistoryRow

FORMAT_VERSION = 1
MARKER = "_emq_history.json"  # a leading underscore: Spark's readers skip it
KEYS = ("namespace", "tenant", "topic")
COUNTERS = ("enqueued", "delivered", "throttled_backlog", "failed", "retried", "dead_lettered")

ARROW_SCHEMA = pa.schema(
    [
        ("interval_start", pa.int64()),
        ("interval_s", pa.int32()),
        ("namespace", pa.string()),
        ("tenant", pa.string()),
        ("topic", pa.string()),
        *[(name, pa.int64()) for name in COUNTERS],
        ("p50_ms", pa.float64()),
        ("p99_ms", pa.float64()),
        ("quota", pa.int32()),
        ("groups", pa.int32()),
    ]
)
# The same columns for Spark's reader (``date`` comes from the directory names).
SPARK_SCHEMA = (
    "interval_start BIGINT, interval_s INT, namespace STRING, tenant STRING, topic STRING, "
    + ", ".join(f"{name} BIGINT" for name in COUNTERS)
    + ", p50_ms DOUBLE, p99_ms DOUBLE, quota INT, groups INT, date STRING"
)


def utc_date(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%d")


# ----------------------------------------------------------------------------- export side


@dataclass(slots=True)
class _Acc:
    """One topic-interval being folded together from several sources (or sub-intervals)."""

    counters: list[int]
    backlog_by_start: dict[int, int]
    p50_weighted: float
    weight: int
    p50_plain: float
    p99_ms: float
    quota: int
    groups: int


class Folder:
    """Folds history rows, batch by batch, into one row per topic and interval.

    With ``interval_s``, rows are also coarsened to that interval (each row's own interval must
    divide it): counters are summed and ``throttled_backlog`` is the largest of the sub-interval
    ends (summed over sources at each end). Without it every row keeps its own interval.
    """

    def __init__(self, interval_s: int | None = None) -> None:
        self.interval_s = interval_s
        self.read = 0
        self._acc: dict[tuple[int, int, str, str, str], _Acc] = {}

    def add(self, rows: Iterable[HistoryRow]) -> None:
        for row in rows:
            size = self.interval_s or row.interval_s
            if row.interval_s <= 0 or size % row.interval_s:
                raise InvalidInput(
                    "--interval-s",
                    f"the history holds {row.interval_s}-s rows ({row.tenant}/{row.topic}), "
                    f"which do not divide {size} s: choose a multiple of {row.interval_s}",
                )
            start = row.interval_start // size * size
            key = (start, size, row.namespace, row.tenant, row.topic)
            a = self._acc.get(key)
            if a is None:
                a = self._acc[key] = _Acc([0] * len(COUNTERS), {}, 0.0, 0, 0.0, 0.0, 0, 0)
            _fold(a, row)
            self.read += 1

    def rows(self, ended_by: int | None = None) -> list[HistoryRow]:
        """The folded rows, by time then topic.

        With ``ended_by``, only the intervals that start before the first one still open then
        (ending after ``ended_by``): what is left out is all later, so the next export can start
        exactly where this one stopped (:meth:`next_since`).
        """
        items = sorted(self._acc.items(), key=lambda kv: kv[0])
        if ended_by is not None:
            still_open = [key[0] for key, _ in items if key[0] + key[1] > ended_by]
            if still_open:
                items = [(key, a) for key, a in items if key[0] < min(still_open)]
        return [_row(key, a) for key, a in items]

    def next_since(self, exported: Sequence[HistoryRow], previous: int | None) -> int | None:
        """Where the next export starts reading: the first interval not exported now."""
        last = exported[-1].interval_start if exported else None
        later = [key[0] for key in self._acc if last is None or key[0] > last]
        if later:
            return min(later)
        if exported:
            return max(r.interval_start + r.interval_s for r in exported)
        return previous


def aggregate_rows(rows: Iterable[HistoryRow], interval_s: int | None = None) -> list[HistoryRow]:
    """One row per topic and interval, sorted by time then topic (see :class:`Folder`)."""
    folder = Folder(interval_s)
    folder.add(rows)
    return folder.rows()


def _fold(a: _Acc, row: HistoryRow) -> None:
    for i, name in enumerate(COUNTERS):
        if name != "throttled_backlog":
            a.counters[i] += getattr(row, name)
    ends = a.backlog_by_start
    ends[row.interval_start] = ends.get(row.interval_start, 0) + row.throttled_backlog
    a.p50_weighted += row.p50_ms * row.delivered
    a.weight += row.delivered
    a.p50_plain = max(a.p50_plain, row.p50_ms)
    a.p99_ms = max(a.p99_ms, row.p99_ms)
    a.quota = max(a.quota, row.quota)
    a.groups = max(a.groups, row.groups)


def _row(key: tuple[int, int, str, str, str], a: _Acc) -> HistoryRow:
    start, size, namespace, tenant, topic = key
    values = dict(zip(COUNTERS, a.counters, strict=True))
    values["throttled_backlog"] = max(a.backlog_by_start.values(), default=0)
    # With no deliveries there is nothing to weight by: keep the largest p50 seen.
    p50 = a.p50_weighted / a.weight if a.weight else a.p50_plain
    return HistoryRow(
        interval_start=start,
        interval_s=size,
        namespace=namespace,
        tenant=tenant,
        topic=topic,
        source="",
        p50_ms=round(p50, 3),
        p99_ms=a.p99_ms,
        quota=a.quota,
        groups=a.groups,
        **values,
    )


def write_rows(rows: Sequence[HistoryRow], out: str | Path) -> list[Path]:
    """Append aggregated rows to the history directory ``out``; returns the files written.

    One file per date, named after the first and last interval it holds plus a random suffix,
    so repeated exports never overwrite each other.
    """
    by_date: dict[str, list[HistoryRow]] = {}
    for row in rows:
        by_date.setdefault(utc_date(row.interval_start), []).append(row)
    written = []
    for date, chunk in sorted(by_date.items()):
        folder = Path(out) / f"date={date}"
        folder.mkdir(parents=True, exist_ok=True)
        first, last = chunk[0].interval_start, chunk[-1].interval_start
        path = folder / f"part-{first}-{last}-{uuid.uuid4().hex[:8]}.parquet"
        columns = {name: [getattr(r, name) for r in chunk] for name in ARROW_SCHEMA.names}
        table = pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
        tmp = path.with_name("." + path.name + ".tmp")  # hidden until complete
        pq.write_table(table, tmp, compression="snappy")
        os.replace(tmp, path)
        written.append(path)
    return written


def read_marker(out: str | Path) -> dict[str, Any]:
    """The history directory's marker (``{}`` if there is none or it is unreadable)."""
    try:
        value = json.loads((Path(out) / MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def write_marker(out: str | Path, **fields: Any) -> None:
    """Record how the directory was made (and, for exports, the last interval exported)."""
    marker = read_marker(out) | {"format": FORMAT_VERSION, "updated_at": int(time.time())}
    marker |= fields
    path = Path(out) / MARKER
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(marker, indent=2) + "\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- Spark side


def read_history(spark: SparkSession, path: str) -> DataFrame:
    """The history directory as a DataFrame with the documented columns."""
    return spark.read.schema(SPARK_SCHEMA).parquet(path)


def read_marker_any(spark: SparkSession, path: str) -> dict[str, Any]:
    """:func:`read_marker` for any file system Spark reads (HDFS, S3...), through Hadoop's API."""
    if "://" not in path or path.startswith("file://"):
        return read_marker(path.removeprefix("file://"))
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        marker = jvm.org.apache.hadoop.fs.Path(path.rstrip("/") + "/" + MARKER)
        fs = marker.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())  # type: ignore[union-attr]
        if not fs.exists(marker):
            return {}
        stream = fs.open(marker)
        try:
            text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        value = json.loads(text)
    except Exception:  # an unreadable marker only means the history gets folded
        return {}
    return value if isinstance(value, dict) else {}


def aggregate(history: DataFrame, partitions: int) -> DataFrame:
    """One row per topic and interval, hash-partitioned by topic.

    The explicit partitioning by topic is the only shuffle of the whole plan: the per-interval
    fold, the per-topic statistics and the per-topic replay windows all group by a superset of
    the topic key, so Spark reuses it.
    """
    by_topic = history.repartition(partitions, *KEYS)
    return (
        by_topic.groupBy(*KEYS, "interval_start", "interval_s")
        .agg(
            *[F.sum(name).alias(name) for name in COUNTERS if name != "throttled_backlog"],
            # Sources report their backlog at the same end: add them up.
            F.sum("throttled_backlog").alias("throttled_backlog"),
            F.sum(F.col("p50_ms") * F.col("delivered")).alias("_p50w"),
            F.max("p50_ms").alias("_p50max"),
            F.max("p99_ms").alias("p99_ms"),
            F.max("quota").alias("quota"),
            F.max("groups").alias("groups"),
        )
        .select(
            *KEYS,
            "interval_start",
            "interval_s",
            *COUNTERS,
            F.when(F.col("delivered") > 0, F.try_divide(F.col("_p50w"), F.col("delivered")))
            .otherwise(F.col("_p50max"))
            .alias("p50_ms"),
            "p99_ms",
            "quota",
            "groups",
        )
    )
