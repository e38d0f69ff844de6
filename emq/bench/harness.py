"""The processes of a dispatch benchmark: Redis, the sink, one worker; and how to observe them.

:class:`Harness` starts Redis (``deploy/redis.sh``, AOF on, as deployed) and the sink
(:class:`emq.rigs.procs.SinkProcess`) on free loopback ports in a temporary directory, and stops
both however the benchmark ends (an exception, Ctrl-C, SIGTERM). :class:`WorkerHandle` runs one
worker (:mod:`emq.bench.worker_proc`, a :class:`emq.rigs.procs.Proc`) per workload. CPU time and
memory come from ``/proc`` (no psutil): ``utime + stime`` of ``/proc/<pid>/stat`` in clock ticks,
``VmRSS`` of ``/proc/<pid>/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import resource
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from adapters.redis_queue import RedisQueueBackend, connect
from emq.core.errors import EmqError
from emq.core.interfaces import PutItem
from emq.core.model import Envelope, Job, Namespace, QueueRef, TopicRef
from emq.rigs.netdelay import DelayProcess, redis_hop
from emq.rigs.procs import Proc, SinkProcess
from emq.stack import Service, free_port

TENANT = "bench"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # every topic signs, as real topics do
BODY = '{"bench":true,"n":1}'
HEADERS = {"Content-Type": "application/json"}
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_ids = itertools.count()


# --------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (clock-tick resolution)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # fields 14 and 15 of proc(5)


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class CpuMeter:
    """CPU share of some processes over a stretch of wall-clock time."""

    pids: dict[str, int]

    def start(self) -> CpuMeter:
        self._wall = time.monotonic()
        self._cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def read(self) -> dict[str, float]:
        """Per process: CPU seconds used since :meth:`start`; plus ``wall_s``."""
        out = {name: cpu_seconds(pid) - self._cpu[name] for name, pid in self.pids.items()}
        out["wall_s"] = time.monotonic() - self._wall
        return out


def run_delay_s(pid: int) -> float:
    """Seconds the main thread of process ``pid`` (a worker's event loop) has spent runnable
    but waiting for a CPU so far: the second field of ``/proc/<pid>/schedstat``."""
    with open(f"/proc/{pid}/schedstat") as fh:
        return int(fh.read().split()[1]) / 1e9


class RunQueueWait:
    """How long a process's main thread waited for a CPU while it was runnable, sampled every
    ``period_s`` over a stretch of a run: the machine's part in a slow run, told apart from the
    build's (a worker whose loop waits for a CPU turns late, whatever its code does).

    ``read()`` gives the waiting as % of the wall-clock time, over the whole stretch and over
    its worst second (the samples' sliding sum over 1 s)."""

    def __init__(self, pid: int, period_s: float = 0.1) -> None:
        self.pid = pid
        self.period_s = period_s
        self._samples: list[tuple[float, float]] = []  # (monotonic, run delay so far)
        self._task: asyncio.Task[None] | None = None

    def _sample(self) -> None:
        with contextlib.suppress(OSError, IndexError, ValueError):  # (the process ended)
            self._samples.append((time.monotonic(), run_delay_s(self.pid)))

    async def _run(self) -> None:
        while True:
            self._sample()
            await asyncio.sleep(self.period_s)

    def start(self) -> RunQueueWait:
        self._task = asyncio.ensure_future(self._run())
        return self

    def read(self) -> dict[str, float]:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._sample()
        samples = self._samples
        if len(samples) < 2:
            return {"waited_pct": 0.0, "waited_worst_second_pct": 0.0}
        (t0, w0), (t1, w1) = samples[0], samples[-1]
        worst, j = 0.0, 0
        for t, w in samples:
            while samples[j][0] < t - 1.0:
                j += 1
            span = t - samples[j][0]
            if span >= 0.5:  # (a second's window, once samples cover enough of it)
                worst = max(worst, (w - samples[j][1]) / span)
        return {
            "waited_pct": round(100 * (w1 - w0) / max(1e-6, t1 - t0), 1),
            "waited_worst_second_pct": round(100 * worst, 1),
        }


async def json_of(module: str, *args: str, timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    """``python -m module args`` (a bench's client in its own process): its JSON output, or
    None and why (its exit status and the end of its stderr); killed after ``timeout_s``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        return None, f"exited {proc.returncode}: {err.decode(errors='replace')[-500:]}"
    result: dict[str, Any] = json.loads(out)
    return result, ""


def share(used: dict[str, float]) -> dict[str, float]:
    """``read()`` figures as % of one core."""
    wall = used["wall_s"]
    return {k: round(100 * v / wall, 1) for k, v in used.items() if k != "wall_s"}


def cpu_times_s(line: str) -> tuple[float, float, float]:
    """Seconds all cores spent busy, in total, and stolen by the hypervisor, from the first
    line of /proc/stat ("cpu user nice system idle iowait irq softirq steal ..."; steal: time
    a virtual machine's CPUs were ready to run and the host ran something else). Kernels
    without the steal column read 0 there."""
    ticks = [int(v) for v in line.split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    steal = ticks[7] if len(ticks) > 7 else 0
    return (sum(ticks) - idle) / _CLK_TCK, sum(ticks) / _CLK_TCK, steal / _CLK_TCK


def _cpu_times_now() -> tuple[float, float, float]:
    with open("/proc/stat") as fh:
        return cpu_times_s(fh.readline())


def _loadavg() -> float:
    with open("/proc/loadavg") as fh:
        return float(fh.read().split()[0])


class Contention:
    """How busy the machine was with other work while a workload ran.

    On a shared machine the figures of a run depend on what else runs; this says how much did:
    the machine's busy share, the CPU of processes that were not the benchmark's (the
    benchmark itself, its children once reaped, the sink and Redis), and the time the
    hypervisor took from this virtual machine's CPUs (steal).
    """

    def __init__(self, sink_pid: int, redis_pid: int, *others: int) -> None:
        self._pids = {"sink": sink_pid, "redis": redis_pid}
        self._pids |= {f"other{i}": pid for i, pid in enumerate(others)}  # (a network hop)

    def _ours_s(self) -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        servers = sum(cpu_seconds(pid) for pid in self._pids.values())
        return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime + servers

    def start(self) -> Contention:
        self._busy, self._total, self._steal = _cpu_times_now()
        self._ours = self._ours_s()
        self._wall = time.monotonic()
        self._load = _loadavg()
        return self

    def read(self) -> dict[str, Any]:
        busy, total, steal = _cpu_times_now()
        wall = max(1e-6, time.monotonic() - self._wall)
        others = max(0.0, (busy - self._busy) - (self._ours_s() - self._ours))
        return {
            "machine_busy_pct": round(
                100 * (busy - self._busy) / max(1e-6, total - self._total), 1
            ),
            "other_processes_pct_of_core": round(100 * others / wall, 1),
            # (the hypervisor's: counted in the busy share and the others' above, run by none)
            "stolen_pct_of_core": round(100 * (steal - self._steal) / wall, 1),
            "loadavg_1m": [self._load, _loadavg()],
        }


# --------------------------------------------------------------------------- jobs


def topic_ref(name: str) -> TopicRef:
    return TopicRef(Namespace.ONLINE, TENANT, name)


def job_item(
    queue: QueueRef, url: str, headers: dict[str, str] | None = None, key: str | None = None
) -> PutItem:
    """One plain job for ``queue`` (an id of the usual length, cheaper to make than a real one)."""
    job_id = f"msg_bench{next(_ids):021d}"
    job = Job(
        url=url,
        headers={**HEADERS, **(headers or {})},
        body=BODY,
        priority=queue.priority,
        key=key,
    )
    return PutItem(queue, job_id, Envelope(job_id, job, int(time.time() * 1000)).encode())


def round_robin(queues: Sequence[QueueRef], per_queue: int) -> Iterable[QueueRef]:
    """``per_queue`` turns over ``queues``: each batch of puts spreads over many queues."""
    for _ in range(per_queue):
        yield from queues


async def preload(
    backend: RedisQueueBackend, items: Iterable[PutItem], batch: int = 1000, parallel: int = 4
) -> int:
    """Store ``items`` with pipelined puts of ``batch`` jobs, ``parallel`` puts at a time."""
    pending: set[asyncio.Task[Any]] = set()
    count = 0
    chunk: list[PutItem] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == batch:
            if len(pending) >= parallel:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.add(asyncio.ensure_future(backend.put(chunk)))
            count, chunk = count + len(chunk), []
    if chunk:
        pending.add(asyncio.ensure_future(backend.put(chunk)))
        count += len(chunk)
    for done in asyncio.as_completed(pending):
        await done
    return count


# --------------------------------------------------------------------------- the worker


class WorkerHandle:
    """One benchmark worker process: start, signal, observe, stop."""

    def __init__(self, tmp: Path, name: str, spec: dict[str, Any]) -> None:
        self.status_path = tmp / f"{name}.status.json"
        self.log_path = tmp / f"{name}.log"
        spec_path = tmp / f"{name}.spec.json"
        spec_path.write_text(json.dumps({**spec, "status_path": str(self.status_path)}))
        self.status_path.unlink(missing_ok=True)  # a snapshot of an earlier worker is not ours
        self.log_path.unlink(missing_ok=True)
        argv = [str(spec_path)]
        self.proc = Proc(name, argv, None, self.log_path, module="emq.bench.worker_proc")
        self.pid = self.proc.pid
        self._seq = 0

    async def ready(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait for the first status snapshot: the worker's event loop runs."""
        return await self._next_status(timeout_s)

    async def status(self, timeout_s: float = 10.0) -> dict[str, Any]:
        """A fresh status snapshot (asked for with SIGUSR2)."""
        self._signal(signal.SIGUSR2)
        return await self._next_status(timeout_s)

    def load_topics(self) -> None:
        self._signal(signal.SIGUSR1)

    async def wait_for(
        self, key: str, at_least: int, timeout_s: float, every_s: float = 0.2
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            status = await self.status()
            if status[key] >= at_least or time.monotonic() > deadline:
                return status
            await asyncio.sleep(every_s)

    async def _next_status(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                status: dict[str, Any] = json.loads(self.status_path.read_text())
            except (OSError, ValueError):
                status = {"seq": 0}
            if status["seq"] > self._seq and status.get("pid") == self.pid:
                self._seq = status["seq"]
                return status
            await asyncio.sleep(0.005)
        raise EmqError(f"benchmark worker gave no status within {timeout_s:.0f} s: {self.log()}")

    def _signal(self, sig: signal.Signals) -> None:
        self._check_alive()
        self.proc.signal(sig)

    def _check_alive(self) -> None:
        if not self.proc.alive:
            raise EmqError(f"benchmark worker exited with {self.stop()}: {self.log()}")

    def log(self, chars: int = 2000) -> str:
        return self.proc.log(chars).strip() or "(no output)"

    def stop(self, timeout_s: float = 30.0) -> int | None:
        return self.proc.stop(timeout_s)


# --------------------------------------------------------------------------- the servers


class Harness:
    """Redis, the sink and the clients the benchmark itself uses (see the module docstring)."""

    def __init__(self, tmp: Path, *, record: bool = False, competitor: bool = False) -> None:
        self.tmp = tmp
        self.record = record  # the sink keeps a delivery log (GET /_log)
        self.competitor = competitor  # W3 runs beside a busy-loop process
        self.redis = Service("redis", "redis.sh", tmp / "redis", free_port())
        self.redis_url = f"redis://{self.redis.address}/0"
        self.redis_pid = 0
        # What the worker (and an API) dials for Redis: Redis itself, or a delaying proxy in
        # front of it (:meth:`redis_link`); the benchmark's own clients always dial Redis.
        self.service_redis_url = self.redis_url
        self.link: DelayProcess | None = None
        self.sink_port = free_port()
        self.sink_base = f"http://127.0.0.1:{self.sink_port}"
        self.sink = SinkProcess(self.sink_port, tmp / "sink.log", record=record)
        self.queues: RedisQueueBackend | None = None
        self.prefix = ""
        self._client: aioredis.Redis | None = None

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, tmp: Path, **options: bool) -> AsyncIterator[Harness]:
        harness = cls(tmp, **options)
        try:
            await harness._start()
            yield harness
        finally:
            await harness._stop()

    async def _start(self) -> None:
        self.redis_pid = self.redis.start()
        await self.sink.start()
        self._client = aioredis.Redis.from_url(self.redis_url)

    async def _stop(self) -> None:
        # Every step runs even if an earlier one fails: nothing may be left running.
        with contextlib.suppress(Exception):
            if self.queues is not None:
                await self.queues.aclose()
        with contextlib.suppress(Exception):
            if self._client is not None:
                await self._client.aclose()
        with contextlib.suppress(Exception):
            await self.sink.stop()
        self.redis.stop()

    @property
    def sink_pid(self) -> int:
        return self.sink.pid

    @contextlib.asynccontextmanager
    async def redis_link(self, rtt_ms: float | None) -> AsyncIterator[None]:
        """Workers started in the block reach Redis through :mod:`emq.rigs.netdelay` adding
        ``rtt_ms`` per round trip (None: directly)."""
        if rtt_ms is None:
            yield
            return
        async with redis_hop(self.redis.port, rtt_ms, self.tmp) as self.link:
            self.service_redis_url = self.link.redis_url()
            try:
                yield
            finally:
                self.service_redis_url = self.redis_url
                self.link = None

    def link_pids(self) -> dict[str, int]:
        """``{"proxy": pid}`` while a link is up, for a :class:`CpuMeter`; else nothing."""
        return {"proxy": self.link.pid} if self.link is not None else {}

    @property
    def link_rtt_ms(self) -> float | None:
        return self.link.rtt_ms if self.link is not None else None

    async def fresh(self, workload: str) -> RedisQueueBackend:
        """An empty Redis and a new key prefix for ``workload``; a backend to put jobs with."""
        if self.queues is not None:
            await self.queues.aclose()
        await self.redis_client.flushall()
        self.prefix = f"bench-{workload.lower()}-{uuid.uuid4().hex[:6]}"
        self.queues = await connect(self.redis_url, cluster=False, prefix=self.prefix)
        await self.sink_call("/_reset")
        return self.queues

    @property
    def redis_client(self) -> aioredis.Redis:
        assert self._client is not None
        return self._client

    async def sink_call(self, path: str) -> dict[str, Any]:
        return await self.sink.get(path)

    async def sink_log(self) -> list[tuple[float, str, str, int, str]]:
        """The sink's whole delivery log (with ``record``): (arrival, topic path, webhook-id,
        status, query) rows in arrival order."""
        rows: list[tuple[float, str, str, int, str]] = []
        start = 0
        while True:
            page = await self.sink_call(f"/_log?from={start}")
            rows += [(r[0], r[1], r[2], r[3], r[4]) for r in page["log"]]
            if page["next"] == start:
                return rows
            start = page["next"]

    async def redis_commands(self) -> int:
        """Commands Redis has processed so far (INFO stats)."""
        info = await self.redis_client.info("stats")
        return int(info["total_commands_processed"])

    def worker(self, name: str, spec: dict[str, Any]) -> WorkerHandle:
        base = {"redis_url": self.service_redis_url, "prefix": self.prefix, "tenant": TENANT}
        return WorkerHandle(self.tmp, name, {**base, **spec})


@contextlib.contextmanager
def stopping(worker: WorkerHandle) -> Any:
    """Stop ``worker`` however the block ends."""
    try:
        yield worker
    finally:
        worker.stop()
