"""A ZooKeeper outage across schedule ticks: the firer goes on from the topics it has cached,
and every tick before, during and after the outage makes exactly one job.

The test runs its own ZooKeeper (it overrides the session-wide ``zk_server`` fixture), kills it
with SIGKILL across several ticks and starts it again on the same port and data directory.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emq.compose import open_config, open_queues, open_schedules
from emq.core.schedules import Schedule, first_tick
from emq.core.settings import Settings
from emq.scheduler.firer import Firer
from emq.scheduler.settings import SchedulerSettings
from emq.stack import Service, free_port
from tests.conftest import ZK_TICK_MS
from tests.emq.schedule_support import JOB, REF, assert_each_tick_once, make_topic, stored_ticks

pytestmark = pytest.mark.integration


@pytest.fixture
def zk_server(tmp_path: Path) -> Iterator[Service]:
    """A ZooKeeper of this test's own, to kill and restart."""
    service = Service("zookeeper", "zookeeper.sh", tmp_path / "zk", free_port(), (ZK_TICK_MS,))
    service.start()
    yield service
    service.stop()


async def test_ticks_fire_once_across_a_zookeeper_outage(
    settings: Settings, zk_server: Service
) -> None:
    queues, config = await open_queues(settings), await open_config(settings)
    store = open_schedules(settings)
    stop = asyncio.Event()
    task = None
    try:
        topic = await make_topic(config)
        beat = Schedule(REF, "beat", "* * * * * *", "UTC", JOB)
        await store.create(beat, first_tick(beat, time.time()))
        firer = Firer(store, config, queues, SchedulerSettings(poll_s=0.05, lookahead_s=0))
        task = asyncio.create_task(firer.run(stop))
        await asyncio.sleep(1.5)
        pid = zk_server.status().pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        down_from = time.time()
        await asyncio.sleep(2.5)  # two or three ticks with ZooKeeper down
        await asyncio.to_thread(zk_server.start)  # (the firer goes on meanwhile)
        down_to = time.time()
        await asyncio.sleep(1.5)
        assert not task.done()
        stop.set()
        await task
        ticks = await stored_ticks(queues, topic, "beat")
        assert_each_tick_once(ticks)
        during = [t for t in ticks if down_from < t < down_to]
        assert len(during) >= 2, (ticks, down_from, down_to)
        assert ticks[-1] >= int(down_to)
    finally:
        stop.set()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        for closing in (store, config, queues):
            await closing.aclose()
