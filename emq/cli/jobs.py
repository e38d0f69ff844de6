"""``emq job show ID --tenant T --topic X``: one job's state and, while it waits, why."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from emq.cli.attempts import add_job_commands
from emq.cli.common import command, group, print_json, run

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings

# The state fields worth a line each, in the order a reader wants them.
_FIELDS = (
    "until",
    "position",
    "position_exact",
    "eta_s",
    "worker",
    "attempt",
    "next_attempt_at",
    "last_status",
    "last_error",
    "delivered_at",
    "status",
    "latency_ms",
    "attempts",
    "failed_at",
    "error",
    "priority",
    "group",
    "enqueued_at",
)


def cmd_job_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.job_status(args.tenant, args.topic, args.id))
    if args.json:
        print_json(body)
        return 0
    print(f"{body['id']}  {body['state']}")
    reason = body.get("reason")
    if reason:
        until = f" (until {reason['until']})" if reason.get("until") else ""
        print(f"  reason: {reason['code']}: {reason['detail']}{until}")
    for name in _FIELDS:
        value: Any = body.get(name)
        if value is not None:
            print(f"  {name}: {value}")
    return 0


def add_commands(sub: Subparsers) -> None:
    """Register ``job show`` on ``emq``'s subparsers."""
    job = group(sub, "job", "look up one job", "A job's state and why it waits, by its id.")
    show = command(
        job,
        "show",
        cmd_job_show,
        role="tenant",
        help="show a job's state and why it waits",
        description="Show where a job is (delayed, queued, buffered, in_flight, retry_wait, "
        "delivered, dead) and, while it waits, the reason.",
    )
    show.add_argument("id", metavar="ID", help="the job id (msg_...) the enqueue answered")
    show.add_argument("--tenant", required=True, help="tenant name")
    show.add_argument("--topic", required=True, help="topic name")
    add_job_commands(job)
