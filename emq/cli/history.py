"""Traffic history on the command line: ``emq history synth|export``.

Both drive code in ``spark/`` (imported only when one of these commands runs, so the rest of
``emq`` starts without pyspark): ``synth`` generates synthetic history with Spark, ``export``
writes what the API and the workers recorded in Redis as Parquet for ``emq plan run``
(:mod:`emq.cli.capacity`).
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from emq.cli.common import print_json
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _epoch(text: str | None, flag: str) -> int | None:
    """Epoch seconds from ``1735689600`` or ``2025-01-01[THH:MM[:SS]]`` (UTC)."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(flag, f"expected epoch seconds or an ISO date, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


# ----------------------------------------------------------------------------- history synth


def cmd_history_synth(args: argparse.Namespace, settings: Settings) -> int:
    from spark.synth_job import execute

    return execute(args, max_group_qps=settings.max_group_qps)


# ----------------------------------------------------------------------------- history export


async def _read_history(settings: Settings, folder: Any, since_s: int | None) -> None:
    from emq.compose import open_history

    async with open_history(settings) as store:
        async for batch in store.read(since_s=since_s):
            folder.add(batch)


def cmd_history_export(args: argparse.Namespace, settings: Settings) -> int:
    from spark.history import Folder, read_marker, utc_date, write_marker, write_rows

    marker = read_marker(args.out)
    if marker and marker.get("source") != "export":
        raise InvalidInput(
            "--out", f"{args.out} holds {marker.get('source')} history, not an export"
        )
    interval = args.interval_s or marker.get("interval_s")  # None: as recorded
    if marker and interval != marker.get("interval_s"):
        kept = f"{marker['interval_s']}-s" if marker.get("interval_s") else "as-recorded"
        raise InvalidInput("--interval-s", f"{args.out} holds {kept} intervals; keep them")
    if interval is not None and interval < 1:
        raise InvalidInput("--interval-s", f"must be positive, got {interval}")
    done = marker.get("next_since")  # where the previous export into this DIR stopped
    since = _epoch(args.since, "--since")
    if since is not None and isinstance(done, int) and since < done:
        raise InvalidInput(
            "--since", f"{args.out} already holds the history before {done}: export elsewhere"
        )
    folder = Folder(interval)
    import uvloop

    uvloop.run(_read_history(settings, folder, since if since is not None else done))
    rows = folder.rows(ended_by=int(time.time()) - args.settle_s)
    written = write_rows(rows, args.out)
    next_since = folder.next_since(rows, done if isinstance(done, int) else None)
    exported = int(marker.get("rows") or 0) + len(rows)
    write_marker(
        args.out,
        source="export",
        aggregated=True,
        interval_s=interval,
        next_since=next_since,
        rows=exported,
    )
    result = {
        "out": args.out,
        "read": folder.read,
        "rows": len(rows),
        "files": [str(p) for p in written],
        "first": utc_date(rows[0].interval_start) if rows else None,
        "last": utc_date(rows[-1].interval_start) if rows else None,
        "interval_s": interval,
        "next_since": next_since,
        "topics": len({(r.namespace, r.tenant, r.topic) for r in rows}),
    }
    if args.json:
        print_json(result)
    elif rows:
        print(
            f"exported {len(rows):,} rows ({result['topics']} topics, "
            f"{result['first']} to {result['last']}) from {folder.read:,} recorded rows "
            f"into {len(written)} file(s) under {args.out}"
        )
    else:
        print(f"nothing new to export ({folder.read:,} recorded rows read)")
    return 0


# ----------------------------------------------------------------------------- parsers


def add_commands(sub: Subparsers) -> None:
    """Register ``history synth|export`` on ``emq``'s subparsers."""
    from spark import synth_job

    history = sub.add_parser(
        "history",
        help="traffic history for capacity planning (Parquet)",
        description="Traffic history: per topic and interval, jobs enqueued, delivered, "
        "throttled, failed, retried and dead-lettered, latency, quota and groups, as Parquet "
        "partitioned by date (the schema is in spark/README.md).",
    )
    actions = history.add_subparsers(dest="action", metavar="ACTION", required=True)
    synth = actions.add_parser(
        "synth",
        help="generate realistic synthetic history with Spark",
        description="Generate synthetic history with Spark: daily and weekly cycles, bursts, "
        "growth, batch topics, a few hot tenants and a few idle topics. The same options and "
        "seed give the same history. 10k topics x 7 days at 60 s is about 100M rows.",
    )
    synth_job.add_arguments(synth)
    synth.set_defaults(func=cmd_history_synth)

    export = actions.add_parser(
        "export",
        help="write the recorded history (Redis) as Parquet",
        description="Read the history the API and the workers recorded in Redis, add up the "
        "rows of every source per topic and interval, and append them to DIR as Parquet "
        "partitioned by date. Repeated exports into the same DIR continue where the last one "
        "stopped (DIR/_emq_history.json records where); intervals that ended less than "
        "--settle-s ago wait for the next export, as their rows may still arrive.",
    )
    export.add_argument("--out", required=True, metavar="DIR", help="history directory")
    export.add_argument(
        "--interval-s", type=int, metavar="S", help="interval of the export (default 60, or DIR's)"
    )
    export.add_argument(
        "--since", metavar="WHEN", help="only intervals from then (epoch seconds or ISO date, UTC)"
    )
    export.add_argument(
        "--settle-s",
        type=int,
        default=120,
        metavar="S",
        help="skip intervals that ended less than S seconds ago (default 120)",
    )
    export.add_argument("--json", action="store_true", help="print the result as JSON")
    export.set_defaults(func=cmd_history_export)
