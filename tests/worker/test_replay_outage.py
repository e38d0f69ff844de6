"""A Redis restart under a running replay mover (issue 16, item 4): the mover waits out the
outage without dying, resumes from the stored cursor, and the replay ends with every letter in
its queue exactly once (Redis is this test's own: ``own_redis``, shut down and started again on
the same data)."""

from __future__ import annotations

import asyncio
import time

import pytest

from emq.compose import open_queues, open_replays
from emq.core.model import GroupRef
from emq.core.replays import Replay, ReplayState, new_replay_id
from emq.core.settings import Settings
from tests.conftest import RestartableRedis
from tests.worker.test_replay_mover import REF, _fill, _queued_ids, _replayed, _state_is, _until
from worker.replay import ReplayMover


@pytest.fixture
def redis_url(own_redis: RestartableRedis) -> str:
    return own_redis.url


async def test_the_mover_outlives_a_redis_restart(
    settings: Settings, own_redis: RestartableRedis
) -> None:
    queues, store = await open_queues(settings), open_replays(settings)
    try:
        await _fill(queues, 2, 30)
        replay = Replay(new_replay_id(), REF, 2, 30.0, created_at=time.time())
        replay = await store.create(replay)
        mover = ReplayMover(store, "a", tick_s=0.02, refresh_s=0.2, lease_s=2.0)
        running = asyncio.ensure_future(mover.run())
        await _until(lambda: _replayed(store, replay, 10), 10)
        await asyncio.to_thread(own_redis.stop)
        await asyncio.sleep(1.0)
        assert not running.done()  # the outage is waited out, not fatal
        await asyncio.to_thread(own_redis.start)
        await _until(lambda: _state_is(store, replay, ReplayState.DONE), 20)
        assert not running.done()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        ids = await _queued_ids(queues, 2)
        assert len(ids) == len(set(ids)) == 60
        assert not await queues.list_dead(GroupRef(REF, 1), None, 10)
        assert (await store.get(REF, replay.id)).replayed == 60
    finally:
        await store.aclose()
        await queues.aclose()
