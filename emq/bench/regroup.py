"""``emq bench regroup``: a quota change that changes a topic's group count while jobs wait.

One topic (:class:`Plan`: its first quota, a raise that crosses a multiple of 150 and so adds
groups, and a lowering, back to the first quota unless told, that keeps them) runs on the real
parts of :class:`emq.bench.rig.Rig` (Redis, ZooKeeper, ``emq api``, a fleet of two
``emq worker`` processes, the recording sink).
It starts with a backlog of keyed and unkeyed jobs at mixed priorities, and jobs keep arriving
through the API the whole time (:func:`_timeline`):

* phase 1, at the first quota: jobs arrive at that quota (the backlog stays);
* the raise (admin ``PATCH``): the topic goes from ``groups_before`` to ``groups_after`` groups;
  jobs arrive at 1.2x the raised quota, so every group has a backlog of its own;
* the lowering: the groups stay, each one's share drops; jobs arrive at that quota;
* then the run drains.

Judged from what the sink saw (:func:`judge`, the promise checker of :mod:`emq.bench.promises`
plus the figures of this module): nothing lost, no duplicate (no fault is injected, so any is a
bug), each key's jobs of one priority in their enqueue order (split into the keys the raise
moved to another group and those it did not, :func:`key_order`), no sliding second above the
quota in force (+1 per group; around a change the checker allows either quota for
:data:`~emq.bench.promises.APPLY_S`), and how long after the raise a sliding second first held
95 % of the raised quota (:func:`reach_s`).
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import math
import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from capacity import group_count
from capacity.keyhash import jump_hash
from emq.bench import mixed, promises
from emq.bench.machine import describe
from emq.bench.rig import Rig
from emq.rigs.procs import stop_all

TOPIC = "regroup"
# (first quota, raised) per seed, in turn: 1 -> 3 groups (the example), 1 -> 2 just
# across the line, 2 -> 4, and 1 -> 4.
QUOTAS = ((140, 320), (149, 151), (250, 560), (100, 451))
KEYED = (0.5, 1.0, 0.3)  # the share of keyed jobs per seed, in turn (1.0: every job keyed)
ARRIVE_RAISED = 1.2  # arrivals while raised, as a share of the raised quota
BACKLOG_S = 2.0  # the backlog at the start, in seconds of the first quota
REACH_SHARE = 0.95  # invariant 2: with enough backlog a topic reaches 95 % of its quota
REACH_S = promises.APPLY_S + 1.0  # target: the change applies within 2 s, then one full second
TICK_S = 0.1

BOUNDS: dict[str, tuple[str, float]] = {
    "lost": ("<=", 0),
    "duplicates": ("<=", 0),
    "key_inversions": ("<=", 0),
    "second_over_quota": ("<=", 0),
    "window_over_quota": ("<=", 0),
    "reach_s": ("<=", REACH_S),
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """One seed's run: quotas, the length of each of the three phases, the job mix."""

    seed: int
    qps: int
    raised: int
    phase_s: float
    keyed: float = 0.5  # share of keyed jobs
    keys: int = 24
    high: float = 0.1
    low: float = 0.3
    backlog_s: float = BACKLOG_S
    arrive_raised: float = ARRIVE_RAISED
    lowered: int | None = None  # the quota after the lowering (None: the first quota again)

    @property
    def lowered_qps(self) -> int:
        return self.qps if self.lowered is None else self.lowered

    @property
    def groups_before(self) -> int:
        return group_count(self.qps)

    @property
    def groups_after(self) -> int:
        return max(self.groups_before, group_count(self.raised))

    def topic(self) -> mixed.TopicSpec:
        return mixed.TopicSpec(
            TOPIC, "steady", self.qps, round(self.qps * self.backlog_s), self.high, self.low,
            self.keyed, self.keys, 0.0, new_qps=self.raised,
        )  # fmt: skip


def make_plan(seed: int, duration_s: float = 15.0) -> Plan:
    """The plan of ``seed``: quotas from :data:`QUOTAS` and the keyed share from :data:`KEYED`
    in turn, the rest of the job mix drawn from the seed."""
    qps, raised = QUOTAS[(seed - 1) % len(QUOTAS)]
    rng = random.Random(seed)
    return Plan(
        seed, qps, raised, duration_s / 3, keyed=KEYED[(seed - 1) % len(KEYED)],
        keys=rng.choice((12, 24, 60)), high=rng.choice((0.05, 0.1, 0.2)),
        low=rng.choice((0.2, 0.4)),
    )  # fmt: skip


# --------------------------------------------------------------------------- the judgement


def moved_keys(keys: Sequence[str], before: int, after: int) -> set[str]:
    """The keys whose group changes from ``before`` to ``after`` groups (jump hash: only to a
    new group, about ``1 - before/after`` of them)."""
    return {k for k in keys if jump_hash(k, before) != jump_hash(k, after)}


def key_order(log: Sequence[promises.Delivery], moved: set[str]) -> dict[str, Any]:
    """:func:`emq.bench.order.key_inversions` over all keys, apart over the keys the raise moved
    and those it left in their group, and ``within_groups``: summed over the groups (``g`` in
    the URL), each judged alone (a moved key's jobs in its old group and in its new one)."""

    def of(keep: Callable[[promises.Delivery], bool]) -> dict[str, Any]:
        return promises.key_inversions([d for d in log if d.key is not None and keep(d)])

    groups = {d.group for d in log if d.key is not None}
    return {
        "inversions": promises.key_inversions(log)["inversions"],
        "moved": of(lambda d: d.key in moved),
        "unmoved": of(lambda d: d.key not in moved),
        "within_groups": sum(of(lambda d, g=g: d.group == g)["inversions"] for g in groups),
    }


def reach_s(times: Sequence[float], at: float, qps: int, until: float) -> float | None:
    """Seconds from ``at`` until a sliding second starting at or after ``at`` first held
    :data:`REACH_SHARE` of ``qps`` before ``until`` (the next change): the arrival that made the
    count (sorted ``times``); None if none did."""
    need = math.ceil(REACH_SHARE * qps)
    for i in range(bisect.bisect_left(times, at), bisect.bisect_left(times, until)):
        if bisect.bisect_left(times, min(times[i] + 1.0, until), lo=i) - i >= need:
            return round(times[i + need - 1] - at, 3)
    return None


def per_second(times: Sequence[float], start: float, end: float) -> list[int]:
    """Arrivals in each whole second from ``start`` until ``end`` (sorted ``times``)."""
    edges = [start + k for k in range(math.ceil(end - start) + 1)]
    at = [bisect.bisect_left(times, edge) for edge in edges]
    return [b - a for a, b in itertools.pairwise(at)]


def judge(
    log: Sequence[promises.Delivery],
    accepted: set[str],
    dead: set[str],
    plan: Plan,
    changes: Sequence[tuple[float, promises.Quota]],
    keys: Sequence[str],
    accepted_at: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Figures of one run: ``accepted``, the ids of the topic's jobs; ``changes``, the raise
    and the lowering as ``(at, quota)``; ``accepted_at``, see :func:`promises.check`."""
    log = [d for d in log if d.topic == TOPIC]
    quota = promises.Quota(plan.qps, plan.groups_before)
    result = promises.check(
        log, accepted, dead, {TOPIC: quota}, changes={TOPIC: changes}, accepted_at=accepted_at
    )
    topic = result["topics"][TOPIC]
    times = promises.by_topic(log).get(TOPIC, [])
    raised_at, lowered_at = changes[0][0], changes[1][0]
    order = key_order(log, moved_keys(keys, plan.groups_before, plan.groups_after))
    figures = {
        "lost": result["lost"],
        "duplicates": result["duplicates"],
        "key_inversions": order["inversions"],
        "second_over_quota": int(not topic["second_within"]),
        "window_over_quota": int(bool(result["quota_exceeded"])),
        "reach_s": reach_s(times, raised_at, plan.raised, lowered_at),
    }
    detail = {
        "accepted": result["accepted"],
        "delivered": result["delivered"],
        "lost_sample": result["lost_sample"],
        "keys": order,
        "busiest_window": topic["busiest_window"],
        "worst_window": topic["worst_window"],
        "window_ratio": topic["window_ratio"],
        "second_ratio": topic["second_ratio"],
        "priority_inversions": result["priority"]["inversions"],
        # Requests in each second from the raise on (the lowering is phase_s later).
        "per_second_from_raise": per_second(times, raised_at, lowered_at + 3.0),
    }
    return {"figures": figures, "pass": verdict(figures), "detail": detail}


def verdict_of(name: str, value: float | None) -> bool:
    op, bound = BOUNDS[name]
    if value is None:
        return False  # a figure that could not be measured (the quota never reached) fails
    return value <= bound if op == "<=" else value >= bound


def verdict(figures: dict[str, Any]) -> dict[str, bool]:
    return {name: verdict_of(name, figures[name]) for name in BOUNDS}


# --------------------------------------------------------------------------- one run


async def _arrive(run: mixed.Run, t: mixed.TopicSpec, rate: float, seconds: float) -> None:
    """Jobs of ``t`` through the API at ``rate`` a second for ``seconds``, a batch a tick."""
    started, sent = time.monotonic(), 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(rate * min(seconds, elapsed + TICK_S)) - sent
        if due > 0:
            await run.enqueue(t, due)
            sent += due
        await asyncio.sleep(max(0.0, started + elapsed + TICK_S - time.monotonic()))


async def _timeline(run: mixed.Run, plan: Plan) -> None:
    t = plan.topic()
    await run.enqueue(t, t.jobs)  # the backlog
    await _arrive(run, t, plan.qps, plan.phase_s)
    await run.change_quota(t)
    await _arrive(run, t, plan.arrive_raised * plan.raised, plan.phase_s)
    await run.change_quota(dataclasses.replace(t, new_qps=plan.lowered_qps))
    await _arrive(run, t, plan.lowered_qps, plan.phase_s)


async def run_plan(rig: Rig, plan: Plan) -> dict[str, Any]:
    """Run ``plan`` on ``rig`` and judge the sink's log."""
    base = await rig.api()
    spec = mixed.Spec(plan.seed, plan.phase_s * 3, 2, False, (plan.topic(),))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = mixed.Run(rig, spec, base, http)
        await run.create(plan.topic())
        for i in range(2):
            rig.worker(f"w{i}", standalone=False, **mixed.WORKER_ENV)
        await mixed.probe(rig, run)
        probe = set(rig.accepted)
        started = time.monotonic()
        await _timeline(run, plan)
        drain = await rig.wait_delivered(set(rig.accepted), plan.phase_s * 6 + 30, dead=True)
    log, dead = await rig.deliveries(), await rig.dead_ids()
    stop_all([p for p in rig.procs if p.alive], hurry=True)  # at once, not one after another
    out = judge(
        log, rig.accepted - probe, dead, plan, run.changes[TOPIC], run.keys[TOPIC], run.accepted_at
    )
    out["detail"] |= {
        "groups": [plan.groups_before, plan.groups_after],
        "quotas": [plan.qps, plan.raised, plan.lowered_qps],
        "run_s": round(time.monotonic() - started, 1),
        "drain_s": round(drain, 1),
        "api_refusals": run.api_refusals,
    }
    return {"seed": plan.seed} | out | {"plan": dataclasses.asdict(plan)}


async def run_one(plan: Plan) -> dict[str, Any]:
    """One plan on a fresh rig (an error is reported, not raised: other seeds still run)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"emq-regroup-{plan.seed}-") as tmp:
        async with Rig.running(Path(tmp)) as rig:
            try:
                out = await run_plan(rig, plan)
            except Exception as e:
                out = {"seed": plan.seed, "figures": {}, "pass": {}, "error": repr(e)}
                out["plan"] = dataclasses.asdict(plan)
    return out | {"seconds": round(time.monotonic() - started, 1)}


# --------------------------------------------------------------------------- several seeds


def run(
    seeds: Sequence[int], duration_s: float = 15.0, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Every seed in turn: per-seed results, the worst figure per target and the verdict."""
    import uvloop

    started = time.monotonic()
    results = []
    for seed in seeds:
        plan = make_plan(seed, duration_s)
        say(f"regroup seed {seed}: {plan.qps} -> {plan.raised} -> {plan.lowered_qps} QPS, "
            f"{plan.groups_before} -> {plan.groups_after} groups...")  # fmt: skip
        results.append(uvloop.run(run_one(plan)))
        say(f"regroup seed {seed}: {results[-1].get('error') or results[-1]['figures']}")
    worst: dict[str, Any] = {}
    for name in BOUNDS:
        values = [r["figures"].get(name) for r in results if "error" not in r]
        worst[name] = None if not values or None in values else max(values)
    passed = {name: verdict_of(name, value) for name, value in worst.items()}
    return {
        "bench": "regroup",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "seconds": round(time.monotonic() - started, 1),
        "bounds": {k: f"{op} {b:g}" for k, (op, b) in BOUNDS.items()},
        "worst": worst,
        "pass": passed,
        "ok": all(passed.values()) and not any("error" in r for r in results),
        "seeds": results,
    }


def run_cli(
    seeds: int, duration_s: float | None, say: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """``emq bench regroup``: seeds ``1..seeds``, each ``duration_s`` long (15 by default: three
    phases of 5 s, then the drain); a bad value is one :class:`EmqError` line."""
    duration_s = mixed.seeded_arguments(seeds, duration_s, default_s=15.0, min_s=3.0)
    return run(range(1, seeds + 1), duration_s, say=say)


def summary(doc: dict[str, Any]) -> str:
    """One row per target: each seed's figure, the worst, the bound and whether it was met."""
    seeds = doc["seeds"]
    cols = " | ".join(f"seed {r['seed']}" for r in seeds)
    head = f"| target | {cols} | worst | bound | met |"
    lines = [head, "|---" * (len(seeds) + 4) + "|"]
    for name, bound in doc["bounds"].items():
        cells = [str(r["figures"].get(name, r.get("error", "-"))) for r in seeds]
        met = "yes" if doc["pass"][name] else "**no**"
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {doc['worst'][name]} | {bound} | {met} |"
        )
    return "\n".join(lines)
