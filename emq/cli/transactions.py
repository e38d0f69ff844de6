"""``emq transaction create|send|commit|rollback|show|list``: transactional messages.

A transaction's jobs are stored but not delivered until it commits (docs/concepts/
transactions.md). These commands open one, prepare jobs into it, decide it, and show its state,
its decision and where the decision came from (the producer, its check_url, the topic's
default). Each prints a readable line or table, or the API's JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from emq.cli.common import command, group, print_json, run, table, tenant_and_topic, when
from emq.core.errors import InvalidInput

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.core.settings import Settings


def _line(t: dict[str, Any]) -> str:
    decision = t.get("decision")
    how = ""
    if decision:
        detail = f": {decision['detail']}" if decision.get("detail") else ""
        how = f" by {decision['source']}{detail}"
    released = ", released to its queues" if t.get("released") else ""
    return (
        f"transaction {t['transaction_id']}: {t['state']}{how}, {t['jobs']} jobs{released}, "
        f"{t['checks']} check-backs (timeout {t['timeout_s']} s)"
    )


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    async def work(c: Any) -> Any:
        tx = await c.create_transaction(
            args.tenant, args.topic, check_url=args.check_url, timeout_s=args.timeout
        )
        return await tx.show()

    body = run(args, settings, work)
    if args.json:
        print_json(body)
    else:
        print(_line(body))
    return 0


def cmd_send(args: argparse.Namespace, settings: Settings) -> int:
    try:
        job = json.loads(args.job)
    except ValueError as e:
        raise InvalidInput("JOB", f"is not JSON: {e}") from None
    if not isinstance(job, dict | list):
        raise InvalidInput("JOB", "must be a JSON object (one job) or an array of jobs")
    ids = run(
        args, settings, lambda c: c.open_transaction(args.tenant, args.topic, args.id).send(job)
    )
    if args.json:
        print_json({"ids": ids, "transaction_id": args.id})
    else:
        print(f"{len(ids)} jobs prepared in {args.id}: {' '.join(ids)}")
    return 0


def _decide(args: argparse.Namespace, settings: Settings, action: str) -> int:
    def work(c: Any) -> Any:
        tx = c.open_transaction(args.tenant, args.topic, args.id)
        return tx.commit() if action == "commit" else tx.rollback()

    body = run(args, settings, work)
    if args.json:
        print_json(body)
    else:
        print(_line(body))
    return 0


def cmd_commit(args: argparse.Namespace, settings: Settings) -> int:
    return _decide(args, settings, "commit")


def cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    return _decide(args, settings, "rollback")


def cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    body = run(
        args, settings, lambda c: c.open_transaction(args.tenant, args.topic, args.id).show()
    )
    if args.json:
        print_json(body)
        return 0
    print(_line(body))
    rows = [(when(e["at_ms"] / 1000), e["event"], e["detail"]) for e in body.get("log", [])]
    table(("AT", "EVENT", "DETAIL"), rows, "no log", max_chars=None)
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    body = run(args, settings, lambda c: c.transactions(args.tenant, args.topic, limit=args.limit))
    if args.json:
        print_json(body)
        return 0
    rows = [
        (t["transaction_id"], t["state"], (t["decision"] or {}).get("source") or "-", t["jobs"],
         t["checks"], when(t["created_at"]))
        for t in body["transactions"]
    ]  # fmt: skip
    table(("ID", "STATE", "DECIDED BY", "JOBS", "CHECKS", "CREATED"), rows, "no transactions")
    return 0


def _with_id(p: argparse.ArgumentParser) -> None:
    tenant_and_topic(p)
    p.add_argument("id", metavar="ID", help="the transaction's id (tx_...)")


def add_commands(sub: Subparsers) -> None:
    """Register ``transaction`` on ``emq``'s subparsers."""
    tx = group(
        sub,
        "transaction",
        "transactional messages: jobs delivered only if their transaction commits",
        "Open a transaction, prepare jobs into it, then commit (deliver them all) or roll back "
        "(discard them all); a transaction left open is decided by its check_url.",
    )
    create = command(tx, "create", cmd_create, role="tenant", help="open a transaction",
                     description="Open a transaction on a topic.")  # fmt: skip
    tenant_and_topic(create)
    ask = "where EMQ asks for the decision if it is still open at its timeout"
    create.add_argument("--check-url", required=True, metavar="URL", help=ask)
    create.add_argument("--timeout", type=int, metavar="S", help="seconds (default 60)")
    send = command(tx, "send", cmd_send, role="tenant", help="prepare jobs in a transaction",
                   description="Prepare JOB (a JSON job, or an array of jobs) in a transaction: "
                   "stored, delivered only once it commits.")  # fmt: skip
    _with_id(send)
    send.add_argument("job", metavar="JOB", help='e.g. \'{"url": "https://example.com/hook"}\'')
    for name, func, text in (
        ("commit", cmd_commit, "deliver every job of the transaction"),
        ("rollback", cmd_rollback, "discard every job of the transaction"),
        ("show", cmd_show, "a transaction's state, its decision and where it came from"),
    ):
        _with_id(command(tx, name, func, role="tenant", help=text, description=text + "."))
    listing = command(tx, "list", cmd_list, role="tenant", help="a topic's transactions",
                      description="A topic's transactions, newest first.")  # fmt: skip
    tenant_and_topic(listing)
    listing.add_argument("--limit", type=int, default=50, metavar="N", help="at most N (50)")
