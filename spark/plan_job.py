"""The capacity-planning job: traffic history in, ``plan.json`` + Parquet detail + report out.

Run it as ``emq plan run --history DIR --out DIR`` (local[*] on this machine, or ``--master``),
or on a cluster with the same arguments::

    PYSPARK_PYTHON=.venv/bin/python spark-submit [--master URL] spark/plan_job.py \\
        --history hdfs:///emq/history --out /tmp/plan

Steps (each announced on stderr with its duration, with a task counter while Spark works):

1. start Spark;
2. read the history: per-topic totals (a plain aggregation; a directory without the marker of
   ``emq history export``/``synth`` is first folded to one row per topic and interval);
3. the one shuffle: a narrow copy of the rows by topic, sorted by time and cached; the exact
   peak/p50/p99/p999 rate per topic; proposed quotas and groups (driver, :mod:`capacity.plan`);
4. daily volumes (growth) and the fleet's per-interval series;
5. the quota dry-run: every topic's history replayed at its proposed quota, the topics that wait
   too long again at higher quotas, and the charted topics' series;
6. fleet sizing, ``plan.json``, ``topics.parquet``, ``fleet.parquet``, ``report.html`` + PNGs.

Only the standard library is imported at module level, so ``spark-submit spark/plan_job.py``
works from a checkout (the repository root is put on ``sys.path`` when run as a script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

STEPS = 6
WORKER_BENCH_FIELDS = ("worker_qps", "delivered_per_s", "deliveries_per_s", "pushes_per_s")


def build_parser(prog: str = "plan_job.py") -> argparse.ArgumentParser:
    from capacity.plan import (
        DEFAULT_HEADROOM,
        DEFAULT_JOB_BYTES,
        DEFAULT_SHARD_OPS,
        DEFAULT_WORKER_QPS,
    )

    p = argparse.ArgumentParser(
        prog=prog,
        description="Compute a capacity plan from traffic history: per topic the rate "
        "percentiles, growth, a recommended quota (p99 x headroom) and group split, a replay of "
        "the history under it; for the fleet the workers (N+1) and Redis shards. Writes "
        "OUT/plan.json, OUT/report.html (with PNG charts), OUT/topics.parquet, OUT/fleet.parquet.",
    )
    add_arguments(p, DEFAULT_HEADROOM, DEFAULT_WORKER_QPS, DEFAULT_JOB_BYTES, DEFAULT_SHARD_OPS)
    return p


def add_arguments(
    p: argparse.ArgumentParser,
    headroom: float,
    worker_qps: float,
    job_bytes: int,
    shard_ops: float,
) -> None:
    """The job's flags (shared by ``emq plan run`` and ``spark-submit plan_job.py``)."""
    p.add_argument("--history", required=True, metavar="DIR", help="history Parquet directory")
    p.add_argument("--out", required=True, metavar="DIR", help="where the plan is written")
    p.add_argument(
        "--master", metavar="URL", help="Spark master (default: local[*], or spark-submit's)"
    )
    p.add_argument(
        "--headroom",
        type=float,
        default=headroom,
        metavar="X",
        help=f"quota = p99 rate x X (default {headroom})",
    )
    p.add_argument(
        "--max-group-qps",
        type=int,
        metavar="N",
        help="the group cap (default: EMQ_MAX_GROUP_QPS, 150)",
    )
    capacity = p.add_mutually_exclusive_group()
    capacity.add_argument(
        "--worker-qps",
        type=float,
        metavar="N",
        help=f"deliveries a second one worker sustains (default {worker_qps:g})",
    )
    capacity.add_argument(
        "--worker-bench",
        metavar="FILE",
        help="take the per-worker capacity from a benchmark's JSON output "
        f"(field {' / '.join(WORKER_BENCH_FIELDS)})",
    )
    p.add_argument(
        "--spare-workers",
        type=int,
        default=1,
        metavar="N",
        help="workers beyond the need (default 1: N+1)",
    )
    p.add_argument(
        "--job-bytes",
        type=int,
        default=job_bytes,
        metavar="B",
        help=f"average job size for Redis memory (default {job_bytes})",
    )
    p.add_argument(
        "--shard-ops",
        type=float,
        default=shard_ops,
        metavar="N",
        help=f"Redis commands a second per shard (default {shard_ops:g})",
    )
    p.add_argument(
        "--shard-memory-gib",
        type=float,
        default=8.0,
        metavar="G",
        help="usable memory per Redis shard (default 8)",
    )
    p.add_argument(
        "--target-wait-s",
        type=float,
        default=60.0,
        metavar="S",
        help="dry-run: also find the quota (up to 8x the proposal) that keeps the longest wait "
        "within S seconds (default 60)",
    )
    p.add_argument("--top", type=int, default=8, metavar="N", help="topics charted (default 8)")
    p.add_argument("--driver-memory", default="4g", help="local runs: driver memory (4g)")
    p.add_argument(
        "--jit",
        choices=("quick", "full"),
        default="quick",
        help="local runs: the JVM's quick compiler only (default; jobs of minutes) or full "
        "(long runs of many millions of rows)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def worker_capacity(args: argparse.Namespace, default: float) -> tuple[float, str]:
    """The per-worker capacity and where it came from."""
    from emq.core.errors import InvalidInput

    if args.worker_qps is not None:
        if args.worker_qps <= 0:
            raise InvalidInput("--worker-qps", f"must be positive, got {args.worker_qps}")
        return args.worker_qps, "configured"
    if args.worker_bench is None:
        return default, "default"
    try:
        data = json.loads(Path(args.worker_bench).read_text())
    except (OSError, ValueError) as e:
        raise InvalidInput("--worker-bench", f"cannot read {args.worker_bench}: {e}") from None
    for scope in (data, data.get("result", {}) if isinstance(data, dict) else {}):
        for name in WORKER_BENCH_FIELDS:
            value = scope.get(name) if isinstance(scope, dict) else None
            if isinstance(value, int | float) and value > 0:
                return float(value), f"benchmark {args.worker_bench} ({name})"
    fields = ", ".join(WORKER_BENCH_FIELDS)
    raise InvalidInput("--worker-bench", f"{args.worker_bench} has none of {fields}")


def options(args: argparse.Namespace, max_group_qps: int | None = None) -> Any:
    """The job's :class:`~spark.planning.PlanOptions` from parsed flags (checked)."""
    from capacity.plan import DEFAULT_WORKER_QPS
    from emq.core.errors import InvalidInput
    from spark.planning import PlanOptions

    if not args.headroom > 0:
        raise InvalidInput("--headroom", f"must be positive, got {args.headroom}")
    for flag, value in (("--top", args.top), ("--spare-workers", args.spare_workers)):
        if value < 0:
            raise InvalidInput(flag, f"must be 0 or more, got {value}")
    group_cap = args.max_group_qps or max_group_qps or 150
    if group_cap < 1:
        raise InvalidInput("--max-group-qps", f"must be positive, got {group_cap}")
    if not args.target_wait_s > 0:
        raise InvalidInput("--target-wait-s", f"must be positive, got {args.target_wait_s}")
    if args.job_bytes < 1 or args.shard_ops <= 0 or args.shard_memory_gib <= 0:
        raise InvalidInput("--job-bytes", "job size and shard limits must be positive")
    qps, source = worker_capacity(args, DEFAULT_WORKER_QPS)
    return PlanOptions(
        headroom=args.headroom,
        max_group_qps=group_cap,
        worker_qps=qps,
        worker_qps_source=source,
        spare_workers=args.spare_workers,
        job_bytes=args.job_bytes,
        shard_ops=args.shard_ops,
        shard_memory_bytes=int(args.shard_memory_gib * 1024**3),
        top=args.top,
        target_wait_s=args.target_wait_s,
    )


def execute(args: argparse.Namespace, *, max_group_qps: int | None = None) -> int:
    """Run the job for parsed flags and print its summary; errors are ``EmqError``."""
    from spark.run import check_paths, run, summary_lines
    from spark.session import Progress, spark_session

    opts = options(args, max_group_qps)
    check_paths(args.history, args.out)  # before paying for Spark's start
    progress = Progress(None, STEPS, quiet=args.quiet)
    started = time.monotonic()
    with ExitStack() as stack:
        with progress.step("starting Spark"):
            session = spark_session("emq-plan", args.master, args.driver_memory, args.jit)
            spark = stack.enter_context(session)
        progress.attach(spark)
        result = run(spark, args.history, args.out, opts, progress)
    result["seconds"] = round(time.monotonic() - started, 2)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print("\n".join(summary_lines(result)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The spark-submit entry point: ``plan_job.py --history DIR --out DIR [...]``."""
    from emq.core.errors import EmqError

    args = build_parser().parse_args(argv)
    try:
        return execute(args)
    except EmqError as e:
        print(f"plan_job: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
