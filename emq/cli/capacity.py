"""Capacity planning on the command line: ``emq plan run|apply`` and ``emq bench plan`` (and,
registered with them, ``emq history synth|export`` from :mod:`emq.cli.history`).

``plan run`` drives the Spark job in ``spark/`` (imported only when the command runs, so the
rest of ``emq`` starts without pyspark); ``plan apply`` talks to the admin API through
:class:`emq.client.Client`.

``emq plan apply`` exit status: 0 when everything planned is live (or ``--dry-run``), 1 on an
error or when a quota would drop by more than half without ``--force`` (then nothing is applied),
3 when some planned topics were not applied (unknown topics, failed updates) while the rest was.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emq.cli import history
from emq.cli.common import print_json, table
from emq.cli.history import cmd_history_export, cmd_history_synth  # noqa: F401 (their old home)
from emq.core.errors import EmqError, InvalidInput, NotFound
from emq.core.model import Namespace

if TYPE_CHECKING:
    from emq.cli.common import Subparsers
    from emq.client import Client
    from emq.core.settings import Settings

EXIT_PARTIAL = 3
APPLY_CONCURRENCY = 8
DAY_S = 86_400


# ----------------------------------------------------------------------------- plan run


def cmd_plan_run(args: argparse.Namespace, settings: Settings) -> int:
    from spark.plan_job import execute

    return execute(args, max_group_qps=settings.max_group_qps)


# ----------------------------------------------------------------------------- plan apply


@dataclass
class Change:
    """One planned topic against the live configuration."""

    namespace: str
    tenant: str
    topic: str
    qps: int
    groups: int
    current_qps: int | None = None
    current_groups: int | None = None
    action: str = ""  # unknown | unchanged | raise | lower | needs-force
    result: str | None = None  # applied | failed, once applied
    error: str | None = None
    after_groups: int | None = None
    before: dict[str, int | None] = field(default_factory=dict)  # the live values compared

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.tenant}/{self.topic}"

    def to_dict(self) -> dict[str, Any]:
        from capacity.plan import change_pct

        pct = change_pct(self.current_qps, self.qps) if self.current_qps else None
        return {
            "namespace": self.namespace,
            "tenant": self.tenant,
            "topic": self.topic,
            "current_qps": self.current_qps,
            "current_groups": self.current_groups,
            "qps": self.qps,
            "groups": self.groups,
            "change_pct": pct,
            "action": self.action,
            "result": self.result,
            "error": self.error,
        }


def load_plan(path: str) -> list[Change]:
    """The planned topics of a plan.json; a malformed one is one line naming the entry."""
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InvalidInput("PLAN", f"cannot read {path}: {e}") from None
    topics = plan.get("topics") if isinstance(plan, dict) else None
    if not isinstance(topics, list):
        raise InvalidInput("PLAN", f"{path} is not a plan: no 'topics' list")
    changes: list[Change] = []
    seen: dict[tuple[str, str, str], int] = {}
    for i, t in enumerate(topics):
        where = f"topics[{i}]"
        if not isinstance(t, dict):
            raise InvalidInput(where, "is not an object")
        for key in ("namespace", "tenant", "topic"):
            if not isinstance(t.get(key), str) or not t[key]:
                raise InvalidInput(f"{where}.{key}", "is missing")
        for key in ("qps", "groups"):
            value = t.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{where}.{key}", f"must be a positive integer, got {value!r}")
        Namespace.parse(t["namespace"], f"{where}.namespace")
        ref = (t["namespace"], t["tenant"], t["topic"])
        if ref in seen:
            raise InvalidInput(where, f"plans {'/'.join(ref)} again (topics[{seen[ref]}])")
        seen[ref] = i
        changes.append(Change(t["namespace"], t["tenant"], t["topic"], t["qps"], t["groups"]))
    return changes


async def compare_live(client: Client, changes: list[Change], force: bool) -> None:
    """Read each planned topic's live quota and set what applying would do (its ``action``);
    ``emq plan apply`` and the canary rollout (:mod:`emq.cli.rollout`) both judge with it."""
    import asyncio  # here, not with the parser: it imports ssl, which `emq --help` need not

    from capacity.plan import is_big_decrease

    gate = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(c: Change) -> None:
        async with gate:
            try:
                live = await client.get_topic(c.tenant, c.topic, namespace=c.namespace)
            except NotFound:
                c.action = "unknown"
                return
        c.current_qps, c.current_groups = int(live["qps"]), int(live["groups"])
        c.before = {k: live.get(k) for k in ("qps", "groups", "weight", "burst")}
        if c.current_qps == c.qps:
            c.action = "unchanged"
        elif c.qps > c.current_qps:
            c.action = "raise"
        else:
            big = is_big_decrease(c.current_qps, c.qps)
            c.action = "needs-force" if big and not force else "lower"

    await asyncio.gather(*(one(c) for c in changes))


async def apply_changes(client: Client, changes: list[Change]) -> None:
    """Set the quota of every change to raise or lower, recording each one's result."""
    import asyncio  # here, not with the parser: it imports ssl, which `emq --help` need not

    gate = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(c: Change) -> None:
        async with gate:
            try:
                body = await client.set_quota(c.tenant, c.topic, c.qps, namespace=c.namespace)
            except EmqError as e:
                from emq.client import describe

                c.result, c.error = "failed", describe(e)
                return
        c.result, c.after_groups = "applied", int(body.get("groups", c.groups))

    await asyncio.gather(*(one(c) for c in changes if c.action in ("raise", "lower")))


def _note(c: Change) -> str:
    if c.result == "failed":
        return f"failed: {c.error}"
    if c.result == "applied":
        text = "raised" if c.action == "raise" else "lowered"
        if c.after_groups is not None and c.after_groups != c.groups:
            text += f" (the API keeps {c.after_groups} groups: groups are never removed)"
        return text
    notes = {
        "unknown": "unknown topic: not applied",
        "unchanged": "unchanged",
        "raise": "raise",
        "lower": "lower",
        "needs-force": "lowers by more than half: needs --force",
    }
    return notes.get(c.action, c.action)


def _groups(c: Change) -> str:
    """The planned group count; the API never removes groups, so say when more stay."""
    if c.current_groups and c.groups < c.current_groups and c.action != "unknown":
        return f"{c.groups} ({c.current_groups} kept)"
    return str(c.groups)


def _print_diff(changes: list[Change], show_unchanged: bool) -> None:
    from capacity.plan import change_pct

    rows = []
    for c in changes:
        if c.action == "unchanged" and not show_unchanged:
            continue
        pct = change_pct(c.current_qps, c.qps) if c.current_qps else None
        rows.append(
            (
                c.name,
                c.current_qps,
                c.current_groups,
                c.qps,
                _groups(c),
                f"{pct:+.1f}%" if pct is not None else None,
                _note(c),
            )
        )
    if rows:
        headers = ("TOPIC", "QPS", "GROUPS", "NEW QPS", "NEW GROUPS", "CHANGE", "NOTE")
        table(headers, rows, "", max_chars=None)  # notes and errors are read whole


def cmd_plan_apply(args: argparse.Namespace, settings: Settings) -> int:
    from emq.cli import rollout  # --canary: a watched rollout in steps

    canary = rollout.options(args)  # its flags checked before anything is read
    changes = load_plan(args.plan)
    token = args.token or settings.admin_token
    if not token:
        raise EmqError("no admin token: set EMQ_ADMIN_TOKEN or pass --token")
    if canary is not None:
        return rollout.cmd_rollout(args, settings, changes, canary)
    import uvloop

    from emq.client import Client, describe

    async def main() -> bool:
        why = args.why or f"emq plan apply {args.plan}"[:500]  # recorded with each change
        async with Client(
            settings.api_url, token, change_route="plan", change_reason=why
        ) as client:
            await compare_live(client, changes, args.force)
            refused = any(c.action == "needs-force" for c in changes)
            from emq.cli.plan_store import publish  # the console's latest plan

            await publish(client, args.plan, "dry-run" if args.dry_run or refused else "apply")
            if not args.dry_run and not refused:
                await apply_changes(client, changes)
            return refused

    try:
        refused = uvloop.run(main())
    except EmqError as e:
        raise EmqError(describe(e)) from e
    return _report_apply(args, changes, refused)


def _report_apply(args: argparse.Namespace, changes: list[Change], refused: bool) -> int:
    count = {
        key: sum(key in (c.action, c.result) for c in changes)
        for key in ("unknown", "unchanged", "raise", "lower", "needs-force", "applied", "failed")
    }
    if args.json:
        body = {"dry_run": args.dry_run, "counts": count}
        print_json(body | {"changes": [c.to_dict() for c in changes]})
    else:
        _print_diff(changes, args.all)
        applied = (
            ""
            if args.dry_run or refused
            else (f"; {count['applied']} applied, {count['failed']} failed")
        )
        print(
            f"{len(changes)} planned topics: {count['raise']} to raise, {count['lower']} to "
            f"lower, {count['needs-force']} need --force, {count['unchanged']} unchanged, "
            f"{count['unknown']} unknown{applied}"
        )
    if args.dry_run:
        print("dry run: nothing applied", file=sys.stderr)
        return 0
    if refused:
        print(
            f"emq: error: {count['needs-force']} quota(s) would drop by more than half: "
            "nothing applied (review them, then pass --force)",
            file=sys.stderr,
        )
        return 1
    if count["unknown"] or count["failed"]:
        print(
            f"emq: error: {count['unknown'] + count['failed']} planned topic(s) not applied "
            f"({count['unknown']} unknown, {count['failed']} failed); the rest was applied",
            file=sys.stderr,
        )
        return EXIT_PARTIAL
    return 0


# ----------------------------------------------------------------------------- bench plan


def cmd_bench_plan(args: argparse.Namespace, settings: Settings) -> int:
    from emq.bench.machine import describe as machine
    from spark.bench import run

    result = run(rows=args.rows) | {"machine": machine()}
    if args.json:
        print_json(result)
    else:
        for phase in ("synth", "plan"):
            r = result[phase]
            print(
                f"{phase:<6} {r['rows']:>12,} rows  {r['seconds']:>7.1f} s  "
                f"{r['rows_per_s']:>10,} rows/s"
            )
    return 0


# ----------------------------------------------------------------------------- parsers


def add_commands(sub: Subparsers) -> None:
    """Register ``history synth|export`` and ``plan run|apply`` on ``emq``'s subparsers."""
    history.add_commands(sub)
    _add_plan(sub)


def _add_plan(sub: Subparsers) -> None:
    from capacity.plan import (
        DEFAULT_HEADROOM,
        DEFAULT_JOB_BYTES,
        DEFAULT_SHARD_OPS,
        DEFAULT_WORKER_QPS,
    )
    from spark.plan_job import add_arguments

    plan = sub.add_parser(
        "plan",
        help="capacity plans: compute from history, apply through the admin API",
        description="Compute a capacity plan from traffic history (Spark), review its report, "
        "and apply its quotas through the admin API.",
    )
    actions = plan.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        help="compute a plan (Spark): quotas, groups, workers, Redis shards, a dry-run",
        description="Compute per topic the peak/p99/p999 rate, growth, a recommended quota "
        "(p99 x headroom, rounded) and group split, and a replay of the history under it "
        "(largest backlog, longest wait); for the fleet the workers (N+1) and Redis shards. "
        "Writes OUT/plan.json, OUT/report.html with PNG charts, OUT/topics.parquet and "
        "OUT/fleet.parquet. Also runs as: spark-submit spark/plan_job.py --history ... --out ...",
    )
    add_arguments(run, DEFAULT_HEADROOM, DEFAULT_WORKER_QPS, DEFAULT_JOB_BYTES, DEFAULT_SHARD_OPS)
    run.set_defaults(func=cmd_plan_run)

    apply = actions.add_parser(
        "apply",
        help="apply a plan's quotas through the admin API",
        description="Compare a plan's quotas with the live configuration, print the differences "
        "and apply them (PATCH qps; the API adds groups as needed). A quota lowered by more "
        "than half needs --force (otherwise nothing is applied, exit 1); planned topics that "
        "do not exist are listed and the exit status is 3 (the rest is applied).",
    )
    apply.add_argument("plan", metavar="PLAN.json", help="a plan written by 'emq plan run'")
    apply.add_argument("--dry-run", action="store_true", help="show the differences only")
    apply.add_argument(
        "--force", action="store_true", help="allow lowering quotas by more than half"
    )
    apply.add_argument("--all", action="store_true", help="list unchanged topics too")
    apply.add_argument("--token", help="admin token (default EMQ_ADMIN_TOKEN)")
    apply.add_argument("--json", action="store_true", help="print the comparison as JSON")
    apply.add_argument(
        "--why", metavar="TEXT", help="the reason recorded with each change (emq changes)"
    )
    from emq.cli.rollout import add_arguments as add_rollout_arguments

    add_rollout_arguments(apply)
    apply.set_defaults(func=cmd_plan_apply)
