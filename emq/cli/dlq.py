"""``emq dlq list|replay|replays|cancel``: a topic's dead letters.

``replay`` with ``--rate``, ``--paced``, ``--since`` or ``--until`` starts a paced replay
(:mod:`emq.cli.replays`); without them it puts letters back at once, as before.

Each prints a readable table or lines, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from emq.cli import replays
from emq.cli.common import command, group, print_json, run, table, tenant_and_topic, when

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def cmd_dlq_list(args: argparse.Namespace, settings: Settings) -> int:
    body = run(
        args,
        settings,
        lambda c: c.dlq_list(args.tenant, args.topic, limit=args.limit, cursor=args.cursor),
    )
    if args.json:
        print_json(body)
        return 0
    rows = [
        (
            d["id"],
            d["job_id"],
            d["priority"],
            d["attempts"],
            d["status"],
            when(d["failed_at"]),
            d["error"],
        )
        for d in body["dead"]
    ]
    headers = ("ID", "JOB", "PRIORITY", "ATTEMPTS", "STATUS", "FAILED", "ERROR")
    table(headers, rows, "no dead letters")
    if body.get("next_cursor"):
        print(f"(more: --cursor {body['next_cursor']})")
    return 0


def cmd_dlq_replay(args: argparse.Namespace, settings: Settings) -> int:
    if replays.paced(args):
        return replays.cmd_replay_start(args, settings)
    body = run(
        args,
        settings,
        lambda c: c.dlq_replay(args.tenant, args.topic, ids=args.id, limit=args.limit),
    )
    if args.json:
        print_json(body)
    else:
        print(f"replayed {body['replayed']} dead letters (delivered again at the topic's quota)")
    return 0


def add_commands(sub: Subparsers) -> None:
    """Register ``dlq`` on ``emq``'s subparsers."""
    dlq = group(
        sub,
        "dlq",
        "list and replay dead letters",
        "Jobs that exhausted their attempts wait in their topic's dead-letter queue.",
    )
    listing = command(
        dlq,
        "list",
        cmd_dlq_list,
        role="tenant",
        help="list a topic's dead letters",
        description="List dead letters with their last error, a page at a time.",
    )
    tenant_and_topic(listing)
    listing.add_argument("--limit", type=int, metavar="N", help="page size (default 100)")
    listing.add_argument("--cursor", metavar="C", help="continue after a previous page")
    replay = command(
        dlq,
        "replay",
        cmd_dlq_replay,
        role="tenant",
        help="deliver dead letters again",
        description="Put dead letters back on their topic (these --id ones, or up "
        "to --limit of them); they are delivered at the topic's quota. With --rate, --paced, "
        "--since or --until: a paced replay, moving letters back at that rate, so live jobs "
        "keep the rest of the quota (see 'emq dlq replays' and 'emq dlq cancel').",
    )
    tenant_and_topic(replay)
    replay.add_argument("--id", action="append", metavar="ID", help="a dead letter (repeatable)")
    replay.add_argument("--limit", type=int, metavar="N", help="replay at most N (default 1000)")
    replays.add_replay_flags(replay)
    replays.add_commands(dlq)
