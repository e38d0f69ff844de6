"""``emq dlq replay --rate``, ``emq dlq replays``, ``emq dlq cancel``: paced DLQ replays.

A paced replay (docs/concepts/replays.md) moves a topic's dead letters back into its
queues at its rate (letters moved per second): they are then delivered with the live jobs
within the topic's quota, so a replay never takes more than its rate of the quota, and under a
live backlog its letters go out more slowly than that (worker.replay); these commands start
one, show progress and cancel it. Each prints a readable line or table, or the API's JSON
with ``--json``.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, print_json, run, table, tenant_and_topic, when
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def paced(args: argparse.Namespace) -> bool:
    """Whether ``emq dlq replay`` asks for a paced replay (any of its flags given)."""
    return bool(args.paced or args.rate is not None or args.since or args.until)


def epoch_of(text: str | None, flag: str) -> float | None:
    """Epoch seconds from ``1735689600[.5]`` or an ISO date ``2025-01-01[THH:MM[:SS]]`` (UTC)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(flag, f"expected epoch seconds or an ISO date, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def cmd_replay_start(args: argparse.Namespace, settings: Settings) -> int:
    """``emq dlq replay`` with ``--rate``/``--paced``/``--since``/``--until``."""
    if args.limit is not None:
        raise InvalidInput("--limit", "is for an immediate replay; a paced one takes all, --id "
                           "or --since/--until")  # fmt: skip
    since, until = epoch_of(args.since, "--since"), epoch_of(args.until, "--until")
    body = run(
        args,
        settings,
        lambda c: c.replay_start(
            args.tenant, args.topic, ids=args.id, since=since, until=until, rate=args.rate
        ),
    )
    if args.json:
        print_json(body)
    else:
        print(
            f"replay {body['id']} started: {body['total']} dead letters moved back at "
            f"{body['rate']:g}/s "
            f"(emq dlq replays {args.tenant} {args.topic} --id {body['id']})"
        )
    return 0


def progress_line(r: dict[str, Any], what: str = "replay", done_as: str = "replayed") -> str:
    """One paced replay's progress (a redelivery's too: ``emq.cli.attempts``)."""
    done = r["replayed"] + r["skipped"]
    share = 100.0 * done / r["total"] if r["total"] else 100.0
    return (
        f"{what} {r['id']}: {r['state']}, {r['replayed']} of {r['total']} {done_as} "
        f"({share:.0f}%), {r['skipped']} skipped, {r['remaining']} remaining, {r['rate']:g}/s"
    )



def cmd_replays(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.replays(args.tenant, args.topic, replay_id=args.id))
    if args.json:
        print_json(body)
        return 0
    if args.id:
        print(progress_line(body))
        return 0
    rows = [
        (r["id"], r["state"], r["mode"], f"{r['rate']:g}", r["total"], r["replayed"],
         r["skipped"], r["remaining"], when(r["created_at"]))
        for r in body["replays"]
    ]  # fmt: skip
    headers = ("ID", "STATE", "MODE", "RATE", "TOTAL", "REPLAYED", "SKIPPED", "LEFT", "CREATED")
    table(headers, rows, "no replays")
    return 0


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.replay_cancel(args.tenant, args.topic, args.replay))
    if args.json:
        print_json(body)
    else:
        print(progress_line(body))
    return 0


def add_replay_flags(replay: argparse.ArgumentParser) -> None:
    """The paced replay's flags on ``emq dlq replay``."""
    replay.add_argument(
        "--rate",
        type=float,
        metavar="R",
        help="paced: move R letters per second back into the topic's queues (they are "
        "delivered with its live jobs within its quota: at most R/s, less under a live backlog)",
    )
    replay.add_argument(
        "--paced",
        action="store_true",
        help="paced at the default rate (5%% of the topic's quota)",
    )
    replay.add_argument("--since", metavar="T", help="paced: letters that failed at or after T")
    replay.add_argument("--until", metavar="T", help="paced: letters that failed at or before T")


def add_commands(dlq: Subparsers) -> None:
    """Register ``replays`` and ``cancel`` on ``emq dlq``."""
    listing = command(
        dlq,
        "replays",
        cmd_replays,
        role="tenant",
        help="show paced replays and their progress",
        description="A topic's latest paced replays (or, with --id, one) with their progress.",
    )
    tenant_and_topic(listing)
    listing.add_argument("--id", metavar="ID", help="one replay (rpl_...)")
    cancel = command(
        dlq,
        "cancel",
        cmd_cancel,
        role="tenant",
        help="cancel a paced replay",
        description="Stop a paced replay; the letters it put back stay in their queues, the "
        "rest stay in the DLQ.",
    )
    tenant_and_topic(cancel)
    cancel.add_argument("replay", metavar="REPLAY", help="the replay's id (rpl_...)")
