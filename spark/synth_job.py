"""The synthetic-history job: ``emq history synth`` and ``spark-submit spark/synth_job.py``.

Only the standard library is imported at module level (the ``emq`` command line builds its
parser from :func:`add_arguments` without loading pyspark), and the repository root is put on
``sys.path`` when this file runs as a script.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The job's flags (shared by ``emq history synth`` and ``spark-submit synth_job.py``)."""
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--topics", type=int, required=True, metavar="N", help="number of topics")
    p.add_argument("--days", type=int, required=True, metavar="D", help="days of history")
    p.add_argument(
        "--interval-s",
        type=int,
        default=60,
        metavar="S",
        help="interval length (default 60; must divide a day)",
    )
    p.add_argument("--seed", type=int, default=1, metavar="K", help="random seed (default 1)")
    p.add_argument(
        "--start", metavar="YYYY-MM-DD", help="first day, UTC (default: D days before today)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace DIR if it holds history already"
    )
    p.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    p.add_argument("--driver-memory", default="4g", help="local runs: driver memory (4g)")
    p.add_argument(
        "--jit",
        choices=("quick", "full"),
        default="quick",
        help="local runs: the JVM's quick compiler only (default; jobs of minutes) or full "
        "(long runs of many millions of rows)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _midnight(text: str | None) -> int | None:
    from emq.core.errors import InvalidInput

    if text is None:
        return None
    try:
        day = datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        raise InvalidInput("--start", f"expected YYYY-MM-DD, got {text!r}") from None
    return int(day.timestamp())


def execute(args: argparse.Namespace, *, max_group_qps: int | None = None) -> int:
    """Write the synthetic history for parsed flags; errors are ``EmqError``."""
    from capacity.split import DEFAULT_MAX_GROUP_QPS
    from spark.session import Progress, cpu_seconds, spark_session
    from spark.synth import SynthOptions, synthesize

    options = SynthOptions(
        topics=args.topics,
        days=args.days,
        interval_s=args.interval_s,
        seed=args.seed,
        start_s=_midnight(args.start),
        max_group_qps=max_group_qps or DEFAULT_MAX_GROUP_QPS,
    )
    options.check()
    progress = Progress(None, 2, quiet=args.quiet)
    with ExitStack() as stack:
        with progress.step("starting Spark"):
            session = spark_session("emq-synth", args.master, args.driver_memory, args.jit)
            spark = stack.enter_context(session)
        progress.attach(spark)
        with progress.step(f"writing {options.rows:,} rows to {args.out}"):
            result = synthesize(spark, options, args.out, overwrite=args.overwrite)
        result["cpu_s"] = {"jvm": cpu_seconds(spark)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"wrote {result['rows']:,} rows ({result['topics']} topics x {result['days']} days "
            f"at {result['interval_s']} s, from {result['start']}) to {result['out']} in "
            f"{result['seconds']:.1f} s ({result['rows_per_s']:,} rows/s)"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from emq.core.errors import EmqError

    parser = argparse.ArgumentParser(
        prog="synth_job.py", description="Generate synthetic EMQ traffic history with Spark."
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return execute(args)
    except EmqError as e:
        print(f"synth_job: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
