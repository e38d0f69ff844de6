"""``emq demo``: the whole system on this machine, with one noisy tenant and a hanging endpoint.

Starts (or reuses) the local stack, one ``emq api``, three ``emq worker`` processes joined
through ZooKeeper and a local sink (allowlisted), creates four tenants and drives them:

* ``noisy``: quota 100 QPS, offered 1000 jobs/s: held to its quota, its backlog grows;
* ``steady-a``, ``steady-b``: offered less than their quotas: delivered as offered;
* ``stuck``: its endpoint never answers: it occupies only its own concurrency slots.

A live table (rich) shows per topic the quota, offered/s, delivered/s, backlog, p99 latency and
the owning workers. At the end (Ctrl-C or ``--duration``) it prints a summary (one JSON object
with ``--json``), exports the recorded history and runs the capacity planner on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from emq.client import Client
from emq.core.errors import BackendUnavailable, EmqError
from emq.core.settings import Settings
from emq.rigs.procs import Proc, stop_all
from emq.rigs.sink import Sink
from emq.stack import free_port, local_stack

WINDOW_S = 5  # delivered/s is averaged over the last few full seconds


@dataclass
class DemoTopic:
    tenant: str
    topic: str
    qps: int
    offer: int  # jobs per second sent by the load generator
    hang: bool = False
    sent: int = 0
    # the sink's own counts of this topic (see demo_sink)
    latencies: list[float] = field(default_factory=list)
    per_second: dict[int, int] = field(default_factory=dict)
    backlog: int = 0
    owners: str = "-"

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.topic}"

    def delivered_per_s(self, now: float) -> float:
        last = int(now) - 1
        seconds = range(last - WINDOW_S + 1, last + 1)
        return sum(self.per_second.get(s, 0) for s in seconds) / WINDOW_S

    def p99_ms(self) -> float:
        if not self.latencies:
            return 0.0
        del self.latencies[:-5000]  # the latest few thousand are enough for a p99
        ordered = sorted(self.latencies)
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1)


def demo_topics() -> list[DemoTopic]:
    return [
        DemoTopic("noisy", "events", qps=100, offer=1000),
        DemoTopic("steady-a", "orders", qps=80, offer=50),
        DemoTopic("steady-b", "alerts", qps=60, offer=30),
        DemoTopic("stuck", "webhooks", qps=50, offer=10, hang=True),
    ]


# ------------------------------------------------------------------ the sink and the processes


def demo_sink(topics: list[DemoTopic]) -> Sink:
    """The one sink (:mod:`emq.rigs.sink`) set up for the demo: ``/t/<tenant>/<topic>``, counts
    and latencies (``X-Demo-Sent``) only, the hanging topics held until the worker gives up."""
    sink = Sink(keep_deliveries=False, latency_header="X-Demo-Sent")
    for t in topics:
        sink.behaviour[t.key].hang = t.hang
        t.per_second = sink.stats.per_second[t.key]
        t.latencies = sink.stats.latencies[t.key]
    return sink


def start_processes(env: dict[str, str], log_dir: Path, workers: int) -> list[Proc]:
    """``emq api`` and ``workers`` fleet workers, logs under ``log_dir``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = [Proc("api", ["api"], env, log_dir / "api.log")]
    for i in range(workers):
        name = f"worker-{i + 1}"
        procs.append(Proc(name, ["worker", "--id", f"demo-w{i + 1}"], env, log_dir / f"{name}.log"))
    return procs


def check(procs: list[Proc]) -> None:
    for proc in procs:
        proc.check()


@contextlib.contextmanager
def stack_running(settings: Settings) -> Iterator[bool]:
    """Start the local stack unless it already runs; stop it afterwards only if we started it."""
    services = local_stack(settings)
    started = [s for s in services if not s.status().running]
    for s in started:
        s.start()
    try:
        yield bool(started)
    finally:
        for s in reversed(started):
            s.stop()


# ------------------------------------------------------------------ the run


class Demo:
    def __init__(
        self, settings: Settings, duration_s: float | None, workers: int, out_dir: Path
    ) -> None:
        self.settings = settings
        self.duration_s = duration_s
        self.workers = workers
        self.out_dir = out_dir
        self.topics = demo_topics()
        self.admin_token = settings.admin_token or secrets.token_urlsafe(24)
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self.started = 0.0

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
        return keep | {
            "EMQ_REDIS_URL": self.settings.redis_url,
            "EMQ_ZK_HOSTS": self.settings.zk_hosts,
            "EMQ_REDIS_KEY_PREFIX": self.settings.redis_key_prefix,
            "EMQ_ZK_ROOT": self.settings.zk_root,
            "EMQ_NAMESPACE": self.settings.namespace.value,
            "EMQ_ADMIN_TOKEN": self.admin_token,
            "EMQ_API_URL": self.api_url,
            "EMQ_PUSH_ALLOW_CIDRS": "127.0.0.0/8",
            "EMQ_WORKER_METRICS_PORT": "0",
            "EMQ_WORKER_REQUEST_TIMEOUT_S": "5",
            "EMQ_WORKER_HISTORY_INTERVAL_S": "5",
            "EMQ_API_HISTORY_INTERVAL_S": "5",
            "EMQ_LOG_LEVEL": "INFO",
            # the credentials, when set, so the demo's processes make and read secured nodes
            "EMQ_ZK_AUTH": self.settings.zk_auth,
            "EMQ_ZK_PREVIOUS_AUTH": self.settings.zk_previous_auth,
        }

    async def run(self, stop: asyncio.Event, view: Any) -> dict[str, Any]:
        procs = start_processes(self.env(), self.out_dir / "logs", self.workers)
        try:
            async with (
                demo_sink(self.topics).serving() as sink,
                Client(self.api_url, self.admin_token) as client,
            ):
                await self._wait_healthy(client, procs)
                await self._create(client, sink)
                self.started = time.time()
                load = [asyncio.create_task(self._offer(client, t, sink)) for t in self.topics]
                watch = asyncio.create_task(self._watch(client))
                try:
                    await self._until_done(stop, procs, view)
                finally:
                    for task in [*load, watch]:
                        task.cancel()
                    await asyncio.gather(*load, watch, return_exceptions=True)
                return self.summary()
        finally:
            stop_all(procs)

    async def _wait_healthy(self, client: Client, procs: list[Proc]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            check(procs)
            with contextlib.suppress(EmqError, OSError):
                await client.health()
                return
            await asyncio.sleep(0.2)
        raise BackendUnavailable("emq api did not become healthy within 60 s")

    async def _create(self, client: Client, sink: Sink) -> None:
        for t in self.topics:
            with contextlib.suppress(EmqError):  # a tenant from an earlier demo run is fine
                await client.create_tenant(t.tenant)
            try:
                await client.create_topic(t.tenant, t.topic, t.qps, endpoint_concurrency=8)
            except EmqError:
                await client.update_topic(t.tenant, t.topic, qps=t.qps, paused=False)

    async def _offer(self, client: Client, t: DemoTopic, sink: Sink) -> None:
        """Send ``t.offer`` jobs per second in ten slices per second."""
        url = sink.url(t.key)
        tick = 0.1
        next_at = time.monotonic()
        carry = 0.0
        while True:
            carry += t.offer * tick
            n, carry = int(carry), carry - int(carry)
            if n:
                now = f"{time.time():.6f}"
                jobs = [
                    {"url": url, "headers": {"X-Demo-Sent": now}, "body": {"i": t.sent + i}}
                    for i in range(n)
                ]
                with contextlib.suppress(EmqError):
                    await client.enqueue(t.tenant, t.topic, jobs)
                    t.sent += n
            next_at += tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def _watch(self, client: Client) -> None:
        """Backlogs from the API and owners from the fleet view, every second."""
        while True:
            for t in self.topics:
                with contextlib.suppress(EmqError):
                    shown = await client.get_topic(t.tenant, t.topic)
                    t.backlog = sum(shown["backlog"].values()) + shown.get("delayed", 0)
            with contextlib.suppress(EmqError, KeyError, TypeError):
                self._owners(await client.request("GET", "v1/workers"))
            await asyncio.sleep(1.0)

    def _owners(self, fleet: Any) -> None:
        owners: dict[str, set[str]] = {}
        for worker in fleet.get("workers", []):
            for group in worker.get("groups", []):
                name = group["group"] if isinstance(group, dict) else str(group)
                parts = name.split("/")
                if len(parts) >= 3:
                    owners.setdefault(f"{parts[1]}/{parts[2]}", set()).add(worker["id"])
        for t in self.topics:
            t.owners = ", ".join(sorted(owners.get(t.key, set()))) or "-"

    async def _until_done(self, stop: asyncio.Event, procs: list[Proc], view: Any) -> None:
        while not stop.is_set():
            check(procs)
            view(self)
            if self.duration_s is not None and time.time() - self.started >= self.duration_s:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)

    def rows(self) -> list[dict[str, Any]]:
        now = time.time()
        elapsed = max(1e-6, now - self.started)
        return [
            {
                "tenant": t.tenant,
                "topic": t.topic,
                "quota": t.qps,
                "offered_per_s": round(t.sent / elapsed, 1),
                "delivered_per_s": round(t.delivered_per_s(now), 1),
                "backlog": t.backlog,
                "p99_ms": t.p99_ms(),
                "owners": t.owners,
                "hanging_endpoint": t.hang,
            }
            for t in self.topics
        ]

    def summary(self) -> dict[str, Any]:
        rows = self.rows()
        first, last = int(self.started) + 2, int(time.time()) - 1  # full seconds, after warm-up
        for row, t in zip(rows, self.topics, strict=True):
            counts = [t.per_second.get(s, 0) for s in range(first, last)]
            row["max_delivered_in_1s"] = max(counts, default=0)
            row["max_over_quota"] = round(max(counts, default=0) / t.qps, 3)
            row["mean_delivered_per_s"] = round(sum(counts) / len(counts), 1) if counts else 0.0
        return {"duration_s": round(time.time() - self.started, 1), "topics": rows}


def render(console: Any) -> Any:
    """A view function drawing the live table with rich (or plain lines when not a terminal)."""
    from rich.live import Live
    from rich.table import Table

    live: Live | None = None

    def view(demo: Demo) -> None:
        nonlocal live
        table = Table(title=f"EMQ demo — {time.time() - demo.started:5.0f} s (Ctrl-C to stop)")
        for column in (
            "topic",
            "quota",
            "offered/s",
            "delivered/s",
            "backlog",
            "p99 ms",
            "workers",
        ):
            table.add_column(column, justify="left" if column in ("topic", "workers") else "right")
        for r in demo.rows():
            name = f"{r['tenant']}/{r['topic']}" + (" (hangs)" if r["hanging_endpoint"] else "")
            table.add_row(
                name,
                str(r["quota"]),
                f"{r['offered_per_s']:.0f}",
                f"{r['delivered_per_s']:.0f}",
                str(r["backlog"]),
                f"{r['p99_ms']:.0f}",
                r["owners"],
            )
        if not console.is_terminal:
            return
        if live is None:
            live = Live(table, console=console, refresh_per_second=2, transient=False)
            live.start()
        else:
            live.update(table)

    def close() -> None:
        if live is not None:
            live.stop()

    view.close = close  # type: ignore[attr-defined]
    return view


def plan_history(settings: Settings, out_dir: Path) -> dict[str, str]:
    """Export what the demo recorded and run the planner on it; where the results are.

    The planner needs PySpark, EMQ's ``spark`` extra: an install without it says so instead."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return {"skipped": "the capacity plan needs PySpark: pip install 'emq[spark]'"}
    history, plan = out_dir / "history", out_dir / "plan"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")} | {
        "EMQ_REDIS_URL": settings.redis_url,
        "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
    }
    for args in (
        ["history", "export", "--out", str(history), "--settle-s", "0", "--interval-s", "5"],
        ["plan", "run", "--history", str(history), "--out", str(plan)],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "emq", *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        if done.returncode != 0:
            return {"error": f"emq {' '.join(args[:2])} failed: {done.stderr.strip()[-300:]}"}
    return {
        "history": str(history),
        "plan": str(plan / "plan.json"),
        "report": str(plan / "report.html"),
    }


async def _clean(settings: Settings) -> None:
    """Remove this run's keys and ZooKeeper nodes (the run used a prefix and root of its own)."""
    import redis.asyncio as aioredis

    from emq.compose import zk_client_factory

    client = aioredis.Redis.from_url(settings.redis_url)
    try:
        keys = [
            k async for k in client.scan_iter(match=f"{settings.redis_key_prefix}:*", count=1000)
        ]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
    finally:
        await client.aclose()
    zk = zk_client_factory(settings)(hosts=settings.zk_hosts)
    await asyncio.to_thread(zk.start, 10)
    try:
        await asyncio.to_thread(zk.delete, settings.zk_root, recursive=True)
    finally:
        await asyncio.to_thread(zk.stop)
        zk.close()


def run(
    settings: Settings, duration_s: float | None, as_json: bool, workers: int = 3
) -> dict[str, Any]:
    import uvloop
    from rich.console import Console

    run_id = time.strftime("%Y%m%d%H%M%S")
    settings = replace(settings, redis_key_prefix=f"demo{run_id}", zk_root=f"/emq-demo/r{run_id}")
    out_dir = Path(settings.stack_dir) / "demo" / run_id
    console = Console(stderr=as_json)
    demo = Demo(settings, duration_s, workers, out_dir)

    async def main() -> dict[str, Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        view = render(console)
        try:
            return await demo.run(stop, view)
        finally:
            view.close()

    with stack_running(settings):
        result = uvloop.run(main())
        console.print("exporting the recorded history and running the capacity planner ...")
        result["plan"] = plan_history(settings, out_dir)
        uvloop.run(_clean(settings))
    result["logs"] = str(out_dir / "logs")
    return result


def print_summary(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"\nEMQ demo summary ({result['duration_s']} s)")
    print(
        f"{'topic':<20} {'quota':>6} {'offered/s':>10} {'delivered/s':>12} {'max 1s/quota':>13} "
        f"{'backlog':>8} {'p99 ms':>8}"
    )
    for r in result["topics"]:
        print(
            f"{r['tenant'] + '/' + r['topic']:<20} {r['quota']:>6} {r['offered_per_s']:>10} "
            f"{r['mean_delivered_per_s']:>12} {r['max_over_quota']:>13} {r['backlog']:>8} "
            f"{r['p99_ms']:>8}"
        )
    for key, value in result.get("plan", {}).items():
        print(f"{key}: {value}")
    print(f"logs: {result['logs']}")
