"""``emq bench promises``: randomized mixed workloads on the real parts, judged by the checker.

A seed makes a :class:`Spec` (:func:`make_spec`, plain ``random.Random``): a few topics with
quotas from 1 to ``max_qps`` (log-uniform), each of one kind —

* ``steady``: a backlog of about ``qps * duration`` jobs at ``/t/``, mixed priorities, some
  keyed (``k``, ``s`` in the URL), some delayed, plus highs trickling in while it drains;
* ``flood``: jobs offered at 10x the quota for the first part of the run;
* ``fail`` / ``busy``: an endpoint that answers 500 (or 503 with ``Retry-After: 1``) ``n`` times
  per job, then 200; ``hang``: one that never answers (its jobs end in the DLQ); ``slow``: one
  that answers after 300 ms —

and maybe a quota change mid-run (admin ``PATCH`` through the API) and, for a two-worker fleet,
a worker killed with ``kill -9`` and replaced. :func:`run_seed` runs a spec on a
:class:`~emq.bench.rig.Rig` (real Redis, ZooKeeper, ``emq api``, ``emq worker`` processes and
the recording sink), enqueuing through the API with each job's group, priority, key, key
sequence, enqueue time and delay in its URL's query, waits until every accepted job is
delivered or dead-lettered, and hands the log, the accepted ids and the DLQ to
:func:`emq.bench.promises.check`. :func:`run` does that for several seeds and reports each
promise's figure per seed and the worst.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from capacity import group_count
from emq.api.enqueue import jump_hash
from emq.bench import promises
from emq.bench.harness import CpuMeter
from emq.bench.machine import describe
from emq.bench.rig import ADMIN_TOKEN, BODY, TENANT, Rig
from emq.core.errors import EmqError

KINDS = ("steady", "steady", "steady", "flood", "fail", "busy", "hang", "slow")
MISBEHAVING = frozenset({"flood", "fail", "busy", "hang", "slow"})
PRIORITIES = ("high", "medium", "low")
CHANGE_AT = 0.4  # the live quota changes come at this share of the run
STEADY_MIN_JOBS = 100  # fewer and one job more or less moves the sustained rate by >1 %
SLOW_MS = 300  # how long a slow endpoint takes to answer
# A key carries one request at a time (order per key), so a group delivers at most its keys /
# the key's cycle (the sink's answer to a key's job to the arrival of its next), measured by
# ``emq bench dispatch --workload W12`` (8 keys beside 6000 jobs/s of unkeyed work, shared
# 2-core machine): p50 1.8 ms, p99 12 ms; KEY_CYCLE_S budgets 20 ms, that p99 with room for a
# mixed run's heavier load. What made seed 3's t2 (1043 QPS, 7 groups, every job keyed on 21
# keys) sustain 0.607 of its quota was not the cycle but the hashing: its keys fell 5/5/5/3/2/
# 1/0 into its groups, and the jobs with them, so the groups with few keys ran out of jobs in
# seconds (the one-key group delivered at its full share, 147/s, for 7 s, then nothing) while
# the topic's backlog sat in three groups that can each send only their share (149/s: the
# "34 ms" per key seen there was 149/s over 5 keys, the quota's pace, not the cycle). A topic's
# quota is split over its groups, so a backlog held by some of them cannot use the others':
# that is the design, not a promise broken. So a keyed topic here gets as many keys in every
# group, at least one per KEY_CYCLE_S of the group's share (:func:`key_names`), and its
# backlog spreads over its groups as an unkeyed one's does.
KEY_CYCLE_S = 0.02
WORKER_ENV = {"EMQ_WORKER_REQUEST_TIMEOUT_S": "1"}  # hanging jobs reach the DLQ in seconds


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    name: str
    kind: str
    qps: int
    jobs: int
    high: float  # share of high and of low jobs (the rest: medium)
    low: float
    keyed: float  # share of jobs with a key, one of the topic's key_names
    keys: int  # keys asked for (key_names: at least as many, the same number in every group)
    delayed: float  # share of jobs with a delay of up to 2 s
    fails: int = 0  # fail/busy: failed answers per job before the 200
    new_qps: int | None = None  # the quota set mid-run


@dataclasses.dataclass(frozen=True)
class Spec:
    seed: int
    duration_s: float
    workers: int  # 1: one standalone worker; 2: a fleet
    crash: bool  # fleet: kill -9 one worker mid-run and start another
    topics: tuple[TopicSpec, ...]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def make_spec(seed: int, duration_s: float = 20.0, max_qps: int = 3000, topics: int = 5) -> Spec:
    """The spec of ``seed``: the same seed gives the same spec (see the module docstring)."""
    rng = random.Random(seed)
    workers = rng.choice((1, 1, 2))
    specs = [_topic(rng, f"t{i}", rng.choice(KINDS), duration_s, max_qps) for i in range(topics)]
    if all(t.kind != "steady" for t in specs):  # sustained rate and isolation need one
        specs[0] = _topic(rng, "t0", "steady", duration_s, max_qps)
    return Spec(seed, duration_s, workers, workers == 2 and rng.random() < 0.3, tuple(specs))


def _topic(rng: random.Random, name: str, kind: str, duration_s: float, max_qps: int) -> TopicSpec:
    qps = max(1, round(math.exp(rng.uniform(0, math.log(max_qps)))))
    new_qps = None
    if rng.random() < 0.4:
        new_qps = max(1, min(max_qps, round(qps * rng.choice((0.5, 2.0)))))
    span_qps = min(qps, new_qps or qps)
    # A steady backlog lasts the run at the quotas in force (the change comes at CHANGE_AT of
    # it): sized at the lower quota, a doubled topic ran dry after the change and the trickled
    # highs alone made its "sustained" rate ~0.6 (the checker judges every complete second).
    steady = qps * duration_s * (CHANGE_AT + (1 - CHANGE_AT) * (new_qps or qps) / qps)
    # The other kinds are sized at the lower quota too: a fail or busy job takes up to three
    # requests, and sized at the first quota, a topic whose quota halves would take twice the
    # run. A hanging job holds its push for the worker's whole request timeout (WORKER_ENV),
    # twice, and the worker lets a hanging topic have only a few pushes out at once: its jobs
    # reach the DLQ at about one a second, so a short run gets no more of them than it has
    # seconds (else their drain, not the run, sets how long a seed takes).
    jobs = {
        "steady": math.ceil(steady),
        "flood": math.ceil(span_qps * duration_s * 0.8),
        "hang": min(20, qps * 2, max(1, int(duration_s))),
    }.get(kind, min(2000, math.ceil(span_qps * duration_s / 3)))
    high, low = rng.choice((0.0, 0.05, 0.2)), rng.choice((0.3, 0.6))
    keyed, keys = rng.choice((0.0, 0.3, 1.0)), rng.choice((3, 20, 200))
    return TopicSpec(
        name=name,
        kind=kind,
        qps=qps,
        jobs=max(1, jobs),
        high=high,
        low=low,
        keyed=keyed,
        keys=keys,
        delayed=rng.choice((0.0, 0.05)),
        fails=rng.randint(1, 2) if kind in ("fail", "busy") else 0,
        new_qps=new_qps,
    )


def key_names(keys: int, quotas: Sequence[int]) -> list[str]:
    """The key names of a keyed topic asked for ``keys`` keys, at ``quotas`` (the first, then
    the one set mid-run): as many in every group at the first quota (at least ``keys`` in all,
    and one per KEY_CYCLE_S of a group's share), plus any that the groups at a later quota lack
    of that minimum (a key can move group when the group count changes: jump hash moves few).
    Names are ``k<n>``, picked in order of ``n`` by the group they hash to (see KEY_CYCLE_S)."""
    first, *later = quotas
    groups = group_count(first)
    per = max(1, math.ceil(keys / groups), math.ceil(first / groups * KEY_CYCLE_S))
    counts, names, n = [0] * groups, list[str](), 0
    while len(names) < per * groups:
        g = jump_hash(f"k{n}", groups)
        if counts[g] < per:
            counts[g] += 1
            names.append(f"k{n}")
        n += 1
    for qps in later:
        groups = group_count(qps)
        need = math.ceil(qps / groups * KEY_CYCLE_S)
        counts = [0] * groups
        for name in names:
            counts[jump_hash(name, groups)] += 1
        while min(counts) < need:
            g = jump_hash(f"k{n}", groups)
            if counts[g] < need:
                counts[g] += 1
                names.append(f"k{n}")
            n += 1
    return names


# --------------------------------------------------------------------------- one seed


class Run:
    """One spec on one rig: topics through the API, jobs through the API, the timeline."""

    def __init__(self, rig: Rig, spec: Spec, base: str, http: aiohttp.ClientSession) -> None:
        self.rig, self.spec, self.base, self.http = rig, spec, base, http
        self.groups: dict[str, int] = {}
        self.seq: dict[tuple[str, str], int] = {}
        self.changes: dict[str, list[tuple[float, promises.Quota]]] = {}
        self.faults: list[float] = []
        self.rng = random.Random(spec.seed + 1)
        self.keys = {t.name: key_names(t.keys, (t.qps, t.new_qps or t.qps)) for t in spec.topics}
        self.api_refusals = 0
        # Per job id: when the API's 202 came back (the job's URL carries when it was made, up
        # to a loaded API's answer to its batch of 1000 earlier: the checker's "ready" is the
        # later of the two).
        self.accepted_at: dict[str, float] = {}

    async def call(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        url = f"{self.base}/v1/tenants/{TENANT}{path}"
        async with self.http.request(method, url, json=body, headers=headers) as r:
            return r.status, await r.json(content_type=None)

    async def create(self, t: TopicSpec) -> None:
        body: dict[str, Any] = {"topic": t.name, "qps": t.qps, "max_backlog": 1_000_000}
        if t.kind in ("fail", "busy", "hang"):
            attempts = t.fails + 2 if t.kind != "hang" else 2
            body["retry"] = {"max_attempts": attempts, "base_delay_s": 0.2, "jitter": 0.0}
        status, answer = await self.call("POST", "/topics", body)
        if status != 201:
            raise EmqError(f"creating topic {t.name}: {status} {answer}")
        self.rig.adopt(await self.rig.config.get_topic(self.rig.ref(t.name)))
        self.groups[t.name] = int(answer["groups"])

    def job(self, t: TopicSpec, priority: str | None = None) -> dict[str, Any]:
        """One job of ``t`` with what the checker needs in its URL's query."""
        rng = self.rng
        if priority is None:
            roll = rng.random()
            priority = "high" if roll < t.high else "low" if roll < t.high + t.low else "medium"
        key = rng.choice(self.keys[t.name]) if rng.random() < t.keyed else None
        pin = key or f"i{rng.getrandbits(48):x}"
        query = f"g={jump_hash(pin, self.groups[t.name])}&p={priority}&e={time.time():.4f}"
        job: dict[str, Any] = {"body": BODY, "priority": priority}
        if key is not None:
            seq = self.seq[(t.name, key)] = self.seq.get((t.name, key), -1) + 1
            query += f"&k={key}&s={seq}"
            job["key"] = key
        else:
            job["idempotency_key"] = pin  # pins the group the URL names
        if key is None and rng.random() < t.delayed:
            job["delay_s"] = round(rng.uniform(0.1, 2.0), 2)
            query += f"&d={job['delay_s']}"
        kind = {"steady": "t", "flood": "t", "fail": f"fail/{t.fails}"}.get(t.kind, t.kind)
        kind = {"busy": f"busy/{t.fails}", "slow": f"slow/{SLOW_MS}"}.get(kind, kind)
        job["url"] = self.rig.url(t.name, kind, query)
        return job

    async def enqueue(self, t: TopicSpec, count: int, priority: str | None = None) -> None:
        for start in range(0, count, 1000):
            jobs = [self.job(t, priority) for _ in range(min(1000, count - start))]
            status, answer = await self.call("POST", f"/topics/{t.name}/jobs", {"jobs": jobs})
            if status == 202:
                self.rig.accepted.update(answer["ids"])
                self.accepted_at.update(dict.fromkeys(answer["ids"], time.time()))
            else:
                self.api_refusals += 1

    async def change_quota(self, t: TopicSpec) -> None:
        assert t.new_qps is not None
        status, answer = await self.call("PATCH", f"/topics/{t.name}", {"qps": t.new_qps})
        if status != 200:
            raise EmqError(f"changing the quota of {t.name}: {status} {answer}")
        self.groups[t.name] = int(answer["groups"])
        quota = promises.Quota(t.new_qps, self.groups[t.name])
        self.changes.setdefault(t.name, []).append((time.time(), quota))


async def probe(rig: Rig, run: Run, timeout_s: float = 60.0) -> None:
    """Wait until the workers deliver (a probe job of a topic of its own)."""
    probe = TopicSpec("probe", "steady", 50, 1, 0, 0, 0, 1, 0)
    await run.create(probe)
    await run.enqueue(probe, 1)
    await rig.wait_delivered(set(rig.accepted), timeout_s)
    if not rig.accepted <= promises.delivered_ids(await rig.deliveries()):
        tails = "; ".join(f"{p.name}: {p.log(300)!r}" for p in rig.procs if p.name != "api")
        raise EmqError(f"the workers did not deliver within {timeout_s:g} s ({tails})")


async def _timeline(run: Run) -> None:
    """The run's events: floods, highs trickling in, the quota changes, the crash."""
    spec, started = run.spec, time.monotonic()
    floods = {t.name: t.jobs for t in spec.topics if t.kind == "flood"}
    steady = [t for t in spec.topics if t.kind == "steady"]
    changed = False
    crash_at = spec.duration_s * 0.6 if spec.crash else math.inf
    while (elapsed := time.monotonic() - started) < spec.duration_s * 0.8:
        for t in spec.topics:
            left = floods.get(t.name, 0)
            if left:  # 10x the quota each second until its share is in
                await run.enqueue(t, min(left, 10 * t.qps))
                floods[t.name] = max(0, left - 10 * t.qps)
        for t in steady:
            if t.high:
                await run.enqueue(t, max(1, t.qps // 20), "high")
        if not changed and elapsed >= spec.duration_s * CHANGE_AT:
            changed = True
            for t in spec.topics:
                if t.new_qps is not None:
                    await run.change_quota(t)
        if elapsed >= crash_at:
            crash_at = math.inf
            _crash(run)
        await asyncio.sleep(1.0)


def _crash(run: Run) -> None:
    victim = next(p for p in run.rig.procs if p.name.startswith("w") and p.alive)
    victim.kill()
    run.faults.append(time.time())
    run.rig.worker(f"{victim.name}-r", False, **WORKER_ENV)


async def run_seed(rig: Rig, spec: Spec, log_dir: Path | None = None) -> dict[str, Any]:
    """Run ``spec`` on ``rig`` and check the log: figures, verdicts and the timeline; with
    ``log_dir``, the checker's inputs are kept there too (:func:`keep_inputs`)."""
    base = await rig.api()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        run = Run(rig, spec, base, http)
        for t in spec.topics:
            await run.create(t)
        standalone = spec.workers == 1
        for i in range(spec.workers):
            rig.worker(f"w{i}", standalone=standalone, **WORKER_ENV)
        await probe(rig, run)
        for t in spec.topics:
            if t.kind != "flood":
                await run.enqueue(t, t.jobs)
        await _timeline(run)
        waited = await rig.wait_delivered(set(rig.accepted), spec.duration_s * 2 + 30, dead=True)
    log, dead = await rig.deliveries(), await rig.dead_ids()
    if not promises.lost(rig.accepted, log, dead):
        stored: set[str] = set()
    else:  # the wait ended first: what is still in the queues is waiting, not lost
        for proc in rig.procs:
            if proc.name.startswith("w") and proc.alive:
                proc.stop()  # (checkpoints: what it delivered is not counted as stored)
        log, dead, stored = await rig.deliveries(), await rig.dead_ids(), await rig.stored_ids()
    inputs: dict[str, Any] = {
        "faults": run.faults,
        "changes": run.changes,
        "steady": [] if run.faults else _steady(spec),
        "misbehaving": [t.name for t in spec.topics if t.kind in MISBEHAVING],
        "answer_s": {t.name: SLOW_MS / 1000 for t in spec.topics if t.kind == "slow"},
        "stored": stored,
        "accepted_at": run.accepted_at,
    }
    if log_dir is not None:
        keep_inputs(log_dir / f"seed-{spec.seed}.json", log, rig.accepted, dead, rig.quotas, inputs)
    result = promises.check(log, rig.accepted, dead, rig.quotas, **inputs)
    return {
        "seed": spec.seed,
        "figures": promises.figures(result),
        "pass": promises.verdict(result),
        "detail": {k: v for k, v in result.items() if k not in ("topics", "quota_exceeded")}
        | {"quota_exceeded": result["quota_exceeded"], "drain_s": round(waited, 1)}
        | {"api_refusals": run.api_refusals, "quota_changes": len(run.changes)},
        "spec": spec.to_dict(),
    }


def keep_inputs(
    path: Path,
    log: Sequence[promises.Delivery],
    accepted: set[str],
    dead: set[str],
    quotas: dict[str, promises.Quota],
    inputs: dict[str, Any],
) -> None:
    """Write what :func:`promises.check` judged a seed on (the sink's log, the ids accepted
    and dead, the quotas and the rest) as JSON, for :func:`recheck` and for reading."""
    doc = {
        "log": [dataclasses.astuple(d) for d in log],
        "accepted": sorted(accepted),
        "dead": sorted(dead),
        "quotas": {t: dataclasses.asdict(q) for t, q in quotas.items()},
        **inputs,
        "stored": sorted(inputs["stored"]),
        "changes": {
            t: [(at, dataclasses.asdict(q)) for at, q in c] for t, c in inputs["changes"].items()
        },
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def recheck(path: Path) -> dict[str, Any]:
    """:func:`promises.check` again on the inputs :func:`keep_inputs` wrote."""
    doc = json.loads(path.read_text())
    quota = lambda q: promises.Quota(**q)  # noqa: E731
    return promises.check(
        [promises.Delivery(*row) for row in doc.pop("log")],
        doc.pop("accepted"),
        doc.pop("dead"),
        {t: quota(q) for t, q in doc.pop("quotas").items()},
        **doc
        | {"changes": {t: [(at, quota(q)) for at, q in c] for t, c in doc["changes"].items()}},
    )


def _steady(spec: Spec) -> list[str]:
    return [t.name for t in spec.topics if t.kind == "steady" and t.jobs >= STEADY_MIN_JOBS]


async def run_one(
    spec: Spec, redis_rtt_ms: float | None = None, log_dir: Path | None = None
) -> dict[str, Any]:
    """One seed on a fresh rig (any error is reported, not raised: other seeds still run).
    With ``redis_rtt_ms``, the workers and the API reach Redis through the delaying proxy
    (:class:`Rig`); ``redis_link`` then says what it carried and its CPU over the run. With
    ``log_dir``, the seed's checker inputs are kept there (:func:`keep_inputs`)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"emq-promises-{spec.seed}-") as tmp:
        async with Rig.running(Path(tmp), redis_rtt_ms=redis_rtt_ms) as rig:
            proxy = CpuMeter({"proxy": rig.link.pid} if rig.link else {}).start()
            try:
                out = await run_seed(rig, spec, log_dir)
            except Exception as e:
                out = {"seed": spec.seed, "figures": {}, "pass": {}, "error": repr(e)}
                out["spec"] = spec.to_dict()
            used = proxy.read()
        if rig.link is not None:  # (stopped now: it has told how many connections it relayed)
            out["redis_link"] = {
                "rtt_ms": rig.link.rtt_ms,
                "proxy_connections": rig.link.connections,
                "proxy_cpu_s": round(used["proxy"], 2),
                "proxy_cpu_pct_of_core": round(100 * used["proxy"] / used["wall_s"], 1),
            }
    return out | {"seconds": round(time.monotonic() - started, 1)}


# --------------------------------------------------------------------------- several seeds


def worst(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per promise the worst figure over the seeds that measured it."""
    out: dict[str, Any] = {}
    for name, (op, _) in promises.BOUNDS.items():
        values = [r["figures"][name] for r in results if r["figures"].get(name) is not None]
        out[name] = (max if op == "<=" else min)(values) if values else None
    return out


def run(
    seeds: Sequence[int],
    duration_s: float = 20.0,
    max_qps: int = 3000,
    say: Callable[[str], None] = lambda _: None,
    redis_rtt_ms: float | None = None,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Every seed in turn: one document with the per-seed results, the worst figures and the
    verdict per promise (a promise no seed measured is neither met nor broken); with
    ``redis_rtt_ms``, Redis a hop away from the workers and the API (:func:`run_one`); with
    ``log_dir``, each seed's checker inputs in ``log_dir/seed-N.json`` (:func:`keep_inputs`)."""
    import uvloop

    started = time.monotonic()
    results = []
    for seed in seeds:
        spec = make_spec(seed, duration_s, max_qps)
        say(f"promises seed {seed}: {[(t.kind, t.qps) for t in spec.topics]}...")
        results.append(uvloop.run(run_one(spec, redis_rtt_ms, log_dir)))
        say(f"promises seed {seed}: {results[-1].get('error') or results[-1]['pass']}")
    figures = worst(results)
    verdict = {
        name: None if value is None else promises.verdict_of(name, value)
        for name, value in figures.items()
    }
    return {
        "bench": "promises",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": describe(),
        "seconds": round(time.monotonic() - started, 1),
        "bounds": {k: f"{op} {b:g}" for k, (op, b) in promises.BOUNDS.items()},
        "worst": figures,
        "pass": verdict,
        "ok": all(v is not False for v in verdict.values())
        and not any("error" in r for r in results),
        "seeds": results,
    }


def run_cli(
    seeds: int,
    duration_s: float | None,
    say: Callable[[str], None] = lambda _: None,
    only: Sequence[int] = (),
    log_dir: str | None = None,
) -> dict[str, Any]:
    """``emq bench promises``: seeds ``1..seeds`` (or the seeds ``only`` names), each
    ``duration_s`` long (30 by default), each seed's checker inputs kept in ``log_dir`` if
    given; a bad value is one :class:`~emq.core.errors.EmqError` line."""
    duration_s = seeded_arguments(seeds, duration_s, default_s=30.0, min_s=5.0)
    if any(not 1 <= seed <= 1_000_000 for seed in only):
        raise EmqError("--seed must be between 1 and 1000000")
    chosen = list(dict.fromkeys(only)) or range(1, seeds + 1)
    return run(chosen, duration_s, say=say, log_dir=None if log_dir is None else Path(log_dir))


def seeded_arguments(seeds: int, duration_s: float | None, default_s: float, min_s: float) -> float:
    """A seeded bench's ``--seeds`` (1 to 100) and ``--duration-s`` (``min_s`` to 600, else
    ``default_s``), each out of range one :class:`~emq.core.errors.EmqError` line; the duration.
    The run's own clients log only errors: their reconnects to the rig's servers are no news."""
    for name in ("kazoo", "adapters"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if not 1 <= seeds <= 100:
        raise EmqError("--seeds must be between 1 and 100")
    duration_s = default_s if duration_s is None else duration_s
    if not min_s <= duration_s <= 600:
        raise EmqError(f"--duration-s must be between {min_s:g} and 600")
    return duration_s


def summary(doc: dict[str, Any]) -> str:
    """One row per promise: each seed's figure, the worst, the bound and whether it was met."""
    seeds = doc["seeds"]
    head = (
        "| promise | " + " | ".join(f"seed {r['seed']}" for r in seeds) + " | worst | bound | met |"
    )
    lines = [head, "|---" * (len(seeds) + 4) + "|"]
    for name, bound in doc["bounds"].items():
        cells = [str(r["figures"].get(name, r.get("error", "-"))) for r in seeds]
        met = {True: "yes", False: "**no**", None: "not measured"}[doc["pass"][name]]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {doc['worst'][name]} | {bound} | {met} |"
        )
    return "\n".join(lines)
