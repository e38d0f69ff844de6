"""``emq bench peers``: EMQ against BullMQ (Node) in one run, on the same sink and workload.

The workload (issue 14's comparison): ten tenants, one topic (EMQ) or queue (BullMQ) each,
``N`` jobs each stored before timing starts, each job a POST of a 200-byte JSON body to the one
sink process (:mod:`emq.rigs.sink`, ``/t/peers-<i>``). No rate limit binds: each EMQ topic's
quota (:data:`QPS`, its jobs spread over all its groups as the API spreads them) is far above what
one process delivers; BullMQ has none. Topics do not sign (BullMQ's processor does not either).

The two sides, each one process measured on its own:

* **EMQ**: one worker process (:mod:`emq.bench.worker_proc`: wired as ``emq worker
  --standalone`` with the default HTTP client, topics from memory instead of ZooKeeper);
* **BullMQ**: one Node process (``peers_bullmq.mjs``, shipped beside this module) with a
  ``Worker`` per queue whose processor POSTs the job's body with Node's ``fetch`` or with
  undici's leaner ``request()`` (both keep-alive), jobs added beforehand with ``addBulk`` to db 1
  of the same Redis; BullMQ and undici are installed once with npm into :data:`CACHE`. It runs
  with each client and concurrency (per Worker) of :data:`BULLMQ_RUNS`; the best run counts.

Per run: jobs/s from the first to the last arrival at the sink, the process's CPU (``/proc``)
from when it was told to start to when the sink had every job, CPU seconds per 1000 jobs and jobs
per CPU-second; and the ratio EMQ/BullMQ of jobs per CPU-second (issue 14's target: >= 1.5).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

from capacity import group_count
from emq.bench.harness import HEADERS, Contention, CpuMeter, Harness, preload, stopping
from emq.bench.machine import describe
from emq.bench.workloads import start_worker
from emq.core.errors import EmqError
from emq.core.interfaces import PutItem
from emq.core.job import Job
from emq.core.model import Envelope, Namespace, Priority, TopicRef

CACHE = Path.home() / ".cache" / "emq-bench-peers"
NPM_PACKAGES = ("bullmq@5", "undici@6")
SCRIPT = Path(__file__).with_name("peers_bullmq.mjs")
TENANTS = 10
QPS = 5_000  # per topic: 10 topics x 5 000/s, far above one worker process
BULLMQ_RUNS = (("fetch", 8), ("fetch", 32), ("undici", 8), ("undici", 32), ("undici", 128))
TARGET = 1.5  # EMQ's jobs per CPU-second over BullMQ's (issue 14)
JOBS_PER_TENANT_PER_S = 500  # --duration-s 5: 2 500 jobs per tenant, 25 000 a run


def body_of(size: int = 200) -> str:
    """A JSON object of exactly ``size`` bytes (ASCII)."""
    head = '{"event":"order.created","pad":"'
    tail = '"}'
    if size < len(head) + len(tail):
        raise EmqError(f"a body of {size} bytes is too small")
    return head + "x" * (size - len(head) - len(tail)) + tail


BODY = body_of()


def figures(jobs: int, seconds: float, cpu_s: float) -> dict[str, float]:
    """A run's figures: ``jobs`` delivered over ``seconds`` (first to last arrival) using
    ``cpu_s`` of the process's CPU."""
    if jobs <= 0 or seconds <= 0 or cpu_s <= 0:
        raise EmqError(f"no figures from {jobs} jobs in {seconds} s using {cpu_s} CPU-s")
    return {
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "cpu_s": round(cpu_s, 3),
        "jobs_per_s": round(jobs / seconds, 1),
        "cpu_s_per_1000_jobs": round(1000 * cpu_s / jobs, 4),
        "jobs_per_cpu_s": round(jobs / cpu_s, 1),
        "cpu_pct_of_core": round(100 * cpu_s / seconds, 1),
    }


def best(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The run with the most jobs/s (runs that failed carry ``error`` and never count)."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        raise EmqError("no run succeeded")
    return max(ok, key=lambda r: r["jobs_per_s"])


def compare(emq: dict[str, Any], bullmq: dict[str, Any]) -> dict[str, Any]:
    """EMQ over BullMQ: jobs per CPU-second (the target) and jobs/s."""
    per_core = emq["jobs_per_cpu_s"] / bullmq["jobs_per_cpu_s"]
    with_redis = emq.get("jobs_per_cpu_s_with_redis", 0) / bullmq.get(
        "jobs_per_cpu_s_with_redis", 1
    )
    return {
        "jobs_per_core_ratio": round(per_core, 3),
        "jobs_per_core_with_redis_ratio": round(with_redis, 3),
        "jobs_per_s_ratio": round(emq["jobs_per_s"] / bullmq["jobs_per_s"], 3),
        "target": f">= {TARGET:g}",
        "pass": per_core >= TARGET,
    }


def leanest_ratio(emq: dict[str, Any], runs: Iterable[dict[str, Any]]) -> float:
    """EMQ's jobs per CPU-second over the best of any BullMQ run that did not fail."""
    leanest = max(r["jobs_per_cpu_s"] for r in runs if "error" not in r)
    return round(float(emq["jobs_per_cpu_s"]) / float(leanest), 3)


# --------------------------------------------------------------------------- BullMQ install


def npm_version(cache: Path = CACHE, package: str = "bullmq") -> str | None:
    """The version of ``package`` installed in ``cache``, or None."""
    try:
        meta = json.loads((cache / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return str(meta["version"])


def _versions(cache: Path) -> dict[str, str] | None:
    found = {p.split("@")[0]: npm_version(cache, p.split("@")[0]) for p in NPM_PACKAGES}
    return None if None in found.values() else {k: str(v) for k, v in found.items()}


def install_bullmq(say: Callable[[str], None], cache: Path = CACHE) -> dict[str, str]:
    """The versions of BullMQ and undici, installing them into ``cache`` first if needed
    (npm, once)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise EmqError(f"{tool} is not on PATH: BullMQ's side needs Node.js and npm")
    versions = _versions(cache)
    if versions is not None:
        return versions
    say(f"installing {' '.join(NPM_PACKAGES)} into {cache} (once)")
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / "package.json").exists():
        (cache / "package.json").write_text('{"name": "emq-bench-peers", "private": true}\n')
    done = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(cache), *NPM_PACKAGES],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    versions = _versions(cache)
    if done.returncode != 0 or versions is None:
        raise EmqError(f"npm install {' '.join(NPM_PACKAGES)} failed: {done.stderr[-500:]}")
    return versions


# --------------------------------------------------------------------------- the runs


def _tenant(i: int) -> str:
    return f"peers{i}"


def _items(h: Harness, per_tenant: int) -> Iterable[PutItem]:
    """``per_tenant`` jobs per tenant, round-robin over tenants and each topic's groups."""
    groups = group_count(QPS)
    refs = [TopicRef(Namespace.ONLINE, _tenant(i), "push") for i in range(TENANTS)]
    stamp = int(time.time() * 1000)
    for n in range(per_tenant):
        for i, ref in enumerate(refs):
            queue = ref.group(n % groups).queue(Priority.MEDIUM)
            job_id = f"msg_peers{i:02d}{n:019d}"
            job = Job(url=f"{h.sink_base}/t/peers-{i}", headers=dict(HEADERS), body=BODY)
            yield PutItem(queue, job_id, Envelope(job_id, job, stamp).encode())


def _servers(h: Harness) -> dict[str, int]:
    return {"redis": h.redis_pid, "sink": h.sink_pid}


def server_share(used: dict[str, float], jobs: int) -> dict[str, float]:
    """What Redis and the sink spent per 1000 jobs meanwhile (not in the ratio: BullMQ does
    more of its work in Redis's Lua scripts, which this shows)."""
    out = {f"{k}_cpu_s_per_1000_jobs": round(1000 * used[k] / jobs, 4) for k in ("redis", "sink")}
    own = next(v for k, v in used.items() if k not in ("redis", "sink", "wall_s"))
    out["jobs_per_cpu_s_with_redis"] = round(jobs / max(1e-9, own + used["redis"]), 1)
    return out


async def _sink_span(h: Harness, jobs: int) -> float:
    stats = await h.sink_call("/_stats")
    if stats["requests"] < jobs:
        raise EmqError(f"the sink got {stats['requests']} of {jobs} jobs")
    return float(stats["last_at"] - stats["first_at"])


async def emq_run(h: Harness, per_tenant: int) -> dict[str, Any]:
    """One EMQ worker process delivers the preloaded jobs."""
    backend = await h.fresh("peers")
    jobs = await preload(backend, _items(h, per_tenant))
    topics = [
        {"tenant": _tenant(i), "topic": "push", "qps": QPS, "groups": group_count(QPS)}
        for i in range(TENANTS)
    ]
    worker = await start_worker(h, "peers-emq", {"topics": topics})
    with stopping(worker):
        meter = CpuMeter({"worker": worker.pid, **_servers(h)}).start()
        worker.load_topics()
        status = await worker.wait_for("delivered", jobs, timeout_s=60 + jobs / 500, every_s=0.1)
        used = meter.read()
    span = await _sink_span(h, jobs)
    return {
        **figures(jobs, span, used["worker"]),
        **server_share(used, jobs),
        "failed": status["failed"],
    }


async def _node(*args: str, stdin: int | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "node", str(SCRIPT), *args, stdin=stdin,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _bullmq_load(h: Harness, redis_url: str, per_tenant: int) -> int:
    loader = await _node("load", str(CACHE), redis_url, str(TENANTS), str(per_tenant),
                         h.sink_base, BODY)  # fmt: skip
    out, err = await asyncio.wait_for(loader.communicate(), 120)
    if loader.returncode != 0:
        raise EmqError(f"BullMQ's loader exited {loader.returncode}: {err.decode()[-500:]}")
    return int(json.loads(out)["added"])


async def bullmq_run(h: Harness, per_tenant: int, client: str, concurrency: int) -> dict[str, Any]:
    """One Node process with a BullMQ Worker per queue delivers the preloaded jobs."""
    await h.redis_client.flushall()
    await h.sink_call("/_reset")
    redis_url = f"redis://{h.redis.address}/1"
    jobs = await _bullmq_load(h, redis_url, per_tenant)
    proc = await _node("work", str(CACHE), redis_url, str(TENANTS), str(concurrency), client,
                       stdin=asyncio.subprocess.PIPE)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if line.strip() != b"ready":
            err = await proc.stderr.read()
            raise EmqError(f"BullMQ's worker did not start: {err.decode()[-500:]}")
        meter = CpuMeter({"bullmq": proc.pid, **_servers(h)}).start()
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        await _wait_sink(h, jobs, 60 + jobs / 500)
        used = meter.read()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    span = await _sink_span(h, jobs)
    return {**figures(jobs, span, used["bullmq"]), **server_share(used, jobs), "client": client,
            "concurrency_per_worker": concurrency}  # fmt: skip


async def _wait_sink(h: Harness, jobs: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while (await h.sink_call("/_stats"))["requests"] < jobs:
        if time.monotonic() > deadline:
            raise EmqError(f"BullMQ did not deliver {jobs} jobs within {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


Run = Callable[[Harness], Awaitable[dict[str, Any]]]
BullRun = Callable[[Harness, str, int], Awaitable[dict[str, Any]]]


async def take_turns(
    doc: dict[str, Any],
    emq_once: Run,
    bullmq_once: BullRun,
    bullmq_clients: Iterable[tuple[str, int]],
    figure: str,
    say: Callable[[str], None],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """EMQ, then BullMQ with each (client, concurrency), then EMQ again, on one Redis and one
    sink: what else the shared machine runs weighs on both sides. BullMQ's npm versions (or why
    it could not be installed) and the contention go into ``doc``; a BullMQ run that fails is
    kept as its error. Returns (EMQ's runs, BullMQ's runs); ``figure`` is what ``say`` shows."""
    try:
        doc["npm_versions"] = install_bullmq(say)
    except (EmqError, OSError, subprocess.TimeoutExpired) as e:
        doc["bullmq_error"] = str(e)
    with tempfile.TemporaryDirectory(prefix="emq-bench-peers-") as tmp:
        async with Harness.running(Path(tmp)) as h:
            contention = Contention(h.sink_pid, h.redis_pid).start()
            emq_runs = [await emq_once(h)]
            say(f"emq: {emq_runs[-1][figure]} {figure}")
            bull_runs: list[dict[str, Any]] = []
            for client, c in bullmq_clients if "npm_versions" in doc else ():
                try:
                    bull_runs.append(await bullmq_once(h, client, c))
                except EmqError as e:
                    bull_runs.append({"client": client, "concurrency_per_worker": c,
                                      "error": str(e)})  # fmt: skip
                got = bull_runs[-1].get(figure, "failed")
                say(f"bullmq {client} concurrency {c}: {got} {figure}")
            emq_runs.append(await emq_once(h))
            say(f"emq: {emq_runs[-1][figure]} {figure}")
            doc["contention"] = contention.read()
    return emq_runs, bull_runs


async def _both(duration_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    per_tenant = max(100, int(JOBS_PER_TENANT_PER_S * duration_s))
    doc: dict[str, Any] = {"bench": "peers", "tenants": TENANTS, "jobs_per_tenant": per_tenant,
                           "body_bytes": len(BODY), "emq_topic_qps": QPS}  # fmt: skip
    emq_runs, bull_runs = await take_turns(
        doc,
        lambda h: emq_run(h, per_tenant),
        lambda h, client, c: bullmq_run(h, per_tenant, client, c),
        BULLMQ_RUNS,
        "jobs_per_s",
        say,
    )
    doc["emq"] = best(emq_runs)
    doc["emq_runs"] = emq_runs
    doc["bullmq_runs"] = bull_runs
    if any("error" not in r for r in bull_runs):
        doc["bullmq"] = best(bull_runs)
        doc["emq_over_bullmq"] = compare(doc["emq"], doc["bullmq"])
        # The fastest BullMQ run need not be its leanest: the ratio to the leanest too.
        doc["emq_over_bullmq_leanest"] = leanest_ratio(doc["emq"], bull_runs)
    doc["machine"] = describe()
    return doc


def run(duration_s: float, say: Callable[[str], None]) -> dict[str, Any]:
    return run_both(_both, duration_s, say)


def run_both(
    both: Callable[[float, Callable[[str], None]], Coroutine[Any, Any, dict[str, Any]]],
    duration_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """A peers workload's ``both`` (EMQ and BullMQ taking turns) on uvloop, its duration
    checked first."""
    import uvloop

    if duration_s <= 0:
        raise EmqError("--duration-s must be greater than 0")
    return uvloop.run(both(duration_s, say))


def summary(doc: dict[str, Any]) -> str:
    """The figures as a few lines of text."""
    lines = [f"{doc['tenants']} tenants x {doc['jobs_per_tenant']} jobs, {doc['body_bytes']} B"]
    rows = [("EMQ", doc["emq"])]
    if "bullmq" in doc:
        b = doc["bullmq"]
        version = doc["npm_versions"]["bullmq"]
        name = f"BullMQ {version} ({b['client']} c={b['concurrency_per_worker']})"
        rows.append((name, doc["bullmq"]))
    for name, r in rows:
        lines.append(
            f"{name:<28} {r['jobs_per_s']:>9} jobs/s  {r['cpu_s_per_1000_jobs']:.3f} CPU-s/1000 "
            f"jobs  {r['jobs_per_cpu_s']:>9} jobs/CPU-s  (Redis "
            f"{r.get('redis_cpu_s_per_1000_jobs', '?')} CPU-s/1000 jobs)"
        )
    if "emq_over_bullmq" in doc:
        c = doc["emq_over_bullmq"]
        verdict = "pass" if c["pass"] else "FAIL"
        lines.append(
            f"EMQ/BullMQ jobs per core {c['jobs_per_core_ratio']} (target {c['target']}: "
            f"{verdict}); jobs/s {c['jobs_per_s_ratio']}; over BullMQ's leanest run "
            f"{doc.get('emq_over_bullmq_leanest')}"
        )
    else:
        lines.append(f"BullMQ not measured: {doc.get('bullmq_error', 'every run failed')}")
    return "\n".join(lines)
