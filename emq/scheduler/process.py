"""``emq scheduler``: a process that only fires schedules, until SIGTERM or SIGINT.

It opens the Redis queues and schedules and the ZooKeeper config store (topics, cached), runs
one :class:`~emq.scheduler.firer.Firer` and, with ``--metrics-port``, serves its metrics. Beside
other ``emq scheduler`` processes and the API's firers it is safe by construction (see
:mod:`emq.scheduler.firer`): run one, several, or none if the API processes fire.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from emq.compose import open_config, open_queues, open_schedules
from emq.core.settings import Settings
from emq.scheduler.firer import Firer, SchedulerMetrics
from emq.scheduler.settings import SchedulerSettings

log = logging.getLogger(__name__)


async def run_scheduler(
    settings: Settings, scheduler: SchedulerSettings, metrics_port: int
) -> None:
    queues = await open_queues(settings)
    try:
        config = await open_config(settings)
    except BaseException:
        await queues.aclose()
        raise
    store = open_schedules(settings)
    metrics = SchedulerMetrics()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = await _serve_metrics(metrics, metrics_port) if metrics_port else None
    try:
        log.info("emq scheduler firing (%s)", settings.namespace.value)
        print("emq scheduler firing", flush=True)
        await Firer(store, config, queues, scheduler, metrics=metrics).run(stop)
    finally:
        if runner is not None:
            await runner.cleanup()
        await store.aclose()
        await config.aclose()
        await queues.aclose()


async def _serve_metrics(metrics: SchedulerMetrics, port: int) -> web.AppRunner:
    async def handle(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner
