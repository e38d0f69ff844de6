"""``emq api``: serve the HTTP API on uvloop until SIGTERM/SIGINT, then drain and exit.

Shutdown: stop listening, answer every further response with ``Connection: close``, let the
requests in progress finish (a 202 is only sent once jobs are durable, and a body still
uploading must be read to the end), up to ``shutdown_grace_s``; then close connections and the
Redis and ZooKeeper clients. aiohttp's own cleanup stops reading request bodies at once, so it
only runs after the drain.

Hostile clients are bounded (:mod:`emq.api.guard`): at most ``max_connections`` open at once,
``header_timeout_s`` for a request's headers, ``body_timeout_s`` for its body (where it is read),
``keepalive_timeout_s`` for an idle connection, and ``LINGER_S`` to drain a body nobody reads.

One of several processes (``emq api --workers N``, :mod:`emq.api.supervisor`), it listens with
SO_REUSEPORT, tells its supervisor once it listens, and stops as on SIGTERM if the supervisor
is gone (:class:`Listening`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from emq.api.app import make_app
from emq.api.errors import Handler
from emq.api.guard import ConnectionLimits, GuardedRunner
from emq.api.heap import tune_gc
from emq.api.settings import ApiSettings
from emq.compose import (
    open_changes,
    open_config,
    open_endpoint_board,
    open_fleet_view,
    open_history,
    open_jobs,
    open_plans,
    open_queues,
    open_replays,
    open_rollouts,
    open_schedules,
    open_signal_routes,
    open_subscriptions,
    open_transactions,
)
from emq.core.errors import ConfigError
from emq.core.interfaces import ConfigStore, JobProducer
from emq.core.schedules import ScheduleStore
from emq.core.settings import Settings
from emq.scheduler.settings import SchedulerSettings

log = logging.getLogger(__name__)

LINGER_S = 2.0  # reading (and dropping) a body the handler did not read, before closing
SPARE_FILES = 256  # descriptors beyond the client connections: Redis, ZooKeeper, logs


class Drain:
    """Counts requests in progress; once draining, asks clients to close their connections."""

    def __init__(self) -> None:
        self.in_progress = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.in_progress += 1
        self._idle.clear()
        try:
            response = await handler(request)
            if self.draining:
                response.force_close()
            return response
        finally:
            self.in_progress -= 1
            if self.in_progress == 0:
                self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
            return True
        except TimeoutError:
            return False


@dataclass(frozen=True)
class Listening:
    """How ``serve`` listens: alone (the default), or as one of a supervisor's processes."""

    reuse_port: bool = False  # SO_REUSEPORT: the kernel spreads connections over the processes
    on_ready: Callable[[], None] | None = None  # called once listening
    parent_fd: int | None = None  # readable (EOF) once the supervisor is gone: stop then

    def watch_parent(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        """Stop (gracefully) when the supervisor exits without telling: no orphan serves on."""
        fd = self.parent_fd
        if fd is None:
            return

        def gone() -> None:
            loop.remove_reader(fd)  # level-triggered: it would fire on every iteration
            log.warning("emq api (pid %d): the supervisor is gone; stopping", os.getpid())
            stop.set()

        loop.add_reader(fd, gone)


ALONE = Listening()


async def _listen(runner: GuardedRunner, host: str, port: int, listening: Listening) -> None:
    try:
        await runner.listen(
            host, port, backlog=2048, reuse_address=True, reuse_port=listening.reuse_port or None
        )
    except OSError as e:  # in use, a privileged port, an address not ours: one clear line
        reason = os.strerror(e.errno) if e.errno else str(e)  # (uvloop's text names no errno)
        raise ConfigError(f"cannot listen on {host}:{port}: {reason}") from None


def make_runner(app: web.Application, api: ApiSettings) -> GuardedRunner:
    """The runner of ``emq api``: aiohttp's, with the connection guards and timeouts."""
    return GuardedRunner(
        app,
        ConnectionLimits(api.max_connections, api.header_timeout_s),
        access_log=None,  # per-request logging would cost more than the request itself
        shutdown_timeout=1.0,
        keepalive_timeout=api.keepalive_timeout_s,
        lingering_time=LINGER_S,
    )


def _raise_open_files_limit(wanted: int) -> None:
    """Raise the soft descriptor limit towards ``wanted`` (up to the hard limit): past it,
    accept() fails before the connection limit can answer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            log.warning(
                "open files limited to %d (hard limit); EMQ_API_MAX_CONNECTIONS needs %d",
                new,
                wanted,
            )


def firing(
    store: ScheduleStore, config: ConfigStore, queues: JobProducer, settings: SchedulerSettings
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context that runs a schedule firer while the app runs, its metrics on the
    app's ``/metrics``."""

    async def context(app: web.Application) -> AsyncIterator[None]:
        from emq.api.app import API_KEY
        from emq.scheduler.firer import Firer, SchedulerMetrics

        metrics = SchedulerMetrics(app[API_KEY].metrics.registry)
        firer = Firer(store, config, queues, settings, metrics=metrics)
        stop = asyncio.Event()
        task = asyncio.create_task(firer.run(stop), name="schedule-firer")
        yield
        stop.set()
        await task

    return context


async def serve(
    settings: Settings,
    api: ApiSettings,
    host: str,
    port: int,
    listening: Listening = ALONE,
    scheduler: SchedulerSettings | None = None,
) -> None:
    routes, route_watch = open_signal_routes(settings)  # puts address hints to the owners
    try:
        queues = await open_queues(settings, routes)
    except BaseException:
        if route_watch is not None:
            await route_watch.aclose()
        raise
    try:
        config = await open_config(settings)
    except BaseException:
        await queues.aclose()
        if route_watch is not None:
            await route_watch.aclose()
        raise
    drain = Drain()
    history = open_history(settings)
    fleet = open_fleet_view(settings)
    jobs = open_jobs(settings)
    replays = open_replays(settings)
    transaction_store = open_transactions(settings)
    board = open_endpoint_board(settings)
    plans = open_plans(settings)
    changes = open_changes(settings)
    rollout_store = open_rollouts(settings)
    subscriptions = open_subscriptions(settings)
    schedules = open_schedules(settings)
    app = make_app(
        settings,
        api,
        config,
        queues,
        history,
        fleet,
        jobs,
        replays=replays,
        endpoints=board,
        plan_store=plans,
        subscription_store=subscriptions,
        transaction_store=transaction_store,
        schedules=schedules,
        changes=changes,
        rollout_store=rollout_store,
    )
    app.middlewares.insert(0, drain.middleware)
    scheduler = scheduler or SchedulerSettings()
    if scheduler.in_api:  # every API process fires schedules too (emq.scheduler.firer)
        app.cleanup_ctx.append(firing(schedules, config, queues, scheduler))
    runner = make_runner(app, api)
    _raise_open_files_limit(api.max_connections + SPARE_FILES)
    try:
        await runner.setup()
        await _listen(runner, host, port, listening)
        tune_gc()  # what start-up made stays out of every later collection (emq.api.heap)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        listening.watch_parent(loop, stop)
        log.info("emq api listening on http://%s:%d (%s)", host, port, settings.namespace.value)
        if listening.on_ready is None:
            print(f"emq api listening on http://{host}:{port}", flush=True)
        else:  # the supervisor says so once every process listens
            listening.on_ready()
        await stop.wait()
        started = time.monotonic()
        log.info("emq api stopping: %d requests in progress", drain.in_progress)
        drain.draining = True
        runner.stop_listening()
        if not await drain.wait_idle(api.shutdown_grace_s):
            log.warning("%d requests still running after the grace period", drain.in_progress)
        log.info("emq api drained in %.2f s", time.monotonic() - started)
    finally:
        await runner.cleanup()
        await plans.aclose()
        await changes.aclose()
        await rollout_store.aclose()
        await subscriptions.aclose()
        await schedules.aclose()
        await fleet.aclose()
        await replays.aclose()
        await transaction_store.aclose()
        await jobs.aclose()
        await board.aclose()
        await history.aclose()
        await config.aclose()
        await queues.aclose()
        if route_watch is not None:
            await route_watch.aclose()
