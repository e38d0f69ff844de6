"""``emq changes list|show|revert``: the recorded quota, split, weight and cap changes.

Every such change, made through the API, the CLI or ``emq plan apply``, is recorded with who,
when, before, after and why (:mod:`emq.api.changes`); these commands read the record and set a
change back. ``revert`` asks first (``--yes`` for scripts), and is refused when the fields have
changed since the change (``--force`` sets them back anyway).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from emq.cli.common import CommandFailed, group, print_json, run, table, when, why_flag
from emq.cli.common import command as api_command
from emq.cli.replays import epoch_of
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings

_AGO = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def since_epoch(text: str, now: float) -> float:
    """``--since``: ``90m``/``2h``/``7d`` ago, epoch seconds, or an ISO date (UTC if no zone)."""
    ago = _AGO.fullmatch(text.strip())
    if ago:
        return now - int(ago[1]) * _UNIT_S[ago[2]]
    try:
        epoch = epoch_of(text, "--since")
    except InvalidInput:
        raise CommandFailed(InvalidInput("--since", "expected 30m, 2h, 7d, epoch seconds or an "
                                         f"ISO date, got {text!r}")) from None  # fmt: skip
    assert epoch is not None  # (text is not None)
    return epoch


def where(c: dict[str, Any]) -> str:
    """A change's subject: ``ns/tenant/topic``, or ``ns/tenant`` for a tenant's cap."""
    return "/".join(p for p in (c["namespace"], c["tenant"], c["topic"]) if p)


def what(c: dict[str, Any]) -> str:
    """``qps 100 -> 300, groups 1 -> 2`` (``none``: no cap); ``created: qps 100, ...``."""

    def shown(v: object) -> str:
        return "none" if v is None else str(v)

    after = c["after"].items()
    if not c["before"] and c["topic"]:
        return "created: " + ", ".join(f"{k} {shown(v)}" for k, v in after)
    return ", ".join(f"{k} {shown(c['before'].get(k))} -> {shown(v)}" for k, v in after)


def cmd_changes_list(args: argparse.Namespace, settings: Settings) -> int:
    since = None if args.since is None else since_epoch(args.since, time.time())
    body = run(
        args,
        settings,
        lambda c: c.changes(
            namespace=args.namespace,
            tenant=args.tenant,
            topic=args.topic,
            since=since,
            limit=args.limit,
            cursor=args.cursor,
        ),
    )
    if args.json:
        print_json(body)
        return 0
    rows = [
        (c["id"], when(c["at"]), c["actor"], c["route"], where(c), what(c), c["reason"])
        for c in body["changes"]
    ]
    table(("ID", "WHEN", "WHO", "ROUTE", "WHERE", "CHANGE", "WHY"), rows, "no changes")
    if body.get("next_cursor"):
        print(f"(more: --cursor {body['next_cursor']})")
    return 0


def _print_change(c: dict[str, Any]) -> None:
    print(f"change {c['id']}: {where(c)}: {what(c)}")
    print(f"  by {c['actor']} via {c['route']} at {when(c['at'])}")
    if c["reason"]:
        print(f"  why: {c['reason']}")


def cmd_changes_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.change(args.id))
    if args.json:
        print_json(body)
    else:
        _print_change(body)
    return 0


def _confirmed(change: dict[str, Any]) -> bool:
    _print_change(change)
    back = ", ".join(f"{k} {v}" for k, v in change["before"].items())
    return input(f"set {where(change)} back to {back}? [y/N] ").strip().lower() in ("y", "yes")


def cmd_changes_revert(args: argparse.Namespace, settings: Settings) -> int:
    if not args.yes:
        if not sys.stdin.isatty():  # nobody to ask
            raise CommandFailed(InvalidInput("--yes", "revert asks for confirmation: pass --yes"))
        if not _confirmed(run(args, settings, lambda c: c.change(args.id))):
            print("not reverted", file=sys.stderr)
            return 1
    body = run(args, settings, lambda c: c.revert_change(args.id, force=args.force))
    if args.json:
        print_json(body)
    elif body["change"] is None:
        print(f"change {args.id}: its fields already hold their values before it; nothing to do")
    else:
        new = body["change"]
        print(f"reverted {args.id}: {where(new)}: {what(new)} (recorded as change {new['id']})")
    return 0


def add_commands(sub: Subparsers) -> None:
    """Register ``changes`` on ``emq``'s subparsers."""
    changes = group(
        sub,
        "changes",
        "the recorded quota, split, weight and cap changes; revert one",
        "Every change of a topic's quota, groups, weight or burst and of a tenant's cap, by "
        "the API, the CLI or 'emq plan apply', is recorded: who, when, before, after, why "
        "(kept EMQ_CHANGES_RETENTION_S).",
    )
    listing = api_command(
        changes, "list", cmd_changes_list, role="admin", topic=False,
        help="list recorded changes, newest first (admin)",
        description="List recorded changes, newest first, optionally of one tenant or topic.",
    )  # fmt: skip
    listing.add_argument("--namespace", choices=["online", "sandbox"], help="only this one")
    listing.add_argument("--tenant", help="only this tenant's changes")
    listing.add_argument("--topic", help="only this topic's changes")
    listing.add_argument("--since", metavar="WHEN", help="30m, 2h, 7d, epoch seconds or ISO date")
    listing.add_argument("--limit", type=int, metavar="N", help="at most N (default 50)")
    listing.add_argument("--cursor", help="go on from a listing's 'more' cursor")
    show = api_command(
        changes, "show", cmd_changes_show, role="admin", topic=False,
        help="show one change (admin)", description="Show one recorded change.",
    )  # fmt: skip
    show.add_argument("id", metavar="ID", help="the change's id (emq changes list)")
    revert = api_command(
        changes, "revert", cmd_changes_revert, role="admin", topic=False,
        help="set a change's fields back to their values before it (admin)",
        description="Set a change's fields back to their values before it, through the same "
        "path as a PATCH (recorded as a change, 'revert of ID'). Refused if they have changed "
        "since, unless --force. Asks first unless --yes.",
    )  # fmt: skip
    revert.add_argument("id", metavar="ID", help="the change's id (emq changes list)")
    revert.add_argument("--force", action="store_true", help="even if changed since")
    revert.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    why_flag(revert)
