"""``emq schedule create|list|show|pause|resume|delete|next`` and ``emq scheduler``.

A schedule fires a job template on a cron expression (docs/concepts/schedules.md). The
``schedule`` commands talk to the API; ``emq scheduler`` is a firer process of its own (the API
processes run one too unless ``EMQ_SCHEDULER_IN_API=false``; any number at once is safe).
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, group, print_json, run, table, tenant_and_topic
from emq.cli.enqueue import _header
from emq.cli.replays import epoch_of
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _job(args: argparse.Namespace) -> dict[str, Any]:
    job: dict[str, Any] = {"url": args.url}
    if args.method:
        job["method"] = args.method
    if args.header:
        job["headers"] = dict(args.header)
    if args.body is not None:
        job["body"] = args.body
    if args.priority:
        job["priority"] = args.priority
    if args.key:
        job["key"] = args.key
    return job


def _options(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("start_at", "end_at"):
        value = epoch_of(getattr(args, name), "--" + name.replace("_", "-"))
        if value is not None:
            out[name] = value
    if args.catch_up:
        out["catch_up"] = args.catch_up
    if args.catch_up_max is not None:
        out["catch_up_max"] = args.catch_up_max
    if args.paused:
        out["paused"] = True
    return out


def _line(s: dict[str, Any]) -> str:
    nxt = s["next_tick"]["local"] if s.get("next_tick") else "-"
    last = s.get("last_tick")
    fired = f"{last['local']} job {last['job_id']} ({last['job_state'] or '?'})" if last else "-"
    state = "paused" if s["paused"] else "active"
    return (
        f"schedule {s['id']}: '{s['cron']}' {s['timezone']}, {state}, next {nxt}, last {fired}; "
        f"fired {s['fired']}, late {s['late']}, skipped {s['skipped']}"
    )


def _print(args: argparse.Namespace, body: dict[str, Any]) -> int:
    if args.json:
        print_json(body)
    else:
        print(_line(body))
    return 0


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    job, options = _job(args), _options(args)
    body = run(args, settings, lambda c: c.create_schedule(
        args.tenant, args.topic, args.cron, job, schedule_id=args.id, timezone=args.timezone,
        **options,
    ))  # fmt: skip
    return _print(args, body)


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    rows = run(args, settings, lambda c: c.list_schedules(args.tenant, args.topic))
    if args.json:
        print_json({"schedules": rows})
        return 0
    table(
        ("ID", "CRON", "TIMEZONE", "STATE", "NEXT", "FIRED", "LATE", "SKIPPED"),
        [
            (s["id"], s["cron"], s["timezone"], "paused" if s["paused"] else "active",
             s["next_tick"]["local"] if s.get("next_tick") else None, s["fired"], s["late"],
             s["skipped"])
            for s in rows
        ],
        "no schedules",
    )  # fmt: skip
    return 0


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.get_schedule(args.tenant, args.topic, args.schedule))
    if args.json:
        print_json(body)
        return 0
    print(_line(body))
    for tick in body["next_ticks"]:
        print(f"  next: {tick['local']}")
    return 0


def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.pause_schedule(args.tenant, args.topic, args.schedule))
    return _print(args, body)


def cmd_resume(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.resume_schedule(args.tenant, args.topic, args.schedule))
    return _print(args, body)


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.delete_schedule(args.tenant, args.topic, args.schedule))
    if args.json:
        print_json(body)
    else:
        print(f"schedule {body['id']} deleted")
    return 0


def cmd_next(args: argparse.Namespace, settings: Settings) -> int:
    """The next ticks of a stored schedule, or (``--cron``) of an expression, computed here."""
    if args.cron is not None:
        ticks = _preview(args.cron, args.timezone or "UTC", args.count)
    else:
        if not (args.tenant and args.topic and args.schedule):
            raise InvalidInput("--cron", "give TENANT TOPIC SCHEDULE, or --cron EXPR")
        body = run(args, settings, lambda c: c.get_schedule(
            args.tenant, args.topic, args.schedule, next_ticks=args.count))  # fmt: skip
        ticks = body["next_ticks"]
    if args.json:
        print_json({"next_ticks": ticks})
    else:
        for tick in ticks:
            print(tick["local"])
    return 0


def _preview(cron: str, timezone: str, count: int) -> list[dict[str, Any]]:
    from datetime import datetime

    from emq.core.schedules import parse_cron, parse_zone, ticks_after

    zone = parse_zone(timezone)
    ticks = ticks_after(parse_cron(cron), zone, time.time(), count)
    return [{"at": t, "local": datetime.fromtimestamp(t, zone).isoformat()} for t in ticks]


def cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    """``emq scheduler``: a firer process of its own, until SIGTERM/SIGINT."""
    import uvloop

    from emq.scheduler.process import run_scheduler

    uvloop.run(run_scheduler(settings, args.sections["scheduler"], args.metrics_port))
    return 0


def _template_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", help="HTTP method (default POST)")
    p.add_argument("--header", action="append", type=_header, metavar="'NAME: VALUE'",
                   help="a header of the job (repeat for more)")  # fmt: skip
    p.add_argument("--body", metavar="TEXT", help="the job's request body")
    p.add_argument("--priority", choices=["high", "medium", "low"], help="default medium")
    p.add_argument("--key", metavar="K", help="same key: same group, order kept")


def add_commands(sub: Subparsers) -> None:
    """Register ``schedule`` and ``scheduler`` on ``emq``'s subparsers."""
    sched = group(
        sub,
        "schedule",
        "cron schedules of a topic",
        "A schedule enqueues its job template at every tick of a cron expression in a time "
        "zone: one job per tick (docs/concepts/schedules.md).",
    )
    create = command(sched, "create", cmd_create, role="tenant", help="create a schedule",
                     description="Create a schedule: --cron and --url at least.")  # fmt: skip
    tenant_and_topic(create)
    create.add_argument("--cron", required=True, metavar="EXPR",
                        help="5 fields, or 6 with a leading seconds field")  # fmt: skip
    create.add_argument("--url", required=True, help="the job's destination (http or https)")
    create.add_argument("--id", metavar="ID", help="the schedule's id (default: generated)")
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone (default UTC)")
    _template_flags(create)
    create.add_argument("--start-at", dest="start_at", metavar="WHEN",
                        help="no tick before (epoch seconds or ISO date, UTC)")  # fmt: skip
    create.add_argument("--end-at", dest="end_at", metavar="WHEN", help="no tick after")
    create.add_argument("--catch-up", dest="catch_up", choices=["skip", "latest", "all"],
                        help="what a firer does with late ticks (default latest)")  # fmt: skip
    create.add_argument(
        "--catch-up-max",
        dest="catch_up_max",
        type=int,
        metavar="N",
        help="with --catch-up all: the most late ticks fired (default 10)",
    )
    create.add_argument("--paused", action="store_true", help="create it paused")
    listing = command(
        sched,
        "list",
        cmd_list,
        role="tenant",
        help="list a topic's schedules",
        description="A topic's schedules with their next tick and counters.",
    )
    tenant_and_topic(listing)
    for name, func, text in (
        ("show", cmd_show, "a schedule: last tick fired, its job and state, the next five"),
        ("pause", cmd_pause, "pause a schedule (its ticks are not fired until resumed)"),
        ("resume", cmd_resume, "resume a schedule from its next tick after now"),
        ("delete", cmd_delete, "delete a schedule (the jobs it enqueued stay)"),
    ):
        p = command(sched, name, func, role="tenant", help=text, description=text.capitalize())
        tenant_and_topic(p)
        p.add_argument("schedule", metavar="SCHEDULE", help="the schedule's id")
    nxt = command(sched, "next", cmd_next, role="tenant", help="the next ticks",
                  description="The next ticks of a schedule, or of --cron EXPR [--timezone TZ] "
                  "computed locally (a preview, nothing stored).")  # fmt: skip
    nxt.add_argument("tenant", metavar="TENANT", nargs="?")
    nxt.add_argument("topic", metavar="TOPIC", nargs="?")
    nxt.add_argument("schedule", metavar="SCHEDULE", nargs="?")
    nxt.add_argument("--cron", metavar="EXPR", help="preview an expression instead")
    nxt.add_argument("--timezone", metavar="TZ", help="with --cron (default UTC)")
    nxt.add_argument("--count", "-n", type=int, default=5, choices=range(1, 101),
                     metavar="N", help="how many (1-100, default 5)")  # fmt: skip
    proc = sub.add_parser(
        "scheduler",
        help="run a schedule firer",
        description="Fire due schedule ticks until SIGTERM (EMQ_SCHEDULER_*). Safe beside "
        "others and beside the API's own firers: each tick makes one job.",
    )
    proc.add_argument("--metrics-port", type=int, default=0, metavar="PORT",
                      help="serve Prometheus metrics on this port (0: none)")  # fmt: skip
    proc.set_defaults(func=cmd_scheduler)
