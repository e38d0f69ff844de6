"""``emq plan apply PLAN.json --canary 10% --watch 5m [--steps 3] [--yes]``: a plan rolled out
with a canary, watched, and rolled back by itself when a signal goes past its threshold.

The run, in order (nothing is applied before step 4):

1. Check the flags (share, watch, steps, thresholds), read the plan, compare it with the live
   configuration: an unknown topic, or a drop by more than half without ``--force``, is an error.
2. Read the changed topics' baselines (``GET /v1/rollouts/signals`` over the ``--watch`` before
   now); a watch shorter than the history interval the signals are computed over is an error.
3. Choose the canary and the steps (:mod:`emq.core.rollout_rules`), show them, ask (``--yes``
   skips it; without a terminal ``--yes`` is required).
4. ``POST /v1/rollouts``; then for the canary and each step: baseline, apply (``PATCH`` the
   quotas, recorded in the change log with route ``plan`` and the rollout in its why), watch for
   ``--watch`` (heartbeats ``PATCH /v1/rollouts/{id}``), judge each topic.
5. A breach rolls back every topic applied so far to its quota before (its why: the topic, the
   signal, the figure against its limit), the rollout ends ``rolled-back``, exit 4. All healthy:
   ``done``, exit 0.

A CLI killed meanwhile stops beating: the API then answers the rollout as ``abandoned``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emq.cli.common import print_json, table
from emq.core.errors import EmqError, InvalidInput
from emq.core.rollout_rules import (
    Breach,
    Signals,
    Thresholds,
    choose_canary,
    judge,
    parse_duration,
    parse_share,
    parse_steps,
    reason,
    split_steps,
)

if TYPE_CHECKING:
    from emq.cli.capacity import Change
    from emq.client import Client
    from emq.core.settings import Settings

EXIT_ROLLED_BACK = 4
HEARTBEAT_S = 2.0
INTERVAL_SETTINGS = "EMQ_WORKER_HISTORY_INTERVAL_S / EMQ_API_HISTORY_INTERVAL_S"


@dataclass
class Options:
    share: float
    watch_s: float
    steps: list[float]
    limits: Thresholds
    yes: bool


@dataclass
class Rollout:
    """What the run knows: the changed topics, their steps, baselines and verdicts."""

    changes: list[Change]
    steps: list[list[Change]]
    interval_s: float = 0.0
    id: str = ""
    applied: list[Change] = field(default_factory=list)
    verdicts: dict[str, list[Breach]] = field(default_factory=dict)
    signals: dict[str, dict[str, float]] = field(default_factory=dict)  # at each judgement
    state: str = "running"
    why: str = ""


def options(args: argparse.Namespace) -> Options | None:
    """The rollout flags, checked before anything is read or applied (None: no rollout)."""
    if args.canary is None and args.watch is None:
        return None
    if args.canary is None:
        raise InvalidInput("--watch", "watches a canary: pass --canary too (e.g. --canary 10%)")
    if args.watch is None:
        raise InvalidInput(
            "--canary", "needs --watch: how long to watch each step before going on (e.g. 5m)"
        )
    limits = Thresholds(
        backlog_growth_s=_at_least0(args.max_backlog_growth_s, "--max-backlog-growth-s"),
        oldest_age_rise_s=_at_least0(args.max_oldest_age_rise_s, "--max-oldest-age-rise-s"),
        failed_share_rise=_percent(args.max_failed_share_rise, "--max-failed-share-rise"),
        throttled_rise_s=_at_least0(args.max_throttled_rise_s, "--max-throttled-rise-s"),
        min_delivered_ratio=_at_least0(args.min_delivered_ratio, "--min-delivered-ratio"),
    )
    return Options(
        share=parse_share(args.canary, "--canary"),
        watch_s=parse_duration(args.watch, "--watch"),
        steps=parse_steps(args.steps, "--steps"),
        limits=limits,
        yes=args.yes,
    )


def _percent(text: str, flag: str) -> float:
    """``5%`` or ``5``: 0 to 100 %, as a fraction (0 allowed: any rise fails)."""
    raw = str(text).strip().removesuffix("%")
    try:
        pct = float(raw)
    except ValueError:
        raise InvalidInput(flag, f"must be a percentage such as 5%, got {text!r}") from None
    if not 0 <= pct <= 100:
        raise InvalidInput(flag, f"must be 0% to 100%, got {text!r}")
    return pct / 100


def _at_least0(value: float, flag: str) -> float:
    if not value >= 0:
        raise InvalidInput(flag, f"must be at least 0, got {value}")
    return float(value)


def cmd_rollout(
    args: argparse.Namespace, settings: Settings, changes: list[Change], opts: Options
) -> int:
    """Steps 1 to 5 of the module's docstring."""
    import uvloop

    token = args.token or settings.admin_token
    ro = uvloop.run(_prepare(settings, token, args, changes, opts))
    if ro is None:
        if args.json:
            print_json({"rollout": None, "state": "unchanged", "steps": []})
        print("nothing to roll out: every planned quota is live already", file=sys.stderr)
        return 0
    _show(ro, opts, args.json)
    if args.dry_run:
        if args.json:
            print_json({"rollout": None, "state": "dry-run", "steps": _names(ro)})
        print("dry run: nothing applied", file=sys.stderr)
        return 0
    if not opts.yes:
        if not sys.stdin.isatty():
            raise InvalidInput("--yes", "a rollout asks for confirmation: pass --yes to run it")
        if input("start the rollout? [y/N] ").strip().lower() not in ("y", "yes"):
            print("not started: nothing applied", file=sys.stderr)
            return 1
    uvloop.run(_execute(settings, token, args, ro, opts))
    return _report(ro, args.json)


# ----------------------------------------------------------------------------- prepare


async def _prepare(
    settings: Settings, token: str, args: argparse.Namespace, changes: list[Change], o: Options
) -> Rollout | None:
    from emq.cli.capacity import compare_live
    from emq.client import Client

    async with Client(settings.api_url, token) as client:
        await compare_live(client, changes, args.force)
        unknown = [c.name for c in changes if c.action == "unknown"]
        if unknown:
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise InvalidInput(
                "PLAN", f"names unknown topics: {', '.join(unknown[:3])}{more}; nothing applied"
            )
        refused = [c.name for c in changes if c.action == "needs-force"]
        if refused:
            raise InvalidInput(
                "--force", f"{len(refused)} quota(s) would drop by more than half "
                f"({refused[0]} ...): nothing applied (review them, then pass --force)"
            )  # fmt: skip
        changed = [c for c in changes if c.action in ("raise", "lower")]
        if not changed:
            return None
        now = time.time()
        base = await signals(client, changed, now - o.watch_s, now)
        ro = Rollout(changed, [], interval_s=base["interval_s"])
        if o.watch_s < ro.interval_s:
            raise InvalidInput(
                "--watch",
                f"{o.watch_s:g} s is shorter than the {ro.interval_s:g} s history interval the "
                f"signals are computed over ({INTERVAL_SETTINGS}): nothing applied",
            )
        canary, rest = choose_canary(changed, o.share, lambda c: c.tenant, lambda c: c.name)
        ro.steps = [canary, *split_steps(rest, o.steps)]
        return ro


async def signals(
    client: Client, topics: list[Change], since: float, until: float
) -> dict[str, Any]:
    """``GET /v1/rollouts/signals`` for ``topics`` (in batches); by name, and ``interval_s``."""
    from emq.core.schema.rollouts import MAX_SIGNAL_TOPICS  # (pydantic: not for emq --help)

    out: dict[str, Any] = {"interval_s": 0.0, "topics": {}}
    for i in range(0, len(topics), MAX_SIGNAL_TOPICS):
        names = ",".join(c.name for c in topics[i : i + MAX_SIGNAL_TOPICS])
        query = {"topics": names, "since": f"{since:.3f}", "until": f"{until:.3f}"}
        body = await client.request("GET", "v1/rollouts/signals", query=query)
        assert isinstance(body, dict)
        out["interval_s"] = max(out["interval_s"], float(body["interval_s"]))
        out["topics"].update({t["name"]: t for t in body["topics"]})
    return out


def _show(ro: Rollout, o: Options, as_json: bool) -> None:
    out = sys.stderr if as_json else sys.stdout
    rows = [
        ("canary" if i == 0 else f"step {i}", c.name, c.current_qps, c.qps)
        for i, step in enumerate(ro.steps)
        for c in step
    ]
    if not as_json:
        table(("STEP", "TOPIC", "QPS", "NEW QPS"), rows, "", max_chars=None)
    tenants = len({c.tenant for c in ro.steps[0]})
    print(
        f"canary: {len(ro.steps[0])} of {len(ro.changes)} changed topics ({o.share:.0%} "
        f"asked, {tenants} tenant(s)), then {len(ro.steps) - 1} step(s); each watched "
        f"{o.watch_s:g} s (signals over {ro.interval_s:g} s history intervals)",
        file=out,
    )


# ----------------------------------------------------------------------------- execute


async def _execute(
    settings: Settings, token: str, args: argparse.Namespace, ro: Rollout, o: Options
) -> None:
    from emq.cli.progress import Progress
    from emq.client import Client

    why = args.why or f"emq plan apply {args.plan} --canary"
    async with Client(settings.api_url, token, change_route="plan", change_reason=why) as client:
        started = await client.request("POST", "v1/rollouts", body=_document(args, ro, o))
        assert isinstance(started, dict)
        ro.id = str(started["id"])
        total = len(ro.changes)
        plain = args.json or not sys.stdout.isatty()
        stream = sys.stderr if args.json else sys.stdout
        with Progress(total, plain=plain, stream=stream) as bar:
            bar.note(f"rollout {ro.id}: {total} topics in {len(ro.steps)} steps")
            for i, step in enumerate(ro.steps):
                phase = "canary" if i == 0 else f"step {i} of {len(ro.steps) - 1}"
                healthy = await _step(client, ro, o, i, step, phase, bar)
                if not healthy:
                    await _roll_back(settings, token, ro, bar)
                    return
                bar.advance(len(step), f"{phase}: {len(step)} healthy")
            ro.state = "done"
            await _patch(client, ro, state="done", phase="done", reason="every step healthy")
            bar.note(f"rollout {ro.id}: done, {total} topics live")


def _document(args: argparse.Namespace, ro: Rollout, o: Options) -> dict[str, Any]:
    topics = [
        {
            "name": c.name,
            "namespace": c.namespace,
            "tenant": c.tenant,
            "topic": c.topic,
            "step": i,
            "before": c.before,
            "after": {"qps": c.qps, "groups": c.groups},
        }
        for i, step in enumerate(ro.steps)
        for c in step
    ]
    return {
        "plan": str(args.plan)[:2000],
        "canary_pct": round(o.share * 100, 3),
        "watch_s": o.watch_s,
        "steps": len(ro.steps) - 1,
        "heartbeat_s": HEARTBEAT_S,
        "thresholds": o.limits.to_dict(),
        "topics": topics,
    }


async def _step(
    client: Client, ro: Rollout, o: Options, i: int, step: list[Change], phase: str, bar: Any
) -> bool:
    """Baseline, apply, watch and judge one step; False when a topic breached."""
    import asyncio  # here, not with the parser (emq --help need not load it)

    from emq.cli.capacity import apply_changes

    t0 = time.time()
    base = (await signals(client, step, t0 - o.watch_s, t0))["topics"]
    await apply_changes(client, step)
    ro.applied.extend(c for c in step if c.result == "applied")
    failed = [c for c in step if c.result == "failed"]
    await _patch(client, ro, phase=phase, step=i, topics=[_status(c, "watching") for c in step])
    if failed:
        ro.why = f"{failed[0].name}: not applied ({failed[0].error})"
        return False
    applied_at = time.time()
    end = _watch_end(applied_at, o.watch_s, ro.interval_s)
    while (left := end - time.time()) > 0:
        bar.watch(phase, o.watch_s, max(0.0, left))
        await asyncio.sleep(min(HEARTBEAT_S, left))
        left = max(0.0, end - time.time())
        await _patch(client, ro, phase=f"{phase}: watching, {left:.0f} s left")  # and a beat
    now = (await signals(client, step, applied_at, time.time()))["topics"]
    return await _judge(client, ro, o, step, base, now, bar)


def _watch_end(applied_at: float, watch_s: float, interval_s: float) -> float:
    """The watch lasts ``watch_s`` and covers at least one complete history interval (whose
    row is written just after it ends)."""
    import math

    first = math.ceil(applied_at / interval_s) * interval_s
    return max(applied_at + watch_s, first + interval_s + 0.75)


async def _judge(
    client: Client,
    ro: Rollout,
    o: Options,
    step: list[Change],
    base: dict[str, Any],
    now: dict[str, Any],
    bar: Any,
) -> bool:
    updates = []
    for c in step:
        before, after = Signals.from_answer(base[c.name]), Signals.from_answer(now[c.name])
        breaches = judge(before, after, c.qps, o.limits)
        ro.verdicts[c.name] = breaches
        status = _status(c, "breached" if breaches else "healthy")
        status["breaches"] = [_breach(b) for b in breaches]
        status["signals"] = ro.signals[c.name] = _figures(after)
        updates.append(status)
        if breaches and not ro.why:
            ro.why = reason(c.name, breaches)
    await _patch(client, ro, topics=updates)
    return not ro.why


async def _roll_back(settings: Settings, token: str, ro: Rollout, bar: Any) -> None:
    """Every applied topic back to its quota before; the why says which signal of which topic."""
    from emq.client import Client

    why = f"rollback of rollout {ro.id}: {ro.why}"[:500]
    bar.note(f"rolling back {len(ro.applied)} topic(s): {ro.why}")
    async with Client(settings.api_url, token, change_route="plan", change_reason=why) as client:
        updates, failed = [], 0
        for c in ro.applied:
            try:
                qps = int(c.before["qps"] or c.current_qps or 0)
                await client.set_quota(c.tenant, c.topic, qps, namespace=c.namespace)
            except EmqError as e:
                failed += 1
                bar.note(f"{c.name}: not set back to {qps} ({e})")
                updates.append(_status(c, "rollback-failed"))
            else:
                updates.append(_status(c, "rolled-back"))
        ro.state = "failed" if failed else "rolled-back"
        await _patch(client, ro, state=ro.state, phase="rolled back", reason=ro.why, topics=updates)


def _names(ro: Rollout) -> list[list[str]]:
    return [[c.name for c in step] for step in ro.steps]


def _status(c: Change, status: str) -> dict[str, Any]:
    return {"name": c.name, "status": status}


def _breach(b: Breach) -> dict[str, Any]:
    return {"signal": b.signal, "figure": b.figure, "limit": b.limit, "op": b.op, "text": b.text}


def _figures(s: Signals) -> dict[str, float]:
    return {
        "backlog": s.backlog,
        "oldest_age_s": s.oldest_age_s,
        "failed_share": round(s.failed_share, 4),
        "throttled": s.throttled,
        "delivered_per_s": round(s.delivered_per_s, 3),
    }


async def _patch(client: Client, ro: Rollout, **fields: Any) -> None:
    """Record progress (and beat); a rollout the API no longer takes is a warning, never a stop
    in the middle of a rollback."""
    try:
        await client.request("PATCH", f"v1/rollouts/{ro.id}", body=fields)
    except EmqError as e:
        from emq.client import describe

        print(f"emq: warning: rollout progress not recorded ({describe(e)})", file=sys.stderr)


def _report(ro: Rollout, as_json: bool) -> int:
    if as_json:
        print_json(
            {
                "rollout": ro.id,
                "state": ro.state,
                "reason": ro.why,
                "steps": _names(ro),
                "applied": [c.name for c in ro.applied],
                "breaches": {k: [_breach(b) for b in v] for k, v in ro.verdicts.items() if v},
                "signals": ro.signals,
            }
        )
    if ro.state == "done":
        return 0
    print(f"emq: error: rollout {ro.id} {ro.state}: {ro.why}", file=sys.stderr)
    if ro.state == "failed":
        print("emq: error: some topics were not set back (see emq changes list)", file=sys.stderr)
        return 1
    return EXIT_ROLLED_BACK


def add_arguments(apply: argparse.ArgumentParser) -> None:
    """The rollout flags of ``emq plan apply``."""
    d = Thresholds()
    g = apply.add_argument_group(
        "rollout with a canary",
        "Apply to a canary share of the changed topics, watch their signals, then roll out "
        "the rest in steps, or roll everything back by itself when a signal passes its "
        "threshold (exit 4). See docs/guides/capacity-planner.md, 'Rolling out a plan'.",
    )
    g.add_argument("--canary", metavar="PCT", help="share of the changed topics first, e.g. 10%%")
    g.add_argument("--watch", metavar="DURATION", help="how long each step is watched, e.g. 5m")
    g.add_argument(
        "--steps", default="3", metavar="N|P1,P2,..",
        help="after the canary: N equal steps, or rising percentages of the rest (default 3)",
    )  # fmt: skip
    g.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    g.add_argument(
        "--max-backlog-growth-s", type=float, default=d.backlog_growth_s, metavar="S",
        help="fail if the backlog grows by more than S seconds of the new quota "
        f"(default {d.backlog_growth_s:g})",
    )  # fmt: skip
    g.add_argument(
        "--max-oldest-age-rise-s", type=float, default=d.oldest_age_rise_s, metavar="S",
        help="fail if the oldest waiting job ages by more than S s "
        f"(default {d.oldest_age_rise_s:g})",
    )  # fmt: skip
    g.add_argument(
        "--max-failed-share-rise", default=f"{d.failed_share_rise:.0%}", metavar="PCT",
        help="fail if the share of failed answers (429/503 ...) rises by more than PCT points "
        f"(default {d.failed_share_rise * 100:g}%%)",
    )  # fmt: skip
    g.add_argument(
        "--max-throttled-rise-s", type=float, default=d.throttled_rise_s, metavar="S",
        help="fail if jobs waiting for quota rise by more than S seconds of the new quota "
        f"(default {d.throttled_rise_s:g})",
    )  # fmt: skip
    g.add_argument(
        "--min-delivered-ratio", type=float, default=d.min_delivered_ratio, metavar="R",
        help="with jobs waiting, fail if delivered/s is under R x min(new quota, baseline) "
        f"(default {d.min_delivered_ratio:g})",
    )  # fmt: skip
