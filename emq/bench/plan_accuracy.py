"""``emq bench plan-accuracy``: the plan's quota dry-run against a real fleet on the same traffic.

An hour of traffic history (a history directory, ``--history``, in the format workers record and
``emq history synth`` writes; or the built-in hour of :func:`scenario`) is replayed twice at the
same quotas:

1. **predicted**: through the plan job's own quota dry-run, :func:`spark.sizing.replay`, run on
   a local SparkSession (:mod:`spark.accuracy`) (the plan job's column
   logic itself, not a copy of its formula: a copy could agree with itself and still not be
   what ``emq plan run`` computes). The dry-run's model: jobs arrive evenly within each interval
   and are served FIFO at the quota.
2. **measured**: the same arrivals sent through ``emq api`` to a fleet of ``emq worker``
   processes (Redis, ZooKeeper, the recording loopback sink: :class:`emq.bench.rig.Rig`), see
   :mod:`emq.bench.plan_accuracy_fleet`. The figures come from when each job was sent to the API
   and when the sink received it, not from the workers' own counters.

Per topic three figures are compared: delivered/s over the replayed hour, the backlog's peak
and the longest delay of a job (enqueue to delivery).

**Time compression** (``--compress K``, 60 by default: an hour replays in a minute). Quotas and
rates stay as recorded; each interval of ``L`` seconds becomes ``L/K`` seconds carrying ``1/K``
of its jobs (rounded so that the running totals stay exact: :func:`spark.accuracy.compress`).
The other way, keeping every job and multiplying rates and quotas by ``K``, would change what
is measured: the workers' limiter works in one-second windows that do not compress, and a
quota ``K`` times larger is split over more groups (150 QPS each), so the fleet would run a
different configuration from the one planned. With rates kept, delivered/s is the hour's own
figure; backlogs (jobs) and delays (seconds) are ``1/K`` of the hour's, on both sides: the
dry-run replays the compressed arrivals (intervals of ``L/K`` seconds), so the comparison is
like for like (multiply both by ``K`` for the hour's scale).

**Judgement** (:func:`judge`): a figure is within the target when its error is at most 10 % of
the larger of the prediction and the figure's resolution. The history says nothing finer than
an interval, so the resolution of a delay is one (compressed) interval and that of a backlog
the jobs the quota serves in one interval; a delivered rate's is one job over the hour. Without
it, a topic under its quota (predicted backlog and delay: 0) would fail on the few jobs and
milliseconds any real delivery takes.

Priorities: the history has no per-priority counts and the dry-run serves each topic as one
FIFO, so every replayed job is ``medium``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emq.core.errors import EmqError

if TYPE_CHECKING:
    from emq.core.interfaces import HistoryRow
    from spark.accuracy import Arrivals

DEFAULT_COMPRESS = 60.0
HOUR_S = 3600
TOLERANCE = 0.10
FIGURES = ("delivered_per_s", "backlog_peak", "longest_delay_s")
SCENARIO_INTERVAL_S = 60
SCENARIO_START = 1_736_150_400  # 2025-01-06 08:00 UTC: any whole hour would do


# --------------------------------------------------------------------------- the traffic


def scenario() -> list[HistoryRow]:
    """The built-in hour (one-minute intervals, rates in jobs/s against the recorded quota):

    * ``fits`` (40 QPS): 12 to 28 a second, always under its quota;
    * ``wide`` (120 QPS): 60 to 100 a second, under its quota, a busier topic;
    * ``burst`` (40 QPS): 25 a second, but 80 a second for minutes 15 to 19: the backlog
      builds, then drains at 15 a second;
    * ``over`` (30 QPS): 42 a second throughout: the backlog grows all hour.
    """
    from emq.core.interfaces import HistoryRow

    def fits(i: int) -> float:
        return 20 + 8 * math.sin(2 * math.pi * i / 20)

    def wide(i: int) -> float:
        return 80 + 20 * math.sin(2 * math.pi * i / 30 + 1)

    def burst(i: int) -> float:
        return 80.0 if 15 <= i < 20 else 25.0

    topics: dict[str, tuple[int, Callable[[int], float]]] = {
        "fits": (40, fits),
        "wide": (120, wide),
        "burst": (40, burst),
        "over": (30, lambda i: 42.0),
    }
    rows = []
    for i in range(HOUR_S // SCENARIO_INTERVAL_S):
        for name, (qps, rate) in topics.items():
            start = SCENARIO_START + i * SCENARIO_INTERVAL_S
            rows.append(
                HistoryRow(
                    start, SCENARIO_INTERVAL_S, "online", "acme", name, "api",
                    enqueued=round(rate(i) * SCENARIO_INTERVAL_S), quota=qps, groups=1,
                )
            )  # fmt: skip
    return rows


def write_scenario(out: Path) -> Path:
    """The built-in hour as a history directory (as ``emq history synth`` writes one)."""
    from spark.history import write_marker, write_rows

    write_rows(scenario(), out)
    write_marker(out, source="plan-accuracy", aggregated=True)
    return out


# --------------------------------------------------------------------------- the judgement


def resolutions(a: Arrivals) -> dict[str, float]:
    """Each figure's resolution (see the module docstring): one job over the replay, the jobs
    the quota serves in one interval, one interval."""
    return {
        "delivered_per_s": 1.0 / a.duration_s,
        "backlog_peak": a.qps * a.interval_s,
        "longest_delay_s": a.interval_s,
    }


def compare(predicted: float, measured: float | None, resolution: float) -> dict[str, Any]:
    """One figure: both values, the error against the larger of the prediction and the
    resolution, and whether it is within :data:`TOLERANCE` (no measurement fails)."""
    if measured is None or not math.isfinite(measured):
        return {"predicted": round(predicted, 3), "measured": None, "error": None, "pass": False}
    error = abs(measured - predicted) / max(abs(predicted), resolution)
    return {
        "predicted": round(predicted, 3),
        "measured": round(measured, 3),
        "error": round(error, 4),
        "pass": error <= TOLERANCE,
    }


def judge(
    arrivals: Sequence[Arrivals],
    predicted: Mapping[str, Mapping[str, float]],
    measured: Mapping[str, Mapping[str, float | None]],
) -> dict[str, Any]:
    """Per topic and figure :func:`compare`, each topic's verdict, and the summary."""
    topics: dict[str, Any] = {}
    for a in arrivals:
        res = resolutions(a)
        figures = {
            name: compare(predicted[a.topic][name], measured.get(a.topic, {}).get(name), res[name])
            for name in FIGURES
        }
        topics[a.topic] = {
            "qps": a.qps,
            "jobs": a.jobs,
            "offered_per_s": round(a.jobs / a.duration_s, 3),
            **figures,
            "pass": all(f["pass"] for f in figures.values()),
            # What the fleet delivered while a second of the quota waited, as a share of the
            # quota: the dry-run serves a backlog at exactly 1 (None: no such backlog).
            "backlogged_share": measured.get(a.topic, {}).get("backlogged_share"),
        }
    worst = {
        name: max((t[name]["error"] for t in topics.values() if t[name]["error"] is not None),
                  default=None)
        for name in FIGURES
    }  # fmt: skip
    failed = sorted(name for name, t in topics.items() if not t["pass"])
    return {
        "topics": topics,
        "summary": {
            "tolerance": TOLERANCE,
            "topics": len(topics),
            "within": len(topics) - len(failed),
            "failed": failed,
            "worst_error": worst,
            "pass": not failed,
        },
    }


# --------------------------------------------------------------------------- the command


def add_arguments(bench: argparse.ArgumentParser) -> None:
    """The bench's own flags on ``emq bench``."""
    bench.add_argument(
        "--history", metavar="DIR", help="plan-accuracy: a history directory to replay an hour "
        "of (default: the built-in hour)",
    )  # fmt: skip
    bench.add_argument(
        "--compress", type=float, default=DEFAULT_COMPRESS,
        help="plan-accuracy: time compression (60: an hour replays in a minute)",
    )  # fmt: skip
    bench.add_argument(
        "--at-quota", action="append", default=[], metavar="TOPIC=QPS",
        help="plan-accuracy: the quota to replay a topic at (default: its recorded one)",
    )  # fmt: skip
    bench.add_argument(
        "--start", type=int, default=None, metavar="EPOCH_S",
        help="plan-accuracy: where the hour starts (default: the history's first interval)",
    )  # fmt: skip


def parse_quotas(items: Iterable[str]) -> dict[str, int]:
    """``TOPIC=QPS`` pairs; a bad one is one :class:`EmqError` line."""
    out = {}
    for item in items:
        topic, sep, qps = item.partition("=")
        if not sep or not topic or not qps.isdigit() or int(qps) <= 0:
            raise EmqError(f"--at-quota takes TOPIC=QPS with a positive whole QPS, not {item!r}")
        out[topic] = int(qps)
    return out


def check_arguments(compress_by: float, quotas: Iterable[str], history: str | None) -> None:
    """Everything that can be refused before a server or Spark starts."""
    if not math.isfinite(compress_by) or compress_by < 1 or compress_by > HOUR_S:
        raise EmqError(f"--compress must be from 1 to {HOUR_S}, not {compress_by:g}")
    parse_quotas(quotas)
    if history is not None and not Path(history).is_dir():
        raise EmqError(f"--history: no such directory: {history}")


def run_cli(args: argparse.Namespace, say: Callable[[str], None]) -> dict[str, Any]:
    """``emq bench plan-accuracy``: the arguments checked, then :func:`run`."""
    check_arguments(args.compress, args.at_quota, args.history)
    return run(args.history, args.compress, parse_quotas(args.at_quota), args.start, say=say)


def run(
    history: str | None,
    factor: float = DEFAULT_COMPRESS,
    quotas: Mapping[str, int] | None = None,
    start_s: int | None = None,
    *,
    span_s: int = HOUR_S,
    workers: int = 2,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Predict (Spark), measure (the fleet), judge; the JSON document."""
    import asyncio
    import tempfile

    import uvloop

    from emq.bench import plan_accuracy_fleet
    from emq.bench.machine import describe
    from spark.accuracy import active_session, arrivals_of, predict, read_history
    from spark.session import spark_session

    started = time.monotonic()
    timings: dict[str, float] = {}
    # A session already running (a test's) is found here: SparkSession's active session is
    # per thread, and the dry-run's thread would otherwise start one of its own and stop it.
    active = active_session()

    def dry_run() -> dict[str, dict[str, float]]:
        if active is not None:
            predicted = predict(active, arrivals)
        else:
            with spark_session("emq-plan-accuracy", None, "2g") as spark:
                predicted = predict(spark, arrivals)
        timings["dry_run_s"] = time.monotonic() - started
        return predicted

    async def both() -> tuple[dict[str, dict[str, float]], Any]:
        # Spark starts while the fleet does (both mostly wait); the replay starts only when
        # the dry-run is done, so Spark takes no CPU from the fleet while it is measured.
        predicting = asyncio.ensure_future(asyncio.to_thread(dry_run))
        fleet = await plan_accuracy_fleet.replay(Path(tmp), arrivals, workers, predicting)
        return await predicting, fleet

    with tempfile.TemporaryDirectory(prefix="emq-plan-accuracy-") as tmp:
        path = history or str(write_scenario(Path(tmp) / "history"))
        arrivals = arrivals_of(read_history(path), factor, quotas or {}, start_s, span_s)
        jobs = sum(a.jobs for a in arrivals)
        say(f"plan-accuracy: the dry-run (Spark) and the fleet start; then {jobs} jobs over "
            f"{arrivals[0].duration_s:g} s through the fleet...")  # fmt: skip
        predicted, (measured, detail) = uvloop.run(both())
    doc = judge(arrivals, predicted, measured)
    return {
        "bench": "plan-accuracy",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "history": history or "built-in hour (emq.bench.plan_accuracy.scenario)",
        "compress": factor,
        "replay_s": round(arrivals[0].duration_s, 3),
        "interval_s": round(arrivals[0].interval_s, 3),
        "dry_run": "spark.sizing.replay on a local SparkSession",
        **doc,
        "loadavg_1m": sorted(detail["loadavg_1m"]),
        "fleet": detail,
        "dry_run_s": round(timings["dry_run_s"], 1),  # Spark's start included
        "seconds": round(time.monotonic() - started, 1),
    }


def summary(doc: dict[str, Any]) -> str:
    """One row per topic and figure: predicted, measured, error, within the target."""
    low, high = doc["loadavg_1m"]
    lines = [
        f"plan-accuracy: {doc['history']}, compressed {doc['compress']:g}x "
        f"({doc['replay_s']:g} s replayed; backlogs and delays on that scale); load average "
        f"{low:g} to {high:g} while the fleet ran",
        "",
        "| topic | qps | figure | predicted | measured | error | within 10 % |",
        "|---|---|---|---|---|---|---|",
    ]
    for topic, t in doc["topics"].items():
        for name in FIGURES:
            f = t[name]
            error = "-" if f["error"] is None else f"{100 * f['error']:.1f} %"
            met = "yes" if f["pass"] else "**no**"
            lines.append(
                f"| {topic} | {t['qps']} | {name} | {f['predicted']} | {f['measured']} | "
                f"{error} | {met} |"
            )
    s = doc["summary"]
    lines.append(f"{s['within']}/{s['topics']} topics within 10 % on every figure"
                 + (f"; not: {', '.join(s['failed'])}" if s["failed"] else ""))  # fmt: skip
    return "\n".join(lines)
