"""``emq job attempts``, ``emq job list``, ``emq topic set-record`` and ``emq redelivery
start|list|cancel`` (docs/concepts/attempts.md): a job's attempts, the search over a topic's
retained job records, a topic's attempt-log and callback settings, and paced redeliveries of
what was delivered since a time. Each prints a readable table or line, or the API's JSON with
``--json``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, group, print_json, run, table, tenant_and_topic, when
from emq.cli.replays import epoch_of, progress_line
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def cmd_attempts(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.job_attempts(args.tenant, args.topic, args.id))
    if args.json:
        print_json(body)
        return 0
    rows = []
    for a in body["attempts"]:
        answer = str(a["status"]) if a.get("status") else a["outcome"]
        detail = a.get("detail") or ", ".join(f"{k}: {v}" for k, v in a["headers"].items())
        rows.append((a["attempt"], _ms(a["started_at_ms"]), f"{a['duration_ms']} ms", answer,
                     detail))  # fmt: skip
    table(("N", "STARTED (UTC)", "TOOK", "ANSWER", "DETAIL"), rows, "no attempts recorded")
    for a in body["attempts"]:
        if "response_excerpt" in a:
            print(f"  attempt {a['attempt']} answered: {a['response_excerpt']!r}")
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    filters: dict[str, Any] = {
        "state": args.state,
        "key": args.key,
        "idempotency_key": args.idempotency_key,
        "since": epoch_of(args.since, "--since"),
        "until": epoch_of(args.until, "--until"),
        "limit": args.limit,
        "cursor": args.cursor,
    }
    body = run(args, settings, lambda c: c.search_jobs(args.tenant, args.topic, **filters))
    if args.json:
        print_json(body)
        return 0
    rows = [
        (j["id"], j["state"], _ms(j["at_ms"]), j["attempts"], j["status"] or "-",
         j["last_error"] or "")
        for j in body["jobs"]
    ]  # fmt: skip
    table(("ID", "STATE", "AT (UTC)", "ATTEMPTS", "STATUS", "LAST ERROR"), rows, "no jobs found")
    if body.get("next_cursor"):
        print(f"more: --cursor {body['next_cursor']}")
    return 0


def cmd_set_record(args: argparse.Namespace, settings: Settings) -> int:
    changes = {
        "response_excerpt_bytes": args.response_excerpt_bytes,
        "callback_url": args.callback_url,
        "failure_callback_url": args.failure_callback_url,
        "keep_delivered_s": args.keep_delivered_s,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise InvalidInput(None, "nothing to change; give at least one flag (see --help)")
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, **changes))
    if args.json:
        print_json(body)
    else:
        print(", ".join(f"{k}={body.get(k)!r}" for k in changes))
    return 0


def _line(r: dict[str, Any]) -> str:
    return progress_line(r, "redelivery", "sent again")


def cmd_redeliver(args: argparse.Namespace, settings: Settings) -> int:
    since = epoch_of(args.since, "--since")
    assert since is not None  # (required)
    until = epoch_of(args.until, "--until")
    body = run(
        args,
        settings,
        lambda c: c.redeliver(args.tenant, args.topic, since, until=until, rate=args.rate),
    )
    if args.json:
        print_json(body)
    else:
        print(_line(body))
    return 0


def cmd_redeliveries(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.redeliveries(args.tenant, args.topic, replay_id=args.id))
    if args.json:
        print_json(body)
        return 0
    if args.id:
        print(_line(body))
        return 0
    rows = [
        (r["id"], r["state"], f"{r['rate']:g}", r["total"], r["replayed"], r["remaining"],
         when(r["created_at"]))
        for r in body["redeliveries"]
    ]  # fmt: skip
    table(("ID", "STATE", "RATE", "TOTAL", "SENT", "LEFT", "CREATED"), rows, "no redeliveries")
    return 0


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.redelivery_cancel(args.tenant, args.topic, args.id))
    if args.json:
        print_json(body)
    else:
        print(_line(body))
    return 0


def add_job_commands(job: Subparsers) -> None:
    """``job attempts`` and ``job list`` on ``emq job``."""
    attempts = command(
        job,
        "attempts",
        cmd_attempts,
        role="tenant",
        help="show a job's attempts",
        description="Every recorded attempt of a job: when, how long, what the endpoint "
        "answered (or how it failed), the kept headers and body excerpt.",
    )
    attempts.add_argument("id", metavar="ID", help="the job id (msg_...)")
    attempts.add_argument("--tenant", required=True, help="tenant name")
    attempts.add_argument("--topic", required=True, help="topic name")
    listing = command(
        job,
        "list",
        cmd_list,
        role="tenant",
        help="find a topic's jobs by state, key or time",
        description="The topic's jobs whose records are retained (EMQ_JOB_RECORD_TTL_S), "
        "newest outcome first.",
    )
    listing.add_argument("--tenant", required=True, help="tenant name")
    listing.add_argument("--topic", required=True, help="topic name")
    listing.add_argument("--state", help="delivered, retry_wait or dead")
    listing.add_argument("--key", help="the jobs of one business key")
    listing.add_argument("--idempotency-key", help="the job of one idempotency key")
    listing.add_argument("--since", metavar="T", help="outcomes at or after T (epoch or ISO)")
    listing.add_argument("--until", metavar="T", help="outcomes at or before T")
    listing.add_argument("--limit", type=int, help="at most N jobs (default 50)")
    listing.add_argument("--cursor", help="the next page (printed after a full page)")


def add_commands(sub: Subparsers) -> None:
    """``emq redelivery start|list|cancel`` and ``emq topic set-record`` (via ``topic``)."""
    redelivery = group(
        sub,
        "redelivery",
        "send delivered jobs again, paced",
        "Send again the jobs a topic delivered since a time (it keeps them for its "
        "keep_delivered_s), each as a new attempt with the same webhook-id.",
    )
    start = command(
        redelivery,
        "start",
        cmd_redeliver,
        role="tenant",
        help="start a redelivery",
        description="Send again, at --rate jobs per second, the jobs delivered between "
        "--since and --until (default: now).",
    )
    tenant_and_topic(start)
    start.add_argument("--since", metavar="T", required=True, help="epoch seconds or ISO date")
    start.add_argument("--until", metavar="T", help="epoch seconds or ISO date (default now)")
    start.add_argument("--rate", type=float, metavar="R", help="jobs per second (default 5%%)")
    listing = command(
        redelivery,
        "list",
        cmd_redeliveries,
        role="tenant",
        help="show redeliveries and their progress",
        description="A topic's latest redeliveries (or, with --id, one) with their progress.",
    )
    tenant_and_topic(listing)
    listing.add_argument("--id", metavar="ID", help="one redelivery (rpl_...)")
    cancel = command(
        redelivery,
        "cancel",
        cmd_cancel,
        role="tenant",
        help="cancel a redelivery",
        description="Stop a redelivery; what it sent stays sent.",
    )
    tenant_and_topic(cancel)
    cancel.add_argument("id", metavar="ID", help="the redelivery's id (rpl_...)")


def add_topic_commands(topic: Subparsers) -> None:
    """``topic set-record`` on ``emq topic``."""
    p = command(
        topic,
        "set-record",
        cmd_set_record,
        role="admin",
        help="set its attempt log, callbacks and kept deliveries",
        description="The response bytes kept per attempt, the callback URLs of jobs that name "
        "none ('' for none) and how long delivered jobs are kept for redeliveries.",
    )
    tenant_and_topic(p)
    p.add_argument("--response-excerpt-bytes", type=int, metavar="N", help="0-4096")
    p.add_argument("--callback-url", metavar="URL", help="told each delivered (or dead) job")
    p.add_argument("--failure-callback-url", metavar="URL", help="told each dead job")
    p.add_argument("--keep-delivered-s", type=int, metavar="S", help="0 (off) to 604800")
