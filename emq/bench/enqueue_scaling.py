"""``emq bench enqueue --api-processes 1,2``: the API with 1, 2, ... processes, in one run.

One Redis and one ZooKeeper (free loopback ports, a temporary directory) for the whole run; for
each process count P, ``emq api --workers P`` (P = 1: the single process, no supervisor) and
two loads through it, each from ``clients`` load generator processes (:mod:`emq.bench.load`; P
by default, 64 requests in flight in all): single jobs (requests/s) and batches of 1000
(jobs/s). The counts take turns, ``rounds`` times, so that a neighbour's load falls on each
alike; per count, the round of median single-job requests/s is reported (all in ``samples``).

On a machine whose cores also run the load generators and Redis, requests/s cannot show what
P processes give when the load comes from elsewhere: the generators cost about as much CPU per
request as the API. So each run also reports where the CPU went, in CPU-seconds per 1000
requests, for the API processes (together), the load generators and Redis, and what one API
core would serve at that cost (``requests_per_api_core_s`` = 1000 / the API's CPU-s per 1000
requests): the per-process capacity, which P processes multiply when they get a core each.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emq.bench.enqueue import _call, _wait_healthy, api_env
from emq.bench.harness import cpu_seconds
from emq.bench.machine import describe
from emq.core.errors import EmqError
from emq.rigs.procs import Proc
from emq.stack import Service, free_port

IN_FLIGHT = 64  # single-job requests in flight, over all load generators
BATCH_IN_FLIGHT = 4  # batch requests in flight, over all load generators


def api_pids(proc: Proc, processes: int) -> list[int]:
    """The pids serving: the process itself, or its supervisor's children."""
    if processes == 1:
        return [proc.pid]
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == proc.pid:
                children.append(int(entry))
    return children


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # reaped children: the generators
    return usage.ru_utime + usage.ru_stime


def _generators(
    url: str, token: str, batch: int, in_flight: int, clients: int, duration_s: float
) -> list[subprocess.Popen[str]]:
    per_client = max(1, in_flight // clients)
    argv = [sys.executable, "-m", "emq.bench.load", url, token, "--batch", str(batch)]
    argv += ["--concurrency", str(per_client), "--duration-s", str(duration_s)]
    return [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]


def _collect(generators: list[subprocess.Popen[str]], timeout_s: float) -> list[dict[str, Any]]:
    results = []
    for gen in generators:
        out, err = gen.communicate(timeout=timeout_s)
        if gen.returncode != 0:
            raise EmqError(f"load generator failed: {err.strip()[-500:]}")
        results.append(json.loads(out))
    return results


def _load(
    url: str, token: str, pids: Sequence[int], redis_pid: int, load: tuple[int, int, int, float]
) -> dict[str, Any]:
    """One load (batch, in flight, clients, seconds) and the CPU each side spent on it."""
    batch, in_flight, clients, duration_s = load
    api0, redis0, gen0 = sum(map(cpu_seconds, pids)), cpu_seconds(redis_pid), _children_cpu_s()
    results = _collect(
        _generators(url, token, batch, in_flight, clients, duration_s), duration_s + 120
    )
    api = sum(map(cpu_seconds, pids)) - api0
    redis, gen = cpu_seconds(redis_pid) - redis0, _children_cpu_s() - gen0
    requests = sum(r["requests"] for r in results)
    seconds = max(r["seconds"] for r in results)
    per_1000 = 1000 / max(1, requests)
    return {
        "batch": batch,
        "clients": clients,
        "requests": requests,
        "failed_requests": sum(r["failed_requests"] for r in results),
        "requests_per_s": round(sum(r["requests_per_s"] for r in results), 1),
        "jobs_per_s": round(sum(r["jobs_per_s"] for r in results), 1),
        "p50_ms": max(r["p50_ms"] for r in results),
        "p99_ms": max(r["p99_ms"] for r in results),
        "cpu_s_per_1000_requests": {
            "api": round(api * per_1000, 4),
            "load_generators": round(gen * per_1000, 4),
            "redis": round(redis * per_1000, 4),
        },
        "api_cpu_pct_of_core_per_process": round(100 * api / seconds / len(pids), 1),
        "requests_per_api_core_s": round(requests / api, 1) if api > 0 else None,
        "jobs_per_api_core_s": round(requests * batch / api, 1) if api > 0 else None,
    }


def _with_api(
    redis: Service, zk: Service, processes: int, log: Path, load: tuple[int, float], tag: str
) -> dict[str, Any]:
    clients, duration_s = load
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = api_env(redis, zk, base)
    api = Proc("api", ["api", "--workers", str(processes)], env, log)
    redis_pid = redis.status().pid
    assert redis_pid is not None
    try:
        _wait_healthy(base, api)
        while len(pids := api_pids(api, processes)) < processes:  # the children of a fork
            api.check()
            time.sleep(0.05)
        tenant = f"bench{processes}{tag}"
        token = _tenant(base, tenant)
        url = f"{base}/v1/tenants/{tenant}/topics/load/jobs"
        single = _load(url, token, pids, redis_pid, (1, IN_FLIGHT, clients, duration_s))
        batch = _load(url, token, pids, redis_pid, (1000, BATCH_IN_FLIGHT, clients, duration_s))
    finally:
        api.stop(30)
    return {"processes": processes, "single": single, "batch_1000": batch}


def _tenant(base: str, tenant: str) -> str:
    """A tenant of its own for a run (fresh queues), with its topic ``load``; its token."""
    token = str(_call(base, "POST", "/v1/tenants", {"tenant": tenant})["token"])
    topic = {"topic": "load", "qps": 10_000, "max_backlog": 1_000_000_000}
    _call(base, "POST", f"/v1/tenants/{tenant}/topics", topic)
    return token


def run(
    processes: Sequence[int] = (1, 2),
    duration_s: float = 10.0,
    clients: int | None = None,
    rounds: int = 3,
) -> dict[str, Any]:
    """Each process count on the same servers, ``rounds`` times with the counts interleaved
    (a neighbour's load falls on every count alike); per count the run of median requests/s."""
    if not processes or any(not 1 <= p <= 64 for p in processes):
        raise EmqError("--api-processes takes counts from 1 to 64, e.g. 1,2")
    samples: dict[int, list[dict[str, Any]]] = {p: [] for p in processes}
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp:
        redis = Service("redis", "redis.sh", Path(tmp) / "redis", free_port())
        zk = Service("zookeeper", "zookeeper.sh", Path(tmp) / "zk", free_port())
        redis.start()
        try:
            zk.start()
            for i in range(max(1, rounds)):
                for p in processes:
                    log = Path(tmp) / f"api-{p}-{i}.log"
                    sample = _with_api(redis, zk, p, log, (clients or p, duration_s), f"r{i}")
                    samples[p].append(sample | {"loadavg_1m": os.getloadavg()[0]})
        finally:
            zk.stop()
            redis.stop()
    runs = [_median(s) for s in samples.values()]
    return {
        "bench": "enqueue-scaling",
        "rounds": max(1, rounds),
        "runs": runs,
        **_scaling(runs),
        "samples": samples,
        "machine": describe(),
    }


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The sample of median single-job requests/s (its batch run with it: one API's figures)."""
    ranked = sorted(samples, key=lambda s: s["single"]["requests_per_s"])
    return ranked[len(ranked) // 2]


def _scaling(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests/s of each count over the first's, as measured and as the API's CPU allows."""
    first = runs[0]["single"]
    return {
        "single_requests_per_s": {r["processes"]: r["single"]["requests_per_s"] for r in runs},
        "single_scaling_measured": {
            r["processes"]: round(r["single"]["requests_per_s"] / first["requests_per_s"], 2)
            for r in runs
        },
        "batch_jobs_per_s": {r["processes"]: r["batch_1000"]["jobs_per_s"] for r in runs},
        "single_requests_per_api_core_s": {
            r["processes"]: r["single"]["requests_per_api_core_s"] for r in runs
        },
        "batch_jobs_per_api_core_s": {
            r["processes"]: r["batch_1000"]["jobs_per_api_core_s"] for r in runs
        },
    }


def summary(result: dict[str, Any]) -> str:
    lines = []
    for r in result["runs"]:
        s, b = r["single"], r["batch_1000"]
        cpu = s["cpu_s_per_1000_requests"]
        lines.append(
            f"{r['processes']} process(es): single {s['requests_per_s']} req/s "
            f"(p99 {s['p99_ms']} ms; CPU-s/1000 req: api {cpu['api']}, "
            f"load {cpu['load_generators']}, redis {cpu['redis']}; "
            f"{s['requests_per_api_core_s']} req/s per API core), "
            f"batch {b['jobs_per_s']} jobs/s ({b['jobs_per_api_core_s']} per API core)"
        )
    return "\n".join(lines)
