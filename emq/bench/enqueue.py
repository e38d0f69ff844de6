"""``emq bench enqueue``: jobs/s and requests/s through the real API.

Starts its own Redis and ZooKeeper (free loopback ports, a temporary directory), one ``emq api``
process, and a load generator in a separate process (``emq.bench.load``), so client, API and
Redis compete for this machine's cores as they would on a small deployment. Three runs: batches
of 1000 jobs (jobs/s), single jobs (requests/s, latency), and the README's producer loop
(``emq.bench.produce``: ``await producer.send(job)`` for ``producer_jobs`` jobs, one Producer
with its defaults; ``producer_send_loop_jobs_per_s``, until every job is answered).

``durability`` (``EMQ_DURABILITY``): ``default`` (Redis with ``appendfsync everysec``),
``fsync`` (Redis started with ``appendfsync always``) or ``replica`` (plus one replica started
by ``deploy/redis.sh --replicaof``; each put waits for its acknowledgement). :func:`compare`
runs the three one after the other, on fresh servers each, for docs/guides/durability.md.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from emq.bench.machine import describe
from emq.core.errors import EmqError
from emq.rigs.procs import Proc
from emq.stack import Service, free_port

ADMIN_TOKEN = "bench-admin-token"
TARGETS = {"jobs_per_s": 30_000, "requests_per_s": 4_000, "producer_send_loop_jobs_per_s": 20_000}
PRODUCER_JOBS = 100_000


def api_env(redis: Service, zk: Service, base: str, **extra: str) -> dict[str, str]:
    """The environment of an ``emq api`` the benches start on ``redis`` and ``zk`` (no EMQ_*
    setting of the caller's leaks in)."""
    return (
        {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        | {
            "EMQ_REDIS_URL": f"redis://{redis.address}/0",
            "EMQ_ZK_HOSTS": zk.address,
            "EMQ_ADMIN_TOKEN": ADMIN_TOKEN,
            "EMQ_API_URL": base,
            "EMQ_LOG_LEVEL": "WARNING",
        }
        | extra
    )


def _call(base: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        base + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _wait_healthy(base: str, proc: Proc, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc.check()
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise EmqError("emq api did not become healthy within 30 s")


def _load(base: str, token: str, batch: int, concurrency: int, duration_s: float) -> dict[str, Any]:
    url = f"{base}/v1/tenants/bench/topics/load/jobs"
    argv = [
        sys.executable,
        "-m",
        "emq.bench.load",
        url,
        token,
        "--batch",
        str(batch),
        "--concurrency",
        str(concurrency),
        "--duration-s",
        str(duration_s),
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=duration_s + 120, check=False
    )
    if done.returncode != 0:
        raise EmqError(f"load generator failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    result |= {"batch": batch, "concurrency": concurrency}
    return result


def _produce(base: str, token: str, jobs: int) -> dict[str, Any]:
    argv = [sys.executable, "-m", "emq.bench.produce", base, token, "bench", "load"]
    argv += ["--jobs", str(jobs)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise EmqError(f"producer loop failed: {done.stderr.strip()[-500:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


DURABILITIES = ("default", "fsync", "replica")


def run(
    duration_s: float = 10.0,
    batch_concurrency: int = 4,
    single_concurrency: int = 64,
    durability: str = "default",
    producer_jobs: int = PRODUCER_JOBS,
) -> dict[str, Any]:
    """The three runs on fresh servers (``producer_jobs=0`` leaves the producer loop out)."""
    if durability not in DURABILITIES:
        raise EmqError(f"durability must be one of {', '.join(DURABILITIES)}")
    fsync = ("--appendfsync", "always") if durability == "fsync" else ()
    with tempfile.TemporaryDirectory(prefix="emq-bench-") as tmp:
        redis = Service("redis", "redis.sh", Path(tmp) / "redis", free_port(), fsync)
        zk = Service("zookeeper", "zookeeper.sh", Path(tmp) / "zk", free_port())
        replica = Service(
            "redis", "redis.sh", Path(tmp) / "replica", free_port(),
            ("--replicaof", "127.0.0.1", str(redis.port)),
        )  # fmt: skip
        redis.start()
        try:
            if durability == "replica":
                replica.start()
                _wait_replica_online(redis)
            zk.start()
            result = _with_api(
                redis,
                zk,
                Path(tmp) / "api.log",
                (duration_s, batch_concurrency, single_concurrency, producer_jobs),
                durability,
            )
            return result | {"durability": durability}
        finally:
            zk.stop()
            replica.stop()
            redis.stop()


def compare(duration_s: float = 10.0, rounds: int = 3) -> dict[str, Any]:
    """:func:`run` per durability mode, ``rounds`` times with the modes interleaved (so a
    neighbour's load falls on every mode alike); per mode the median of each figure."""
    keys = ("jobs_per_s", "requests_per_s", "p50_ms", "p99_ms", "batch_p99_ms")
    samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in DURABILITIES}
    for _ in range(max(1, rounds)):
        for mode in DURABILITIES:
            result = run(duration_s=duration_s, durability=mode, producer_jobs=0)
            samples[mode].append({k: result[k] for k in keys})
    return {
        "bench": "enqueue-durability",
        "rounds": max(1, rounds),
        "modes": {
            mode: {k: statistics.median(s[k] for s in runs) for k in keys}
            for mode, runs in samples.items()
        },
        "samples": samples,
        "machine": describe(),
    }


def _wait_replica_online(primary: Service, timeout_s: float = 30) -> None:
    """Until the primary reports one replica online (its first sync done)."""
    deadline = time.monotonic() + timeout_s
    argv = ["redis-cli", "-h", "127.0.0.1", "-p", str(primary.port), "info", "replication"]
    while time.monotonic() < deadline:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        if "state=online" in done.stdout:
            return
        time.sleep(0.1)
    raise EmqError("the replica did not come online within 30 s")


def _with_api(
    redis: Service,
    zk: Service,
    log: Path,
    load: tuple[float, int, int, int],
    durability: str = "default",
) -> dict[str, Any]:
    """One ``emq api`` (a :class:`~emq.rigs.procs.Proc`) and the three runs against it;
    ``load`` is (seconds per run, batch concurrency, single-job concurrency, producer jobs)."""
    duration_s, batch_c, single_c, producer_jobs = load
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = api_env(redis, zk, base, EMQ_DURABILITY=durability)
    api = Proc("api", ["api"], env, log)
    try:
        _wait_healthy(base, api)
        token = _call(base, "POST", "/v1/tenants", {"tenant": "bench"})["token"]
        _call(
            base,
            "POST",
            "/v1/tenants/bench/topics",
            {"topic": "load", "qps": 10_000, "max_backlog": 1_000_000_000},
        )
        batch = _load(base, token, 1000, batch_c, duration_s)
        single = _load(base, token, 1, single_c, duration_s)
        produce = _produce(base, token, producer_jobs) if producer_jobs else None
    finally:
        api.stop(30)
    producer = {"producer_send_loop_jobs_per_s": produce["jobs_per_s"]} if produce else {}
    return {
        "bench": "enqueue",
        "jobs_per_s": batch["jobs_per_s"],
        "requests_per_s": single["requests_per_s"],
        "p50_ms": single["p50_ms"],
        "p99_ms": single["p99_ms"],
        "batch_p50_ms": batch["p50_ms"],
        "batch_p99_ms": batch["p99_ms"],
        **producer,
        "targets": TARGETS,
        "runs": {"batch_1000": batch, "single": single, "producer_send_loop": produce},
        "machine": describe(),
    }
