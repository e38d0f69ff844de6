"""``emq topic create|list|show|set-quota|set-weight|set-burst|set-dlq|set-transaction-default|
pause|resume``.

Each prints a readable table or lines, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING, Any

from emq.cli.attempts import add_topic_commands as add_record_commands
from emq.cli.common import (
    CommandFailed,
    command,
    group,
    print_json,
    run,
    table,
    tenant_and_topic,
    where,
    why_flag,
)
from emq.cli.endpoints import add_commands as add_endpoint_commands
from emq.cli.endpoints import endpoint_lines, print_status
from emq.core.errors import InvalidInput
from emq.core.model import DLQ_MAX_AGE_S, DLQ_MAX_ENTRIES, Priority, PriorityMode

TRANSACTION_DEFAULTS = ("rollback", "commit")  # a topic's transaction_default (emq.core.model)

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _print_topic(body: dict[str, Any]) -> None:
    shares = ", ".join(f"{n}x{q}" for q, n in Counter(body["group_qps"]).items())
    retry = ", ".join(f"{k} {v}" for k, v in body["retry"].items())
    lines = [
        ("topic", where(body)),
        ("qps", f"{body['qps']} in {body['groups']} groups of {shares} QPS"),
        ("paused", "yes" if body["paused"] else "no"),
        ("max_backlog", body["max_backlog"]),
        ("endpoint_concurrency", body["endpoint_concurrency"]),
        ("priority_mode", body["priority_mode"]),
        ("retry", retry),
        ("dlq_retention", _dlq_retention(body)),
        *endpoint_lines(body),
        ("weight", body.get("weight", "?")),
        ("burst", body.get("burst", "?")),
        ("transaction_default", body.get("transaction_default", "?")),
    ]
    if "backlog" in body:
        queued = ", ".join(f"{p} {n}" for p, n in body["backlog"].items())
        lines.append(("backlog", f"{queued}; delayed {body['delayed']}"))
    if "secret" in body:
        lines.append(("secret", body["secret"]))
    for key, value in lines:
        print(f"{key:<21} {value}")
    if len(body.get("per_group", ())) > 1:
        print()
        rows = [
            (g["index"], *(g["backlog"][p.value] for p in Priority), g["delayed"])
            for g in body["per_group"]
        ]
        table(("GROUP", "HIGH", "MEDIUM", "LOW", "DELAYED"), rows, "")
    print_status(body)  # each endpoint's state, rate and why (emq.cli.endpoints)


def _dlq_retention(body: dict[str, Any]) -> str:
    """A topic's DLQ retention; "?" from an API that predates it."""
    entries, age = body.get("dlq_max_entries"), body.get("dlq_max_age_s")
    if entries is None or age is None:
        return "?"
    return f"{entries} letters per group, none older than {age} s ({age / 86400:g} d)"


def _show(args: argparse.Namespace, body: dict[str, Any], verb: str | None = None) -> int:
    if args.json:
        print_json(body)
    elif verb is None:
        _print_topic(body)
    else:
        print(
            f"{verb} topic {where(body)}: qps {body['qps']} in {body['groups']} groups, "
            f"{'paused' if body['paused'] else 'running'}"
        )
    return 0


def cmd_topic_create(args: argparse.Namespace, settings: Settings) -> int:
    retry = {"max_attempts": args.max_attempts} if args.max_attempts is not None else None
    body = run(
        args,
        settings,
        lambda c: c.create_topic(
            args.tenant,
            args.topic,
            args.qps,
            retry=retry,
            endpoint_concurrency=args.endpoint_concurrency,
            max_backlog=args.max_backlog,
            priority_mode=args.priority_mode,
            dlq_max_entries=args.dlq_max_entries,
            dlq_max_age_s=args.dlq_max_age_s,
            weight=args.weight,
            burst=args.burst,
            transaction_default=args.transaction_default,
        ),
    )
    if not args.json:
        print(f"created topic {where(body)}")
    return _show(args, body)


def cmd_topic_list(args: argparse.Namespace, settings: Settings) -> int:
    topics = run(args, settings, lambda c: c.list_topics(args.tenant))
    if args.json:
        print_json({"topics": topics})
        return 0
    rows = [
        (t["topic"], t["namespace"], t["qps"], t["groups"], "yes" if t["paused"] else "no")
        for t in topics
    ]
    table(("TOPIC", "NAMESPACE", "QPS", "GROUPS", "PAUSED"), rows, "no topics")
    return 0


def cmd_topic_show(args: argparse.Namespace, settings: Settings) -> int:
    return _show(args, run(args, settings, lambda c: c.get_topic(args.tenant, args.topic)))


def cmd_topic_set_quota(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.set_quota(args.tenant, args.topic, args.qps))
    return _show(args, body, "updated")


def cmd_topic_set_weight(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, weight=args.n))
    return _show(args, body)


def cmd_topic_set_burst(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, burst=args.n))
    return _show(args, body)


def cmd_topic_set_dlq(args: argparse.Namespace, settings: Settings) -> int:
    changes = {"dlq_max_entries": args.max_entries, "dlq_max_age_s": args.max_age_s}
    changes = {k: v for k, v in changes.items() if v is not None}
    if not changes:
        raise CommandFailed(InvalidInput(None, "give --max-entries and/or --max-age-s"))
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, **changes))
    return _show(args, body)


def cmd_topic_set_transaction_default(args: argparse.Namespace, settings: Settings) -> int:
    change = {"transaction_default": args.decision}
    body = run(args, settings, lambda c: c.update_topic(args.tenant, args.topic, **change))
    return _show(args, body)


def cmd_topic_pause(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.pause(args.tenant, args.topic))
    return _show(args, body, "paused")


def cmd_topic_resume(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.resume(args.tenant, args.topic))
    return _show(args, body, "resumed")


def add_commands(sub: Subparsers) -> None:
    """Register ``topic`` on ``emq``'s subparsers."""
    topic = group(
        sub,
        "topic",
        "create, show and change topics",
        "A topic is a tenant's queue with a QPS quota, split into groups.",
    )
    create = command(
        topic,
        "create",
        cmd_topic_create,
        role="admin",
        help="create a topic with a QPS quota (admin)",
        description="Create a topic; its groups follow from the quota (at most "
        "EMQ_MAX_GROUP_QPS each). Prints the topic with its webhook signing secret.",
    )
    tenant_and_topic(create)
    create.add_argument("--qps", type=int, required=True, metavar="N", help="delivery quota")
    create.add_argument(
        "--max-attempts", type=int, metavar="N", help="delivery attempts before the DLQ (default 8)"
    )
    create.add_argument(
        "--endpoint-concurrency",
        type=int,
        metavar="N",
        help="concurrent requests per endpoint (default 32)",
    )
    create.add_argument(
        "--max-backlog",
        type=int,
        metavar="N",
        help="refuse jobs (429) above this many waiting (default 1000000)",
    )
    create.add_argument(
        "--priority-mode",
        choices=[m.value for m in PriorityMode],
        help="strict (high>medium>low) or weighted (default strict)",
    )
    _dlq_flags(create, "--dlq-")
    why_flag(create)
    create.add_argument(
        "--weight", type=int, metavar="N", help="share of its tenant's cap (default 1)"
    )
    create.add_argument(
        "--burst", type=int, metavar="N", help="jobs above the pace after idle (default 0)"
    )
    create.add_argument(
        "--transaction-default",
        choices=TRANSACTION_DEFAULTS,
        help="what decides a transaction its check-back could not (default rollback)",
    )
    listing = command(
        topic,
        "list",
        cmd_topic_list,
        role="tenant",
        help="list a tenant's topics",
        description="List a tenant's topics in one namespace with their quotas.",
    )
    listing.add_argument("tenant", metavar="TENANT", help="tenant name")
    show = command(
        topic,
        "show",
        cmd_topic_show,
        role="tenant",
        help="show a topic's quota, groups and backlog",
        description="Show a topic: quota, groups, state and backlog per priority and per group.",
    )
    tenant_and_topic(show)
    quota = command(
        topic,
        "set-quota",
        cmd_topic_set_quota,
        role="admin",
        help="change a topic's QPS quota (admin)",
        description="Change a topic's QPS quota live; workers apply it within "
        "2 s. Groups are added when the quota needs more, never removed.",
    )
    tenant_and_topic(quota)
    quota.add_argument("qps", metavar="QPS", type=int, help="the new quota")
    why_flag(quota)
    for name, func, text in (
        ("set-weight", cmd_topic_set_weight, "its share of its tenant's cap, by weight"),
        ("set-burst", cmd_topic_set_burst, "jobs it may send above its pace after idle"),
    ):
        p = command(
            topic,
            name,
            func,
            role="admin",
            help=f"change {text} (admin)",
            description=f"Change a topic's {name[4:]}: {text} (docs/concepts/quotas.md: tenant "
            "caps, burst); workers apply it within 2 s.",
        )
        tenant_and_topic(p)
        p.add_argument("n", metavar="N", type=int, help=f"the new {name[4:]}")
        why_flag(p)
    dlq = command(
        topic,
        "set-dlq",
        cmd_topic_set_dlq,
        role="admin",
        help="change a topic's dead-letter retention (admin)",
        description="Change how many dead letters each group of a topic keeps and for how "
        "long; workers trim to it at the next dead letter or within a minute.",
    )
    tenant_and_topic(dlq)
    _dlq_flags(dlq, "--")
    decision = command(
        topic,
        "set-transaction-default",
        cmd_topic_set_transaction_default,
        role="admin",
        help="change what decides a transaction its check-back could not (admin)",
        description="Change a topic's transaction_default: the decision of a transaction still "
        "open after its last check-back decided nothing (docs/concepts/transactions.md); it "
        "applies to every such transaction from then on.",
    )
    tenant_and_topic(decision)
    decision.add_argument("decision", choices=TRANSACTION_DEFAULTS, help="rollback or commit")
    for name, func, verb in (
        ("pause", cmd_topic_pause, "Stop delivering"),
        ("resume", cmd_topic_resume, "Resume delivering"),
    ):
        p = command(
            topic,
            name,
            func,
            role="admin",
            help=f"{name} a topic's deliveries (admin)",
            description=f"{verb} a topic's jobs; enqueueing is unaffected.",
        )
        tenant_and_topic(p)
    add_endpoint_commands(topic)
    add_record_commands(topic)


def _dlq_flags(p: argparse.ArgumentParser, prefix: str) -> None:
    p.add_argument(
        f"{prefix}max-entries",
        type=int,
        metavar="N",
        help=f"dead letters kept per group (default {DLQ_MAX_ENTRIES})",
    )
    p.add_argument(
        f"{prefix}max-age-s",
        type=int,
        metavar="S",
        help=f"seconds a dead letter is kept (default {DLQ_MAX_AGE_S}, 14 days)",
    )
