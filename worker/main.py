"""``emq worker``: build a worker from settings and run it until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import resource
import signal
import socket
from collections.abc import Callable

from aiohttp import web

from emq.core.demand import DemandBoard
from emq.core.endpoints import EndpointBoard
from emq.core.errors import ConfigError
from emq.core.interfaces import AssignmentSource, ConfigStore, GroupOwner, HistoryStore
from emq.core.jobs import JobStore
from emq.core.model import Namespace
from emq.core.replays import ReplayStore
from emq.core.supervision import start_supervised
from worker.metrics import WorkerMetrics
from worker.pushers import make_pusher
from worker.replay import ReplayMover
from worker.runtime import Worker
from worker.settings import WorkerSettings
from worker.ssrf import AddressPolicy, IPNetwork

log = logging.getLogger(__name__)


# A young-generation collection every 50 000 net allocations instead of 700 (and an older one
# every 10 of those): see tune_gc. The young collections of a busy worker walk the jobs fetched
# since the last one (buffered, alive); at 10 000 both generations were collected five times as
# often, and each walked them again: W2 --noop spent 0.77-1.0 s of its ~9 s
# collecting against 0.39-0.50 s at 50 000 and 0.35 s at 100 000 (``emq bench dispatch
# --workload W2 --noop --json``, the worker's gc_s, runs alternated). Not higher: cyclic garbage
# (a failed push's exception, its traceback and frames) waits for the young collection, and the
# worker's RSS after owning 10 000 queues was already 0.7 MiB higher at 50 000 (W4).
GC_THRESHOLDS = (50_000, 10, 10)


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def tune_gc() -> None:
    """Set the process's garbage collector up for a worker; call once, after start-up.

    A worker holds seconds of quota of every group it owns in its buffers, and a fetch adds
    thousands of jobs at once; with CPython's default thresholds the growing heap sets off a
    full collection every time it grows by a quarter, and each walks every buffered job and
    every object made at import time. That cost a third of the CPU of a worker delivering from
    3000 backlogged queues. Freezing what exists after start-up takes it out of every later
    collection; the higher thresholds make collections rarer (reference counting frees almost
    everything a job allocates, so little waits for the collector meanwhile).
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


FD_HEADROOM = 1024  # descriptors beyond the pushes: Redis, ZooKeeper, metrics, DNS, logs


def raise_fd_limit(max_in_flight: int) -> int:
    """Raise this process's open-file limit to its hard limit; the soft limit now in force.

    Every push in flight holds a socket, and a worker lets thousands wait on slow or hanging
    endpoints (``EMQ_WORKER_MAX_IN_FLIGHT``); the usual soft limit of 1024 would turn the
    1025th into ``EMFILE`` for every topic (and for Redis reconnects). The hard limit is the
    operator's to set (``LimitNOFILE=`` in the systemd unit, ``ulimit -Hn``): under what the
    pushes need, say so once at start.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:  # e.g. over fs.nr_open
            log.warning("open-file limit left at %d (raising it to %d failed: %s)", soft, target, e)
    if soft != resource.RLIM_INFINITY and soft < max_in_flight + FD_HEADROOM:
        log.warning(
            "open-file limit %d is under EMQ_WORKER_MAX_IN_FLIGHT (%d) + %d: pushes past it fail "
            "with 'too many open files'; raise the hard limit (LimitNOFILE=)",
            soft,
            max_in_flight,
            FD_HEADROOM,
        )
    return soft


async def _serve_metrics(
    metrics: WorkerMetrics, worker: Worker, host: str, ports: range
) -> tuple[web.AppRunner, int]:
    """Serve /metrics and /healthz on the first free port of ``ports``; (runner, port)."""

    async def healthz(request: web.Request) -> web.Response:
        return health_response(worker)

    app = web.Application()
    app.router.add_get("/metrics", metrics.handle)
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for port in ports:
        try:
            await web.TCPSite(runner, host, port).start()
            return runner, port
        except OSError as e:
            if e.errno != errno.EADDRINUSE or len(ports) == 1:
                await runner.cleanup()
                raise ConfigError(
                    f"EMQ_WORKER_METRICS_PORT: cannot serve metrics on {host}:{port}: "
                    f"{e.strerror or e} (set another port, 'auto' or 0)"
                ) from None
    await runner.cleanup()
    raise ConfigError(
        f"EMQ_WORKER_METRICS_PORT=auto: ports {ports.start}-{ports.stop - 1} on {host} are all "
        "taken (set a port or 0)"
    )


def health_response(worker: Worker) -> web.Response:
    """200 while Redis answered the worker's last call, else 503 with the reason.

    Read from the queue backend's seam (what the worker's own calls found, at least one a
    second from the ready-signal listener), so a health check costs Redis nothing. Loops still
    paused by an outage are listed (they resume within a second of Redis answering).
    """
    redis = worker.queues.health
    body: dict[str, object] = {
        "status": "ok" if redis.up else "unavailable",
        "worker": worker.id,
        "groups": len(worker.groups),
        "redis": redis.describe(),
    }
    paused = worker.outage.paused()
    if paused:
        body["paused"] = {what: round(s, 1) for what, s in sorted(paused.items())}
    return web.json_response(body, status=200 if redis.up else 503)


async def run_worker(
    worker_id: str,
    namespace: Namespace,
    settings: WorkerSettings,
    *,
    queues: GroupOwner,
    config: ConfigStore,
    assignment: AssignmentSource,
    history: HistoryStore | None,
    allow: tuple[IPNetwork, ...],
    max_group_qps: int,
    stop: asyncio.Event | None = None,
    assignment_task: bool = True,
    jobs: JobStore | None = None,
    replays: ReplayStore | None = None,
    endpoints: EndpointBoard | None = None,
    demand: DemandBoard | None = None,
) -> None:
    """Run one worker (the caller owns and closes the backends); with ``replays`` it also takes
    its turn at pacing DLQ replays (:mod:`worker.replay`)."""
    stop = stop or asyncio.Event()
    raise_fd_limit(settings.max_in_flight)
    tune_gc()
    loop = asyncio.get_running_loop()
    hurry: list[Callable[[], None]] = []  # the worker's, once built

    def on_signal() -> None:  # the first drains for the shutdown grace, a second stops at once
        if stop.is_set():
            for then in hurry:
                then()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    async with make_pusher(settings, AddressPolicy(allow)) as pusher:
        worker = Worker(
            worker_id,
            namespace,
            settings,
            queues=queues,
            config=config,
            assignment=assignment,
            pusher=pusher,
            history=history,
            max_group_qps=max_group_qps,
            jobs=jobs,
            endpoints=endpoints,
            demand=demand,
        )
        hurry.append(worker.hurry)
        runner = None
        ports = settings.metrics_ports()
        if ports:
            runner, port = await _serve_metrics(
                worker.metrics, worker, settings.metrics_host, ports
            )
            log.info("worker %s serves /metrics on %s:%d", worker_id, settings.metrics_host, port)
            # Several workers per host each take a port: the fleet says which one is whose.
            host = settings.metrics_host
            host = socket.gethostname() if host in ("", "0.0.0.0", "::") else host
            assignment.advertise({"metrics": f"{host}:{port}"})
        follow = (
            start_supervised("assignment follower", assignment.run) if assignment_task else None
        )
        mover = (
            start_supervised("replay mover", ReplayMover(replays, worker_id).run)
            if replays
            else None
        )
        print(f"emq worker {worker_id} running", flush=True)
        try:
            await worker.run(stop)
        finally:
            for task in (follow, mover):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
            if runner is not None:
                await runner.cleanup()
