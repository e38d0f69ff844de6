"""Schedule faults on real Redis and ZooKeeper: one of two firers killed with SIGKILL at a tick
boundary, and a three-minute outage caught up by ``latest`` and by ``all``
(the outage simulated by the firers' clock, so it takes no wall time)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from adapters.redis_schedules import RedisScheduleStore
from emq.compose import open_config, open_queues, open_schedules
from emq.core.schedules import Schedule, first_tick
from emq.core.settings import Settings
from emq.rigs.procs import Proc
from emq.scheduler.firer import Firer
from emq.scheduler.settings import SchedulerSettings
from tests.emq.schedule_support import JOB, REF, assert_each_tick_once, make_topic, stored_ticks

pytestmark = pytest.mark.integration


def _env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMQ_")}
    return env | {
        "EMQ_REDIS_URL": settings.redis_url,
        "EMQ_ZK_HOSTS": settings.zk_hosts,
        "EMQ_REDIS_KEY_PREFIX": settings.redis_key_prefix,
        "EMQ_SCHEDULER_LEASE_S": "1",
        "EMQ_SCHEDULER_POLL_S": "0.05",
        "EMQ_SCHEDULER_LOOKAHEAD_S": "0",  # fired at the tick: killed at its boundary
    }


async def _last_tick(store: RedisScheduleStore, least: int, timeout_s: float = 20) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _, state = await store.get(REF, "beat")
        if state.last_tick is not None and state.last_tick >= least:
            return state.last_tick
        await asyncio.sleep(0.05)
    raise AssertionError(f"no tick fired up to {least} within {timeout_s} s")


async def test_sigkill_at_a_tick_boundary_leaves_one_job_per_tick(
    settings: Settings, tmp_path: Path
) -> None:
    queues, config = await open_queues(settings), await open_config(settings)
    store = open_schedules(settings)
    procs: list[Proc] = []
    try:
        topic = await make_topic(config)
        beat = Schedule(REF, "beat", "* * * * * *", "UTC", JOB, catch_up="all", catch_up_max=100)
        await store.create(beat, first_tick(beat, time.time()))
        env = _env(settings)
        a, b = (Proc(f"firer-{n}", ["scheduler"], env, tmp_path / f"{n}.log") for n in "ab")
        procs += [a, b]
        while a.log_count("firing") + b.log_count("firing") < 2:  # two firers at once
            a.check()
            b.check()
            await asyncio.sleep(0.05)
        await _last_tick(store, int(time.time()) + 1)
        # just after a second's tick is due: a firer is claiming, putting or advancing it
        await asyncio.sleep(1 - time.time() % 1 + 0.02)
        a.kill()
        killed_at = int(time.time())
        await _last_tick(store, killed_at + 2)  # the other one goes on, after A's lease
        b.check()
        assert b.stop() == 0
        ticks = await stored_ticks(queues, topic, "beat")
        assert_each_tick_once(ticks)
        assert ticks[0] < killed_at and ticks[-1] >= killed_at + 2
    finally:
        for p in procs:
            p.kill()
        for closing in (store, config, queues):
            await closing.aclose()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("policy", "fired"), [("latest", [0, 180]), ("all", [0, 60, 120, 180])])
async def test_a_three_minute_outage_is_caught_up_by_policy(
    settings: Settings, policy: str, fired: list[int]
) -> None:
    queues, config = await open_queues(settings), await open_config(settings)
    store = open_schedules(settings)
    try:
        topic = await make_topic(config)
        minute = (int(time.time()) // 60 + 1) * 60
        clock = Clock(minute - 5)
        beat = Schedule(REF, "beat", "* * * * *", "UTC", JOB, catch_up=policy)
        await store.create(beat, first_tick(beat, clock.now))
        firer = Firer(store, config, queues, SchedulerSettings(grace_s=60), clock=clock)
        clock.now = minute + 0.5
        await firer.step()  # the tick at `minute`; then every firer is down for 3.5 minutes
        clock.now = minute + 210  # +60 and +120 are late (grace 60 s), +180 is 30 s old
        await Firer(store, config, queues, SchedulerSettings(grace_s=60), clock=clock).step()
        await firer.step()  # a second firer at the same moment finds nothing due
        ticks = await stored_ticks(queues, topic, "beat")
        assert [t - minute for t in ticks] == fired
        _, state = await store.get(REF, "beat")
        assert state.fired == len(fired) and state.skipped == 4 - len(fired)
        assert state.late == len(fired) - 2 and state.cursor == minute + 240
    finally:
        for closing in (store, config, queues):
            await closing.aclose()
